//! §5.10: a panic (or an error) inside a scoped capture leaves nothing capturing and nothing
//! leaked.

use accel_graph_api::{Backend, CaptureExt, GraphError, GraphOptions, GraphState};

use crate::{
    Target,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_err, expect_panic,
        expect_state, new_graph, on_stream, recaptures_after_reset,
    },
};

/// After a scoped capture ended by a panic or an error: the stream does not capture, the graph
/// is empty, captured work never ran, and the backend works (eagerly, and capturing again).
fn after_panic<B: Backend>(
    b: &B,
    stream: &B::Stream,
    g: &mut B::Graph,
    x: &B::Buffer<f32>,
) -> CaseResult {
    expect_capturing(b, stream, false, "after a panic inside the capture")?;
    expect_state(g, GraphState::Empty, "after a panic inside the capture")?;
    // The backend works: eager work, and a new capture on the same stream.
    {
        let _current = on_stream(b, stream)?;
        b.add_scalar(x, 10.0)
            .ctx("eager add_scalar after the panic")?;
    }
    expect_all(
        b,
        x,
        10.0,
        "eager work after the panic (captured work never ran)",
    )?;
    recaptures_after_reset(b, g)
}

/// 5.10a: a panic inside `graph.capture(..)` (with a pool allocation alive while unwinding)
/// propagates, and leaves nothing capturing and nothing held.
pub(crate) fn panic_in_capture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let message = {
        let _current = on_stream(b, &stream)?;
        expect_panic(|| {
            g.capture(|| -> accel_graph_api::Result<()> {
                let _ = b.add_scalar(&x, 1.0);
                // A pool allocation made by the capture, alive while unwinding.
                let _tmp = b.alloc::<f32>(256);
                panic!("deliberate panic inside capture");
            })
        })
    };
    ensure!(
        message.as_deref() == Some("deliberate panic inside capture"),
        "the panic did not propagate out of capture(): {message:?}"
    );
    after_panic(b, &stream, &mut g, &x)
}

/// 5.10b: the same through `backend.capture_on(..)`, which also restores the current stream.
pub(crate) fn panic_in_capture_on<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    let before = b.current_stream();
    let message = expect_panic(|| {
        b.capture_on(&stream, &mut g, || -> accel_graph_api::Result<()> {
            let _ = b.scale(&x, 2.0);
            panic!("deliberate panic inside capture_on");
        })
    });
    ensure!(
        message.is_some(),
        "the panic did not propagate out of capture_on()"
    );
    ensure!(
        b.current_stream() == before,
        "capture_on did not restore the current stream after a panic"
    );
    after_panic(b, &stream, &mut g, &x)
}

/// 5.10c: a body returning an error discards the capture and returns the error.
pub(crate) fn error_in_capture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let short = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let result = {
        let _current = on_stream(b, &stream)?;
        g.capture(|| {
            b.add_scalar(&x, 1.0)?;
            b.copy(&short, &x)
        })
    };
    match result {
        Err(GraphError::LengthMismatch { .. }) | Err(GraphError::CaptureInvalidated { .. }) => {}
        Err(e) => return Err(format!("capture: unexpected error {e:?}: {e}")),
        Ok(()) => return Err("capture with a failing body returned Ok".into()),
    }
    after_panic(b, &stream, &mut g, &x)
}

/// 5.10d: a side stream forked into the capture does not stay capturing either: not after a
/// panic in the body, and not after a `capture_end` that fails (the fork was never joined
/// back), whose error the scoped capture returns after discarding the capture.
pub(crate) fn forked_capture_discarded<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let (main, side) = (
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    );
    let fork = b.new_event().ctx("new_event")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    // The body forks `side` into the capture and leaves it there.
    let forked_body = || -> accel_graph_api::Result<()> {
        b.add_scalar(&x, 1.0)?;
        b.record_event(&fork)?;
        let _side = b.use_stream(&side)?;
        b.wait_event(&fork)?;
        b.scale(&x, 2.0)
    };
    let message = expect_panic(|| {
        b.capture_on(&main, &mut g, || -> accel_graph_api::Result<()> {
            forked_body()?;
            panic!("deliberate panic with a side stream in the capture");
        })
    });
    ensure!(
        message.is_some(),
        "the panic did not propagate out of capture_on()"
    );
    expect_capturing(b, &side, false, "the side stream after a panic")?;
    after_panic(b, &main, &mut g, &x)?;

    expect_err!(
        b.capture_on(&main, &mut g, forked_body),
        GraphError::CaptureUnjoined,
        "capture_on of a body that forks a stream and never joins it back"
    );
    expect_state(
        &g,
        GraphState::Empty,
        "after a scoped capture that could not end",
    )?;
    expect_capturing(b, &main, false, "the capture stream after CaptureUnjoined")?;
    expect_capturing(b, &side, false, "the side stream after CaptureUnjoined")?;
    expect_all(b, &x, 10.0, "x (work of the discarded captures never ran)")?;
    recaptures_after_reset(b, &mut g)
}
