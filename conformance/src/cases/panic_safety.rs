//! §5.10: a panic (or an error) inside a scoped capture leaves nothing capturing and nothing
//! leaked.

use accel_graph_api::{Backend, CaptureExt, GraphError, GraphOptions, GraphState};

use crate::{
    Case,
    case::requirements,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_panic, expect_state,
        leak_checked, new_graph, recaptures_after_reset,
    },
};

const SECTION: &str = "5.10 panic safety";

pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    vec![
        Case::new(
            "5.10a panic inside graph.capture(): stream not capturing, backend works, no leak",
            SECTION,
            requirements::none,
            panic_in_capture::<B>,
        ),
        Case::new(
            "5.10b panic inside backend.capture_on(): same, current stream restored",
            SECTION,
            requirements::none,
            panic_in_capture_on::<B>,
        ),
        Case::new(
            "5.10c error inside graph.try_capture(): capture discarded, error returned",
            SECTION,
            requirements::none,
            error_in_try_capture::<B>,
        ),
    ]
}

fn after_panic<B: Backend>(
    b: &B,
    stream: &B::Stream,
    g: &mut B::Graph,
    x: &B::Buffer,
) -> CaseResult {
    expect_capturing(b, stream, false, "after a panic inside the capture")?;
    expect_state(g, GraphState::Empty, "after a panic inside the capture")?;
    // The backend works: eager work, and a new capture on the same stream.
    {
        let _current = b.use_stream(stream);
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

fn panic_in_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        let message = {
            let _current = b.use_stream(&stream);
            expect_panic(|| {
                g.capture(|| {
                    let _ = b.add_scalar(&x, 1.0);
                    // A pool allocation made by the capture, alive while unwinding.
                    let _tmp = b.alloc(256);
                    panic!("deliberate panic inside capture");
                })
            })
        };
        ensure!(
            message.as_deref() == Some("deliberate panic inside capture"),
            "the panic did not propagate out of capture(): {message:?}"
        );
        after_panic(b, &stream, &mut g, &x)
    })
}

fn panic_in_capture_on<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
        let before = b.current_stream();
        let message = expect_panic(|| {
            b.capture_on(&stream, &mut g, || {
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
    })
}

fn error_in_try_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let short = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        let result = {
            let _current = b.use_stream(&stream);
            g.try_capture(|| {
                b.add_scalar(&x, 1.0)?;
                b.copy(&short, &x)
            })
        };
        match result {
            Err(GraphError::LengthMismatch { .. }) | Err(GraphError::CaptureInvalidated { .. }) => {
            }
            Err(e) => return Err(format!("try_capture: unexpected error {e:?}: {e}")),
            Ok(()) => return Err("try_capture with a failing body returned Ok".into()),
        }
        after_panic(b, &stream, &mut g, &x)
    })
}
