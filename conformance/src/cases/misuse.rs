//! §5.5: every misuse is its own typed error, and the graph works again after `reset()`.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, GraphState, PoolId,
};

use crate::{
    Case,
    case::requirements,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_capturing, expect_err,
        expect_state, leak_checked, new_graph, recaptures_after_reset, replay_on,
    },
};

const SECTION: &str = "5.05 misuse";

pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    let none = requirements::none;
    vec![
        Case::new(
            "5.05a replay before capture: NotCaptured",
            SECTION,
            none,
            replay_before_capture::<B>,
        ),
        Case::new(
            "5.05b pool() before capture: NotCaptured",
            SECTION,
            none,
            pool_before_capture::<B>,
        ),
        Case::new(
            "5.05c instantiate before capture: NotCaptured",
            SECTION,
            none,
            instantiate_before_capture::<B>,
        ),
        Case::new(
            "5.05d capture_begin twice: AlreadyCapturing",
            SECTION,
            none,
            begin_twice::<B>,
        ),
        Case::new(
            "5.05e capture_begin on a captured graph: AlreadyCaptured",
            SECTION,
            none,
            begin_after_capture::<B>,
        ),
        Case::new(
            "5.05f capture_end without capture_begin: NotCapturing",
            SECTION,
            none,
            end_without_begin::<B>,
        ),
        Case::new(
            "5.05g capture on the default stream: StreamNotCapturable",
            SECTION,
            requirements::uncapturable_default_stream,
            capture_default_stream::<B>,
        ),
        Case::new(
            "5.05h debug_dump without debug mode or keep_graph: DebugModeNotEnabled",
            SECTION,
            none,
            dump_without_debug_mode::<B>,
        ),
        Case::new(
            "5.05i debug_dump with debug mode before capture: NotCaptured",
            SECTION,
            none,
            dump_before_capture::<B>,
        ),
        Case::new(
            "5.05j instantiate with keep_graph=false: InstantiateRequiresKeepGraph",
            SECTION,
            none,
            instantiate_without_keep_graph::<B>,
        ),
        Case::new(
            "5.05k raw graph (nodes) without keep_graph: RawGraphUnavailable",
            SECTION,
            none,
            raw_graph_without_keep_graph::<B>,
        ),
        Case::new(
            "5.05l capture_end on another stream: CaptureStreamMismatch, capture goes on",
            SECTION,
            none,
            end_on_other_stream::<B>,
        ),
        Case::new(
            "5.05m capture_begin on a stream another graph captures: error, nothing left capturing",
            SECTION,
            none,
            begin_on_capturing_stream::<B>,
        ),
        Case::new(
            "5.05n invalid pool id: InvalidPoolId",
            SECTION,
            none,
            invalid_pool_id::<B>,
        ),
        Case::new(
            "5.05o unknown capture error mode: UnknownCaptureErrorMode",
            SECTION,
            none,
            unknown_capture_mode::<B>,
        ),
        Case::new(
            "5.05p element-wise ops on different lengths: LengthMismatch",
            SECTION,
            none,
            length_mismatch::<B>,
        ),
    ]
}

fn replay_before_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let stream = b.new_stream().ctx("new_stream")?;
        let _current = b.use_stream(&stream);
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.replay(),
            GraphError::NotCaptured { .. },
            "replay() before capture"
        );
        let mut kept = new_graph(b, GraphOptions::new().keep_graph(true))?;
        expect_err!(
            kept.replay(),
            GraphError::NotCaptured { .. },
            "replay() before capture (keep_graph)"
        );
        expect_state(&g, GraphState::Empty, "after the refused replay")?;
        recaptures_after_reset(b, &mut g)?;
        recaptures_after_reset(b, &mut kept)
    })
}

fn pool_before_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.pool(),
            GraphError::NotCaptured { .. },
            "pool() before capture"
        );
        let mut shared = new_graph(b, GraphOptions::new().pool(b.graph_pool_handle()))?;
        expect_err!(
            shared.pool(),
            GraphError::NotCaptured { .. },
            "pool() before capture (graph given a pool)"
        );
        recaptures_after_reset(b, &mut g)?;
        recaptures_after_reset(b, &mut shared)
    })
}

fn instantiate_before_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let mut kept = new_graph(b, GraphOptions::new().keep_graph(true))?;
        expect_err!(
            kept.instantiate(),
            GraphError::NotCaptured { .. },
            "instantiate() before capture (keep_graph)"
        );
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.instantiate(),
            GraphError::NotCaptured { .. },
            "instantiate() before capture"
        );
        recaptures_after_reset(b, &mut kept)?;
        recaptures_after_reset(b, &mut g)
    })
}

