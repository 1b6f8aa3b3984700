//! Regression tests of defects the hostile random sequences of the conformance suite (5.15)
//! found on the wgpu backend, each the defect's minimal reproduction. Without an adapter they
//! return at once, saying so.

use std::thread;

use accel_graph_api::prelude::*;
use accel_graph_wgpu::WgpuBackend;

/// Iterations of each thread in [`two_threads_polling_one_device`].
const ITERATIONS: usize = 5000;

/// Two threads, each with a stream of its own, issuing an op, recording an event and querying
/// it, again and again. `event_query` polls the device for the event's submission
/// (`Device::poll` with a zero timeout), and wgpu-core 30.0.1's `Device::maintain` asserted
/// when another thread's poll (or submit, which polls too) retired the queue's submissions
/// between this poll's fence read and its check ("If the queue is empty, the current
/// submission index (n) should be at least the wait submission index (n + 1)"): the panic
/// came out of `event_query`, and equally out of `alloc` and the drop of a buffer, which poll
/// for the pending frees. Fixed in the backend: one device's maintenance runs on one thread at
/// a time (later wgpu-core releases re-read the fence before that assertion). Checked: no
/// call panics or fails. A race: without the fix the panic came within a few hundred
/// iterations (well under a second on lavapipe).
#[test]
fn two_threads_polling_one_device() -> Result<()> {
    let b = match WgpuBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("no wgpu adapter, nothing to check: {e}");
            return Ok(());
        }
    };
    thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let stream = b.new_stream()?;
                    let _current = b.use_stream(&stream)?;
                    let (x, e) = (b.alloc_from(&[0.0f32; 16])?, b.new_event()?);
                    for _ in 0..ITERATIONS {
                        b.add_scalar(&x, 1.0)?;
                        b.record_event(&e)?;
                        b.event_query(&e)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker panicked"))
    })
}
