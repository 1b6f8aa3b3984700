//! 10.07: a scoped capture whose body switches the current stream without a guard
//! (`set_current_stream`) and then fails.
//!
//! The rule: the scoped capture returns the body's error (not the `CaptureStreamMismatch` that
//! ending the capture from the other stream would give), discards the capture — the graph is
//! `Empty`, neither the capture stream nor the stream switched to captures — and then:
//!
//! * `graph.capture(..)` does not manage the current stream: the body's switch stays, as any
//!   other effect of the body does (PyTorch's `capture_begin()` … `capture_end()`);
//! * `backend.capture_on(&stream, ..)` restores the stream that was current before it, as its
//!   stream guard does on every exit (PyTorch's `with torch.cuda.stream(s)` restores the
//!   previous stream even when the body switched).
//!
//! A body that switches and *succeeds* cannot end the capture: `CaptureStreamMismatch`, and the
//! capture is discarded just the same.

use accel_graph_api::{Backend, CaptureExt, GraphError, GraphOptions, GraphState};

use crate::{
    Target,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_err, expect_state, new_graph,
        on_stream, recaptures_after_reset,
    },
};

/// The error the failing bodies return.
fn body_error() -> GraphError {
    GraphError::ArgumentMismatch("the body's own error".to_owned())
}

fn is_body_error(e: &GraphError) -> bool {
    matches!(e, GraphError::ArgumentMismatch(m) if m == "the body's own error")
}

/// Nothing captures and the graph is empty.
fn discarded<B: Backend>(b: &B, g: &B::Graph, streams: [&B::Stream; 2], when: &str) -> CaseResult {
    expect_state(g, GraphState::Empty, when)?;
    expect_capturing(b, streams[0], false, &format!("{when}: the capture stream"))?;
    expect_capturing(
        b,
        streams[1],
        false,
        &format!("{when}: the stream switched to"),
    )
}

/// 10.07: see the module documentation.
pub(super) fn body_switches_stream<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let capture_stream = b.new_stream().ctx("new_stream")?;
    let other = b.new_stream().ctx("new_stream")?;
    let before = b.current_stream();
    let streams = [&capture_stream, &other];
    let mut g = new_graph(b, GraphOptions::new())?;

    // graph.capture(): the body's error, and the body's switch stays.
    {
        let _current = on_stream(b, &capture_stream)?;
        let result = g.capture(|| {
            b.add_scalar(&x, 1.0)?; // captured, never run
            b.set_current_stream(&other)?;
            b.add_scalar(&x, 10.0)?; // on `other`, which does not capture: runs
            Err::<(), _>(body_error())
        });
        match result {
            Err(e) if is_body_error(&e) => {}
            other => {
                return Err(format!(
                    "graph.capture(): expected the body's error, got {other:?}"
                ));
            }
        }
        discarded(
            b,
            &g,
            streams,
            "after graph.capture() returned the body's error",
        )?;
        ensure!(
            b.current_stream() == other,
            "after graph.capture() the current stream is not the one the body switched to"
        );
    }
    ensure!(
        b.current_stream() == before,
        "the stream guard did not restore the stream"
    );
    expect_all(
        b,
        &x,
        10.0,
        "x after the discarded capture (only the eager add ran)",
    )?;

    // capture_on(): the body's error, and the stream current before is restored.
    let result = b.capture_on(&capture_stream, &mut g, || {
        b.set_current_stream(&other)?;
        Err::<(), _>(body_error())
    });
    match result {
        Err(e) if is_body_error(&e) => {}
        other => {
            return Err(format!(
                "capture_on(): expected the body's error, got {other:?}"
            ));
        }
    }
    discarded(
        b,
        &g,
        streams,
        "after capture_on() returned the body's error",
    )?;
    ensure!(
        b.current_stream() == before,
        "capture_on() did not restore the stream current before it"
    );

    // A body that switches and succeeds: the capture cannot end on the other stream.
    expect_err!(
        b.capture_on(&capture_stream, &mut g, || {
            b.add_scalar(&x, 1.0)?;
            b.set_current_stream(&other).map(drop)
        }),
        GraphError::CaptureStreamMismatch,
        "capture_on() whose body switched the stream and succeeded"
    );
    discarded(b, &g, streams, "after CaptureStreamMismatch")?;
    ensure!(
        b.current_stream() == before,
        "capture_on() did not restore the stream after CaptureStreamMismatch"
    );
    expect_all(b, &x, 10.0, "x after the discarded captures")?;
    recaptures_after_reset(b, &mut g)
}