fn begin_twice<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        {
            let _current = b.use_stream(&stream);
            g.capture_begin().ctx("capture_begin")?;
            b.add_scalar(&x, 1.0).ctx("add_scalar")?;
            expect_err!(
                g.capture_begin(),
                GraphError::AlreadyCapturing,
                "second capture_begin()"
            );
            expect_state(&g, GraphState::Capturing, "after the refused capture_begin")?;
            expect_capturing(b, &stream, true, "after the refused capture_begin")?;
            g.capture_end()
                .ctx("capture_end after a refused capture_begin")?;
        }
        replay_on(b, &stream, &mut g)?;
        expect_all(b, &x, 1.0, "replay of the capture that survived")?;
        recaptures_after_reset(b, &mut g)
    })
}

fn begin_after_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        for keep_graph in [false, true] {
            let mut g = new_graph(b, GraphOptions::new().keep_graph(keep_graph))?;
            capture_add_one(b, &stream, &mut g, &x)?;
            let state = g.state();
            {
                let _current = b.use_stream(&stream);
                expect_err!(
                    g.capture_begin(),
                    GraphError::AlreadyCaptured,
                    format!("capture_begin() on a captured graph (keep_graph={keep_graph})")
                );
                expect_capturing(b, &stream, false, "after the refused capture_begin")?;
            }
            expect_state(&g, state, "after the refused capture_begin")?;
            recaptures_after_reset(b, &mut g)?;
        }
        Ok(())
    })
}

fn end_without_begin<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.capture_end(),
            GraphError::NotCapturing,
            "capture_end() on a new graph"
        );
        capture_add_one(b, &stream, &mut g, &x)?;
        expect_err!(
            g.capture_end(),
            GraphError::NotCapturing,
            "capture_end() on a captured graph"
        );
        expect_state(&g, GraphState::Ready, "after the refused capture_end")?;
        recaptures_after_reset(b, &mut g)
    })
}

fn capture_default_stream<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let default = b.default_stream();
        let _current = b.use_stream(&default);
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.capture_begin(),
            GraphError::StreamNotCapturable,
            "capture_begin() on the default stream"
        );
        expect_state(&g, GraphState::Empty, "after the refused capture_begin")?;
        expect_capturing(
            b,
            &default,
            false,
            "default stream after the refused capture",
        )?;
        // The default stream still runs work eagerly.
        let x = b.alloc_from(&[1.0; 4]).ctx("alloc_from")?;
        b.scale(&x, 2.0).ctx("scale on the default stream")?;
        expect_all(b, &x, 2.0, "eager work on the default stream")?;
        recaptures_after_reset(b, &mut g)
    })
}

fn dump_without_debug_mode<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let path = dir.path().join("graph.dot");
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.debug_dump(&path),
            GraphError::DebugModeNotEnabled,
            "debug_dump() before capture without debug mode"
        );
        capture_add_one(b, &stream, &mut g, &x)?;
        expect_err!(
            g.debug_dump(&path),
            GraphError::DebugModeNotEnabled,
            "debug_dump() after capture without debug mode"
        );
        ensure!(
            !path.exists(),
            "a refused debug_dump() wrote {}",
            path.display()
        );
        recaptures_after_reset(b, &mut g)
    })
}

fn dump_before_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let path = dir.path().join("graph.dot");
        let mut g = new_graph(b, GraphOptions::new())?;
        g.enable_debug_mode();
        expect_err!(
            g.debug_dump(&path),
            GraphError::NotCaptured { .. },
            "debug_dump() with debug mode before capture"
        );
        let mut kept = new_graph(b, GraphOptions::new().keep_graph(true))?;
        expect_err!(
            kept.debug_dump(&path),
            GraphError::NotCaptured { .. },
            "debug_dump() with keep_graph before capture"
        );
        recaptures_after_reset(b, &mut g)?;
        recaptures_after_reset(b, &mut kept)
    })
}

fn instantiate_without_keep_graph<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        capture_add_one(b, &stream, &mut g, &x)?;
        expect_err!(
            g.instantiate(),
            GraphError::InstantiateRequiresKeepGraph,
            "instantiate() with keep_graph=false"
        );
        recaptures_after_reset(b, &mut g)
    })
}

