//! Capture error modes, per thread: every mode, every unsafe call, on the capturing thread and
//! on another thread; `capture_end` from the wrong thread or stream.

use std::thread;

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, GraphState,
};
use accel_graph_mock::{MockBackend, MockStream};

#[derive(Debug, Clone, Copy)]
enum UnsafeCall {
    Synchronize,
    EventSynchronize,
    Upload,
    Download,
    PlainAlloc,
    SynchronizeOtherStream,
}

const CALLS: [UnsafeCall; 6] = [
    UnsafeCall::Synchronize,
    UnsafeCall::EventSynchronize,
    UnsafeCall::Upload,
    UnsafeCall::Download,
    UnsafeCall::PlainAlloc,
    UnsafeCall::SynchronizeOtherStream,
];

struct Fixture {
    b: MockBackend,
    capture_stream: MockStream,
    other: MockStream,
    buf: accel_graph_mock::MockBuffer,
    event: accel_graph_mock::MockEvent,
}

impl Fixture {
    fn new() -> Self {
        let b = MockBackend::new();
        Fixture {
            capture_stream: b.new_stream().unwrap(),
            other: b.new_stream().unwrap(),
            buf: b.alloc_from(&[0.0; 2]).unwrap(),
            event: b.new_event().unwrap(),
            b,
        }
    }

    /// Makes `call` on the calling thread. The plain allocation is made with a stream that is
    /// not capturing current, so it does not come from the capture's pool.
    fn call(&self, call: UnsafeCall) -> accel_graph_api::Result<()> {
        let b = &self.b;
        match call {
            UnsafeCall::Synchronize => b.synchronize(),
            UnsafeCall::EventSynchronize => b.event_synchronize(&self.event),
            UnsafeCall::Upload => b.upload(&self.buf, &[1.0, 2.0]),
            UnsafeCall::Download => b.download(&self.buf).map(|_| ()),
            UnsafeCall::PlainAlloc => {
                let _s = b.use_stream(&self.other);
                b.alloc(4).map(|_| ())
            }
            UnsafeCall::SynchronizeOtherStream => b.stream_synchronize(&self.other),
        }
    }
}

fn is_unsafe_error(r: &accel_graph_api::Result<()>, mode: CaptureErrorMode) -> bool {
    matches!(r, Err(GraphError::UnsafeDuringCapture { mode: m, .. }) if *m == mode)
}

#[test]
fn unsafe_calls_on_the_capturing_thread() {
    for mode in CaptureErrorMode::ALL {
        for call in CALLS {
            let f = Fixture::new();
            let mut g =
                f.b.graph(GraphOptions::new().capture_error_mode(mode))
                    .unwrap();
            let _s = f.b.use_stream(&f.capture_stream);
            g.capture_begin().unwrap();
            f.b.add_scalar(&f.buf, 1.0).unwrap();
            let r = f.call(call);
            assert!(f.b.is_capturing(&f.capture_stream).unwrap());
            // A device-wide synchronize conflicts with any capture, even a relaxed one, and so
            // do blocking copies that must wait for the (capturing) current stream.
            let forbidden = mode != CaptureErrorMode::Relaxed
                || matches!(
                    call,
                    UnsafeCall::Synchronize | UnsafeCall::Upload | UnsafeCall::Download
                );
            if !forbidden {
                assert!(r.is_ok(), "{mode} {call:?}: {r:?}");
                g.capture_end().unwrap();
                assert_eq!(g.state(), GraphState::Ready);
            } else {
                assert!(
                    is_unsafe_error(&r, mode.resolved()),
                    "{mode} {call:?}: {r:?}"
                );
                // The capture is invalidated: further work fails, capture_end reports it.
                assert!(matches!(
                    f.b.add_scalar(&f.buf, 1.0),
                    Err(GraphError::CaptureInvalidated { .. })
                ));
                assert!(matches!(
                    g.capture_end(),
                    Err(GraphError::CaptureInvalidated { .. })
                ));
                assert_eq!(g.state(), GraphState::Empty);
            }
            assert!(!f.b.is_capturing(&f.capture_stream).unwrap());
            assert!(!f.b.any_capture_active());
        }
    }
}

