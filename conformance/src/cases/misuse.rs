//! §5.5: every misuse is its own typed error, and the graph works again after `reset()`.
//!
//! Most misuses have one shape — a graph of some kind, brought to some state, gets a call it
//! must refuse — so they are rows ([`row`]) of one runner ([`check_misuse`]); the rest
//! (several graphs, graph options, no graph at all, another instance) are cases of their own.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, DeviceBuffer, GraphError, GraphOptions,
    GraphState, PoolId,
};

pub(crate) use self::{Call::*, Expect::*, Kind::*, Setup::*};
use crate::{
    Target,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_err, expect_state, new_graph,
        on_stream, recaptures_after_reset, replay_on,
    },
};

/// The graph a misuse is tried on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `GraphOptions::new()`.
    Plain,
    /// `keep_graph=true`.
    Kept,
    /// `keep_graph=false` with debug mode enabled before capture.
    DebugMode,
    /// Given a pool from `graph_pool_handle()`.
    UserPool,
}

/// Where the graph is when the misuse comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setup {
    /// Never captured.
    Fresh,
    /// In the middle of capturing `x += 1` on the test stream.
    Capturing,
    /// Done capturing `x += 1`.
    Captured,
}

/// The call that must be refused. Each is made with the test stream current unless it says
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `replay()`.
    Replay,
    /// `pool()`.
    Pool,
    /// `instantiate()`.
    Instantiate,
    /// `capture_begin()`.
    CaptureBegin,
    /// `capture_begin()` with the default stream current.
    CaptureBeginOnDefaultStream,
    /// `capture_end()`.
    CaptureEnd,
    /// `capture_end()` with another (idle) stream current.
    CaptureEndOnOtherStream,
    /// `debug_dump(path)` (the file must not be written).
    DebugDump,
    /// `nodes()`.
    Nodes,
}

/// The error the call must give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// [`GraphError::NotCaptured`].
    NotCaptured,
    /// [`GraphError::AlreadyCapturing`].
    AlreadyCapturing,
    /// [`GraphError::AlreadyCaptured`].
    AlreadyCaptured,
    /// [`GraphError::NotCapturing`].
    NotCapturing,
    /// [`GraphError::StreamNotCapturable`].
    StreamNotCapturable,
    /// [`GraphError::CaptureStreamMismatch`].
    CaptureStreamMismatch,
    /// [`GraphError::DebugModeNotEnabled`].
    DebugModeNotEnabled,
    /// [`GraphError::InstantiateRequiresKeepGraph`].
    InstantiateRequiresKeepGraph,
    /// [`GraphError::RawGraphUnavailable`].
    RawGraphUnavailable,
}

impl Expect {
    fn matches(self, e: &GraphError) -> bool {
        match self {
            NotCaptured => matches!(e, GraphError::NotCaptured { .. }),
            AlreadyCapturing => matches!(e, GraphError::AlreadyCapturing),
            AlreadyCaptured => matches!(e, GraphError::AlreadyCaptured),
            NotCapturing => matches!(e, GraphError::NotCapturing),
            StreamNotCapturable => matches!(e, GraphError::StreamNotCapturable),
            CaptureStreamMismatch => matches!(e, GraphError::CaptureStreamMismatch),
            DebugModeNotEnabled => matches!(e, GraphError::DebugModeNotEnabled),
            InstantiateRequiresKeepGraph => {
                matches!(e, GraphError::InstantiateRequiresKeepGraph)
            }
            RawGraphUnavailable => matches!(e, GraphError::RawGraphUnavailable),
        }
    }
}

/// A table row: `call` on each `(graph kind, setup)` must fail with its expected error.
pub(crate) fn row<B: Backend>(
    call: Call,
    variants: &'static [(Kind, Setup, Expect)],
) -> impl Fn(&Target<B>) -> CaseResult + Send + Sync + 'static {
    move |t| {
        for &(kind, setup, expect) in variants {
            check_misuse(t.backend(), kind, setup, call, expect)
                .map_err(|e| format!("{call:?} on a {kind:?} graph, {setup:?}: {e}"))?;
        }
        Ok(())
    }
}