fn raw_graph_without_keep_graph<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        expect_err!(
            g.nodes(),
            GraphError::NotCaptured { .. },
            "nodes() before capture"
        );
        capture_add_one(b, &stream, &mut g, &x)?;
        expect_err!(
            g.nodes(),
            GraphError::RawGraphUnavailable,
            "nodes() with keep_graph=false"
        );
        recaptures_after_reset(b, &mut g)
    })
}

fn end_on_other_stream<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let other = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        {
            let _current = b.use_stream(&stream);
            g.capture_begin().ctx("capture_begin")?;
            b.add_scalar(&x, 1.0).ctx("add_scalar")?;
            {
                let _other = b.use_stream(&other);
                expect_err!(
                    g.capture_end(),
                    GraphError::CaptureStreamMismatch,
                    "capture_end() with another stream current"
                );
            }
            expect_state(&g, GraphState::Capturing, "after the refused capture_end")?;
            expect_capturing(b, &stream, true, "after the refused capture_end")?;
            g.capture_end().ctx("capture_end() on the capture stream")?;
        }
        replay_on(b, &stream, &mut g)?;
        expect_all(
            b,
            &x,
            1.0,
            "replay of the capture ended on the right stream",
        )?;
        recaptures_after_reset(b, &mut g)
    })
}

fn begin_on_capturing_stream<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut first = new_graph(b, GraphOptions::new())?;
        let mut second = new_graph(b, GraphOptions::new())?;
        {
            let _current = b.use_stream(&stream);
            first.capture_begin().ctx("capture_begin")?;
            b.add_scalar(&x, 1.0).ctx("add_scalar")?;
            if second.capture_begin().is_ok() {
                second.reset();
                first.reset();
                return Err(
                    "capture_begin() of a second graph on a stream that is capturing succeeded"
                        .into(),
                );
            }
            expect_state(
                &second,
                GraphState::Empty,
                "second graph after its refused capture",
            )?;
            // Whether the refused begin invalidates the first capture is the driver's business;
            // either way the first capture must end cleanly.
            match first.capture_end() {
                Ok(()) => {}
                Err(GraphError::CaptureInvalidated { .. }) => {}
                Err(e) => return Err(format!("capture_end() of the first graph: {e:?}: {e}")),
            }
            expect_capturing(b, &stream, false, "after the first capture ended")?;
        }
        if first.state() == GraphState::Ready {
            replay_on(b, &stream, &mut first)?;
            expect_all(b, &x, 1.0, "replay of the first graph")?;
        }
        recaptures_after_reset(b, &mut first)?;
        recaptures_after_reset(b, &mut second)
    })
}

fn invalid_pool_id<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let bad = PoolId(3, 4);
        expect_err!(
            b.graph(GraphOptions::new().pool(bad)),
            GraphError::InvalidPoolId(_),
            "graph(pool=(3, 4))"
        );
        // (0, 0) means "no pool", as in PyTorch.
        let mut g = new_graph(b, GraphOptions::new().pool(PoolId::NONE))?;
        recaptures_after_reset(b, &mut g)
    })
}

fn unknown_capture_mode<B: Backend>(_b: &B) -> CaseResult {
    let err = expect_err!(
        "strict".parse::<CaptureErrorMode>(),
        GraphError::UnknownCaptureErrorMode(_),
        "parsing \"strict\""
    );
    let text = err.to_string();
    ensure!(
        text == "Unknown capture error mode. Expected `default`, `global`, `thread_local`, or \
                 `relaxed`, got 'strict'",
        "unexpected message: {text}"
    );
    for mode in CaptureErrorMode::ALL {
        let parsed: CaptureErrorMode = mode.as_str().parse().ctx("parsing a mode's own name")?;
        ensure!(parsed == mode, "{} parsed as {parsed:?}", mode.as_str());
    }
    Ok(())
}

fn length_mismatch<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let short = b.alloc_from(&[1.0; 4]).ctx("alloc_from")?;
        let long = b.alloc_from(&[2.0; 8]).ctx("alloc_from")?;
        expect_err!(
            b.copy(&short, &long),
            GraphError::LengthMismatch { .. },
            "copy(4 elements <- 8 elements)"
        );
        expect_err!(
            b.axpy(&long, 1.0, &short),
            GraphError::LengthMismatch { .. },
            "axpy(8 elements += 4 elements)"
        );
        expect_all(b, &short, 1.0, "destination of refused ops")?;
        expect_all(b, &long, 2.0, "destination of refused ops")?;
        Ok(())
    })
}
