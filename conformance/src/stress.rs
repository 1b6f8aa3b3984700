//! Concurrency stress: threads capturing and replaying their own graphs on their own streams,
//! in every capture mode, while other threads make unsafe calls — results exact, no deadlock
//! (every wait is bounded), nothing leaked.
//!
//! A `global` capture is invalidated by another thread's unsafe call (CUDA's rule), so a
//! worker in global mode retries an invalidated capture and counts it; `thread_local` and
//! `relaxed` captures must never be disturbed.

use std::{
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, CaptureExt, GraphError, GraphOptions,
};

/// How much stress.
#[derive(Debug, Clone, Copy)]
pub struct StressConfig {
    /// Threads capturing and replaying, per capture mode.
    pub workers_per_mode: usize,
    /// Capture/replay cycles of each worker.
    pub cycles: usize,
    /// Replays per cycle.
    pub replays: usize,
    /// Threads making unsafe calls (plain allocations, downloads) all along.
    pub disturbers: usize,
    /// Elements of each worker's buffer.
    pub elements: usize,
    /// How long the whole run may take before it counts as a deadlock.
    pub deadline: Duration,
}

/// What a stress run did.
#[derive(Debug, Clone, Default)]
pub struct StressReport {
    /// Capture/replay cycles completed, per mode (global, thread_local, relaxed).
    pub cycles: [u64; 3],
    /// Global captures invalidated by another thread's unsafe call (then retried).
    pub global_invalidations: u64,
    /// Unsafe calls made by the disturbing threads.
    pub unsafe_calls: u64,
    /// Unsafe calls refused (by a global capture of another thread).
    pub refused_unsafe_calls: u64,
    /// Wall time.
    pub elapsed: Duration,
}

const MODES: [CaptureErrorMode; 3] = [
    CaptureErrorMode::Global,
    CaptureErrorMode::ThreadLocal,
    CaptureErrorMode::Relaxed,
];

/// The first pause after a refused unsafe call.
const FIRST_BACKOFF: Duration = Duration::from_micros(20);
/// The longest pause after refused unsafe calls.
const MAX_BACKOFF: Duration = Duration::from_millis(10);

/// The pause after `refusals` refused unsafe calls in a row: doubling from [`FIRST_BACKOFF`]
/// up to [`MAX_BACKOFF`]. A refused call also invalidates the global capture that refused it
/// (CUDA's rule), so threads retrying at a fixed short pause keep every global capture from
/// ever completing on a machine of few cores: the run then takes minutes of retries instead
/// of seconds of work, while backing off still makes refusals and invalidations happen.
fn backoff(refusals: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << refusals.min(16))
        .min(MAX_BACKOFF)
}

/// Runs an unsafe call (a plain allocation, a download) until no global capture of another
/// thread refuses it: such a refusal is CUDA's rule, not a failure of the worker.
fn retry_unsafe<T>(mut call: impl FnMut() -> Result<T, GraphError>) -> Result<T, GraphError> {
    let mut refusals = 0;
    loop {
        match call() {
            Err(GraphError::UnsafeDuringCapture { .. }) => {
                std::thread::sleep(backoff(refusals));
                refusals += 1;
            }
            other => return other,
        }
    }
}