#[test]
fn unsafe_calls_from_another_thread() {
    for mode in CaptureErrorMode::ALL {
        for call in CALLS {
            let f = Fixture::new();
            let mut g =
                f.b.graph(GraphOptions::new().capture_error_mode(mode))
                    .unwrap();
            let _s = f.b.use_stream(&f.capture_stream);
            g.capture_begin().unwrap();
            f.b.add_scalar(&f.buf, 1.0).unwrap();
            let r = thread::scope(|s| s.spawn(|| f.call(call)).join().unwrap());
            // As on CUDA: a global capture forbids the call on every thread, a device-wide
            // synchronize conflicts with any capture; a forbidden call invalidates the capture.
            let forbidden = mode.resolved() == CaptureErrorMode::Global
                || matches!(call, UnsafeCall::Synchronize);
            if forbidden {
                assert!(
                    is_unsafe_error(&r, mode.resolved()),
                    "{mode} {call:?}: {r:?}"
                );
                assert!(matches!(
                    g.capture_end(),
                    Err(GraphError::CaptureInvalidated { .. })
                ));
                assert!(!f.b.any_capture_active());
            } else {
                assert!(r.is_ok(), "{mode} {call:?}: {r:?}");
                g.capture_end().unwrap();
                g.replay().unwrap();
            }
        }
    }
}

#[test]
fn synchronizing_the_capturing_stream_always_fails_and_invalidates() {
    for mode in CaptureErrorMode::ALL {
        for other_thread in [false, true] {
            let f = Fixture::new();
            let mut g =
                f.b.graph(GraphOptions::new().capture_error_mode(mode))
                    .unwrap();
            let _s = f.b.use_stream(&f.capture_stream);
            g.capture_begin().unwrap();
            let r = if other_thread {
                thread::scope(|s| {
                    s.spawn(|| f.b.stream_synchronize(&f.capture_stream))
                        .join()
                        .unwrap()
                })
            } else {
                f.b.stream_synchronize(&f.capture_stream)
            };
            assert!(is_unsafe_error(&r, mode.resolved()), "{mode}: {r:?}");
            assert!(matches!(
                g.capture_end(),
                Err(GraphError::CaptureInvalidated { .. })
            ));
            assert!(!f.b.is_capturing(&f.capture_stream).unwrap());
        }
    }
}

#[test]
fn is_capturing_is_always_legal() {
    for mode in CaptureErrorMode::ALL {
        let f = Fixture::new();
        let mut g =
            f.b.graph(GraphOptions::new().capture_error_mode(mode))
                .unwrap();
        let _s = f.b.use_stream(&f.capture_stream);
        g.capture_begin().unwrap();
        assert!(f.b.is_capturing(&f.capture_stream).unwrap());
        assert!(!f.b.is_capturing(&f.other).unwrap());
        thread::scope(|s| {
            s.spawn(|| assert!(f.b.is_capturing(&f.capture_stream).unwrap()));
        });
        g.capture_end().unwrap();
    }
}

#[test]
fn capture_end_from_another_thread() {
    for mode in CaptureErrorMode::ALL {
        let f = Fixture::new();
        let mut g =
            f.b.graph(GraphOptions::new().capture_error_mode(mode))
                .unwrap();
        let _s = f.b.use_stream(&f.capture_stream);
        g.capture_begin().unwrap();
        f.b.add_scalar(&f.buf, 1.0).unwrap();
        let r = thread::scope(|s| {
            s.spawn(|| {
                let _s = f.b.use_stream(&f.capture_stream);
                g.capture_end()
            })
            .join()
            .unwrap()
        });
        if mode == CaptureErrorMode::Relaxed {
            r.unwrap();
        } else {
            assert!(matches!(r, Err(GraphError::WrongThread)), "{mode}: {r:?}");
            assert_eq!(g.state(), GraphState::Capturing);
            assert!(f.b.is_capturing(&f.capture_stream).unwrap());
            f.b.add_scalar(&f.buf, 1.0).unwrap(); // the capture goes on
            g.capture_end().unwrap();
        }
        assert!(!f.b.is_capturing(&f.capture_stream).unwrap());
        g.replay().unwrap();
    }
}

#[test]
fn capture_end_on_another_stream_is_a_mismatch_and_the_capture_goes_on() {
    let f = Fixture::new();
    let mut g = f.b.graph(GraphOptions::new()).unwrap();
    let s = f.b.use_stream(&f.capture_stream);
    g.capture_begin().unwrap();
    f.b.add_scalar(&f.buf, 1.0).unwrap();
    {
        let _o = f.b.use_stream(&f.other);
        assert!(matches!(
            g.capture_end(),
            Err(GraphError::CaptureStreamMismatch)
        ));
    }
    assert!(f.b.is_capturing(&f.capture_stream).unwrap());
    g.capture_end().unwrap();
    drop(s);
    g.replay().unwrap();
    assert_eq!(f.b.download(&f.buf).unwrap(), vec![1.0; 2]);
}