/// The runner: `call` on a `kind` graph in `setup` fails with `expect`, changes neither the
/// graph's state nor which streams capture, a capture in progress goes on and a captured graph
/// still replays, and after `reset()` the graph captures and replays again.
fn check_misuse<B: Backend>(
    b: &B,
    kind: Kind,
    setup: Setup,
    call: Call,
    expect: Expect,
) -> CaseResult {
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let path = dir.path().join("graph.dot");
    let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let other = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, options(b, kind))?;
    if kind == DebugMode {
        g.enable_debug_mode();
    }
    let current = on_stream(b, &stream)?;
    match setup {
        Fresh => {}
        Captured => {
            b.capture_on(&stream, &mut g, || b.add_scalar(&x, 1.0))
                .ctx("capture of x += 1")?;
        }
        Capturing => {
            g.capture_begin().ctx("capture_begin")?;
            b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        }
    }
    let state = g.state();
    let result = {
        let _call_stream = match call {
            CaptureBeginOnDefaultStream => Some(on_stream(b, &b.default_stream())?),
            CaptureEndOnOtherStream => Some(on_stream(b, &other)?),
            _ => None,
        };
        match call {
            Replay => g.replay(),
            Pool => g.pool().map(drop),
            Instantiate => g.instantiate(),
            CaptureBegin | CaptureBeginOnDefaultStream => g.capture_begin(),
            CaptureEnd | CaptureEndOnOtherStream => g.capture_end(),
            DebugDump => g.debug_dump(&path),
            Nodes => g.nodes().map(drop),
        }
    };
    match result {
        Err(e) if expect.matches(&e) => {}
        Err(e) => return Err(format!("expected {expect:?}, got Err({e:?}): {e}")),
        Ok(()) => return Err(format!("expected {expect:?}, got Ok")),
    }
    expect_state(&g, state, "after the refused call")?;
    expect_capturing(b, &stream, setup == Capturing, "after the refused call")?;
    expect_capturing(
        b,
        &b.default_stream(),
        false,
        "the default stream after the refused call",
    )?;
    ensure!(
        !path.exists(),
        "a refused call wrote the dump {}",
        path.display()
    );
    if call == CaptureBeginOnDefaultStream {
        // The default stream still runs work eagerly.
        let y = b.alloc_from(&[1.0; 4]).ctx("alloc_from")?;
        {
            let _default = on_stream(b, &b.default_stream())?;
            b.scale(&y, 2.0).ctx("scale on the default stream")?;
        }
        expect_all(b, &y, 2.0, "eager work on the default stream")?;
    }
    if setup == Capturing {
        // The capture goes on, and ends normally on its stream.
        g.capture_end()
            .ctx("capture_end on the capture stream after the refused call")?;
    }
    drop(current);
    if setup != Fresh {
        replay_on(b, &stream, &mut g)?;
        expect_all(
            b,
            &x,
            1.0,
            "one replay of the capture that survived the misuse",
        )?;
    }
    recaptures_after_reset(b, &mut g)
}

fn options<B: Backend>(b: &B, kind: Kind) -> GraphOptions {
    match kind {
        Plain | DebugMode => GraphOptions::new(),
        Kept => GraphOptions::new().keep_graph(true),
        UserPool => GraphOptions::new().pool(b.graph_pool_handle()),
    }
}

/// 5.05m: a second graph cannot begin capturing a stream another graph captures; the first
/// capture still ends cleanly and nothing is left capturing.
pub(crate) fn begin_on_capturing_stream<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut first = new_graph(b, GraphOptions::new())?;
    let mut second = new_graph(b, GraphOptions::new())?;
    {
        let _current = on_stream(b, &stream)?;
        first.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar")?;
        if second.capture_begin().is_ok() {
            second.reset();
            first.reset();
            return Err(
                "capture_begin() of a second graph on a stream that is capturing succeeded".into(),
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
}

/// 5.05n: a pool id with both halves non-zero, or one this instance never issued, is refused
/// with `InvalidPoolId`; `(0, 0)` means "no pool", as in PyTorch.
pub(crate) fn invalid_pool_id<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    expect_err!(
        b.graph(GraphOptions::new().pool(PoolId(3, 4))),
        GraphError::InvalidPoolId { .. },
        "graph(pool=(3, 4))"
    );
    // Ids the instance never handed out (their sequence number is 0).
    for forged in [PoolId(0, 1 << 48), PoolId(1 << 48, 0)] {
        expect_err!(
            b.graph(GraphOptions::new().pool(forged)),
            GraphError::InvalidPoolId { .. },
            format!("graph(pool={forged}), an id the instance never issued")
        );
    }
    let mut g = new_graph(b, GraphOptions::new().pool(PoolId::NONE))?;
    recaptures_after_reset(b, &mut g)
}

/// 5.05o: an unknown capture error mode string is refused with PyTorch's message; every mode's
/// own name parses back to it.
pub(crate) fn unknown_capture_mode<B: Backend>(_: &Target<B>) -> CaseResult {
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

/// 5.05p: element-wise ops and uploads on buffers of different lengths are refused with
/// `LengthMismatch` and change nothing.
pub(crate) fn length_mismatch<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let short = b.alloc_from(&[1.0; 4]).ctx("alloc_from")?;
    let long = b.alloc_from(&[2.0; 8]).ctx("alloc_from")?;
    expect_err!(
        b.copy(&short, &long),
        GraphError::LengthMismatch {
            op: "copy",
            expected: 4,
            got: 8
        },
        "copy(4 elements <- 8 elements)"
    );
    expect_err!(
        b.axpy(&long, 1.0, &short),
        GraphError::LengthMismatch {
            op: "axpy",
            expected: 8,
            got: 4
        },
        "axpy(8 elements += 4 elements)"
    );
    expect_err!(
        b.upload(&short, &[3.0; 3]),
        GraphError::LengthMismatch {
            op: "upload",
            expected: 4,
            got: 3
        },
        "upload(3 values into 4 elements)"
    );
    expect_all(b, &short, 1.0, "destination of refused ops")?;
    expect_all(b, &long, 2.0, "destination of refused ops")
}

/// 5.05q: a pool id issued by another instance of the device (as a user pool or as a graph's
/// private pool) is refused with `InvalidPoolId`: graphs of different instances never share
/// memory.
pub(crate) fn foreign_pool_id<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let other = t.another_instance()?;
    let handle = other.graph_pool_handle();
    let mut theirs = new_graph(&other, GraphOptions::new())?;
    let y = other
        .alloc_from(&[0.0; 4])
        .ctx("alloc_from on the other instance")?;
    let stream = other.new_stream().ctx("new_stream on the other instance")?;
    other
        .capture_on(&stream, &mut theirs, || other.add_scalar(&y, 1.0))
        .ctx("capture on the other instance")?;
    let private = theirs.pool().ctx("pool() of the other instance's graph")?;
    for foreign in [handle, private] {
        expect_err!(
            b.graph(GraphOptions::new().pool(foreign)),
            GraphError::InvalidPoolId { .. },
            format!("graph(pool={foreign}), an id another instance issued")
        );
    }
    let mut own = new_graph(b, GraphOptions::new().pool(b.graph_pool_handle()))?;
    recaptures_after_reset(b, &mut own)
}