/// One worker: `cycles` times, capture `x += k` (k = the cycle's number) into a new graph,
/// replay it `replays` times, check `x` is exactly `sum of k * replays`.
fn worker<B: Backend>(
    b: &B,
    mode: CaptureErrorMode,
    config: StressConfig,
    invalidations: &AtomicU64,
) -> Result<u64, String> {
    let stream = b.new_stream().map_err(|e| e.to_string())?;
    let x = retry_unsafe(|| b.alloc_from(&vec![0.0; config.elements]))
        .map_err(|e| format!("{mode} worker: alloc: {e}"))?;
    let mut expected = 0f32;
    let mut done = 0;
    for cycle in 0..config.cycles {
        let k = (cycle % 7 + 1) as f32;
        let mut graph = b
            .graph(GraphOptions::new().capture_error_mode(mode))
            .map_err(|e| e.to_string())?;
        loop {
            let captured = {
                let _s = b.use_stream(&stream).map_err(|e| e.to_string())?;
                graph.capture(|| {
                    // A pool temporary, so pool allocation runs concurrently too.
                    let t = b.alloc(config.elements)?;
                    b.fill(&t, k)?;
                    b.axpy(&x, 1.0, &t)
                })
            };
            match captured {
                Ok(()) => break,
                Err(GraphError::CaptureInvalidated { .. }) if mode == CaptureErrorMode::Global => {
                    invalidations.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(format!("{mode} capture, cycle {cycle}: {e}")),
            }
        }
        {
            let _s = b.use_stream(&stream).map_err(|e| e.to_string())?;
            for _ in 0..config.replays {
                graph.replay().map_err(|e| format!("{mode} replay: {e}"))?;
                expected += k;
            }
        }
        drop(graph);
        // Downloads are unsafe calls: a global capture of another thread refuses them, so a
        // worker reads only outside its own capture and retries a refused read.
        let got = {
            let _s = b.use_stream(&stream).map_err(|e| e.to_string())?;
            retry_unsafe(|| b.download(&x)).map_err(|e| format!("{mode} download: {e}"))?
        };
        if let Some(i) = got.iter().position(|v| *v != expected) {
            return Err(format!(
                "{mode} worker, cycle {cycle}: element {i} is {}, expected {expected}",
                got[i]
            ));
        }
        done += 1;
    }
    Ok(done)
}

/// Runs the stress on `b`. Errors name the first failure; a run past `deadline` is reported as
/// a deadlock (its threads are left to finish in the background).
pub fn stress<B: Backend>(b: &B, config: StressConfig) -> Result<StressReport, String> {
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let invalidations = Arc::new(AtomicU64::new(0));
    let unsafe_calls = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let workers = MODES.len() * config.workers_per_mode;
    let barrier = Arc::new(Barrier::new(workers + config.disturbers));
    let (tx, rx) = mpsc::channel::<(usize, Result<u64, String>)>();
    for (m, &mode) in MODES.iter().enumerate() {
        for _ in 0..config.workers_per_mode {
            let (b, tx, barrier, invalidations) = (
                b.clone(),
                tx.clone(),
                Arc::clone(&barrier),
                Arc::clone(&invalidations),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let _ = tx.send((m, worker(&b, mode, config, &invalidations)));
            });
        }
    }
    let mut disturbers = Vec::new();
    for _ in 0..config.disturbers {
        let (b, barrier, stop, calls, refused) = (
            b.clone(),
            Arc::clone(&barrier),
            Arc::clone(&stop),
            Arc::clone(&unsafe_calls),
            Arc::clone(&refused),
        );
        disturbers.push(std::thread::spawn(move || -> Result<(), String> {
            barrier.wait();
            let mut refusals = 0;
            while !stop.load(Ordering::Acquire) {
                for result in [
                    b.alloc::<f32>(64).map(drop),
                    b.stream_synchronize(&b.default_stream()),
                ] {
                    calls.fetch_add(1, Ordering::Relaxed);
                    match result {
                        Ok(()) => refusals = 0,
                        Err(GraphError::UnsafeDuringCapture { .. }) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            refusals += 1;
                        }
                        Err(e) => return Err(format!("disturbing thread: {e}")),
                    }
                }
                // A pause between calls, so that global captures can complete between them;
                // longer while they are refused.
                std::thread::sleep(backoff(refusals).max(Duration::from_micros(50)));
            }
            Ok(())
        }));
    }
    drop(tx);
    let mut report = StressReport::default();
    let mut first_error = None;
    for _ in 0..workers {
        let left = config.deadline.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok((m, Ok(cycles))) => report.cycles[m] += cycles,
            Ok((_, Err(e))) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                stop.store(true, Ordering::Release);
                return Err(format!(
                    "deadlock: the workers did not finish within {:?}",
                    config.deadline
                ));
            }
        }
    }
    stop.store(true, Ordering::Release);
    for d in disturbers {
        match d.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert("a disturbing thread panicked".to_owned());
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    report.global_invalidations = invalidations.load(Ordering::Relaxed);
    report.unsafe_calls = unsafe_calls.load(Ordering::Relaxed);
    report.refused_unsafe_calls = refused.load(Ordering::Relaxed);
    report.elapsed = start.elapsed();
    Ok(report)
}
