//! The simulation under concurrency: host callbacks that call back into the backend while a
//! replay runs them, and many threads working (and capturing) at once.

use std::sync::Arc;

use accel_graph_api::prelude::*;
use accel_graph_mock::MockBackend;

#[test]
fn a_host_callback_may_use_the_backend() -> Result<()> {
    let b = MockBackend::new();
    let x = Arc::new(b.alloc_from(&[0.0])?);
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    let (b2, x2) = (b.clone(), Arc::clone(&x));
    b.capture_on(&s, &mut g, || {
        b.host_callback(Arc::new(move || {
            b2.add_scalar(&x2, 1.0).unwrap();
        }))
    })?;
    g.replay()?;
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![2.0]);
    Ok(())
}

#[test]
fn streams_and_backends_are_usable_from_many_threads() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 8]).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let s = b.new_stream().unwrap();
                let y = b.alloc_from(&[0.0; 8]).unwrap();
                // Thread-local captures: the other threads' allocations and downloads, made
                // while this thread captures, are allowed (a global capture would forbid them
                // and be invalidated, as on CUDA).
                let mut g = b
                    .graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))
                    .unwrap();
                b.capture_on(&s, &mut g, || b.add_scalar(&y, 1.0)).unwrap();
                for _ in 0..10 {
                    g.replay().unwrap();
                }
                assert_eq!(b.download(&y).unwrap(), vec![10.0; 8]);
                let _ = b.download(&x).unwrap();
            });
        }
    });
}