/// 5.05r: buffers, streams and events of another instance of the device are refused with
/// `ForeignObject` naming what was foreign; nothing is left capturing or changed.
pub(crate) fn foreign_objects<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let other = t.another_instance()?;
    let their_buffer = other
        .alloc_from(&[1.0; 4])
        .ctx("alloc_from on the other instance")?;
    let their_stream = other.new_stream().ctx("new_stream on the other instance")?;
    let their_event = other.new_event().ctx("new_event on the other instance")?;
    let mine = b.alloc_from(&[2.0; 4]).ctx("alloc_from")?;
    let foreign = |what: &'static str, result: Result<(), GraphError>, call: &str| match result {
        Err(GraphError::ForeignObject { what: w }) if w == what => Ok(()),
        Err(e) => Err(format!(
            "{call}: expected ForeignObject {{ what: {what:?} }}, got Err({e:?}): {e}"
        )),
        Ok(()) => Err(format!("{call}: expected ForeignObject, got Ok")),
    };
    foreign("buffer", b.add_scalar(&their_buffer, 1.0), "add_scalar")?;
    foreign(
        "buffer",
        b.copy(&mine, &their_buffer),
        "copy(mine <- theirs)",
    )?;
    foreign("buffer", b.download(&their_buffer).map(drop), "download")?;
    foreign("buffer", b.upload(&their_buffer, &[0.0; 4]), "upload")?;
    foreign(
        "stream",
        b.use_stream(&their_stream).map(drop),
        "use_stream",
    )?;
    foreign(
        "stream",
        b.set_current_stream(&their_stream).map(drop),
        "set_current_stream",
    )?;
    foreign(
        "stream",
        b.is_capturing(&their_stream).map(drop),
        "is_capturing",
    )?;
    foreign(
        "stream",
        b.stream_synchronize(&their_stream),
        "stream_synchronize",
    )?;
    foreign("event", b.record_event(&their_event), "record_event")?;
    foreign("event", b.wait_event(&their_event), "wait_event")?;
    ensure!(
        !their_buffer.same_memory(&mine),
        "buffers of two instances report the same memory"
    );
    // A scoped capture whose body touches a foreign buffer is discarded.
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    expect_err!(
        b.capture_on(&stream, &mut g, || b.scale(&their_buffer, 2.0)),
        GraphError::ForeignObject { what: "buffer" },
        "a capture whose body scales a foreign buffer"
    );
    expect_capturing(b, &stream, false, "after the discarded capture")?;
    expect_all(b, &mine, 2.0, "own buffer after the refused calls")?;
    expect_all(
        &other,
        &their_buffer,
        1.0,
        "foreign buffer after the refused calls",
    )?;
    recaptures_after_reset(b, &mut g)
}
