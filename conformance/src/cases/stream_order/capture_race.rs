//! 12.05: calls that depend on whether a stream captures, made while other threads begin and
//! end captures on the same streams.
//!
//! Capturing threads begin and end captures on shared streams, in every capture mode; other
//! threads meanwhile enqueue, on the same streams, host callbacks, portable ops, event records
//! and waits (forking one shared stream into another's capture now and then), allocations and
//! drops, and blocking copies and synchronizes. Each call may land before a capture, inside
//! it or after it; what must never happen is a call decided for one state and made in the
//! other — an eager host callback recorded into a graph frees its data once and then again
//! at every replay, an op recorded without keeping its memory alive replays into freed
//! memory. Every callback made is counted and every callback dropped, so a double free or a
//! leak shows in the counts (or crashes the run), and memory must be back where it was.

use std::{
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, HostCallback, Result,
};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure},
    config::SuiteConfig,
    report::panic_message,
};

/// Threads beginning and ending captures.
const CAPTURERS: usize = 2;
/// Threads enqueueing work on the captured streams.
const ENQUEUERS: usize = 2;
/// Streams shared by all of them.
const STREAMS: usize = 2;
/// Elements of every buffer.
const ELEMENTS: usize = 64;
/// How long the whole run may take before it counts as a deadlock.
const DEADLINE: Duration = Duration::from_secs(600);

/// Host callbacks made and dropped; a callback's data freed twice drops its closure twice (or
/// crashes the process), one never freed is a leak.
#[derive(Default)]
struct Ledger {
    made: AtomicUsize,
    dropped: AtomicUsize,
}

/// A closure's share of the ledger, dropped with the closure.
struct Share(Arc<Ledger>);

impl Drop for Share {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::AcqRel);
    }
}

impl Ledger {
    fn callback(self: &Arc<Self>) -> HostCallback {
        self.made.fetch_add(1, Ordering::AcqRel);
        let share = Share(Arc::clone(self));
        Arc::new(move || {
            let _ = &share;
        })
    }
}

/// What a call racing captures may answer besides success: the capture states it met (a
/// capture invalidated by another thread's call, an unsafe call refused by a capture, a fork
/// never joined back, a driver refusing a capture state it was not in). Anything else is a
/// failure.
fn raced<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(
            GraphError::CaptureInvalidated { .. }
            | GraphError::UnsafeDuringCapture { .. }
            | GraphError::CaptureUnjoined
            | GraphError::Driver { .. }
            // Threads share streams and, through the captures' pools, blocks, with nothing
            // ordering them (a buffer allocated on a stream while another thread captures on
            // it comes from that graph's pool, which the graph's replays write): the mock's
            // race sanitizer reports those accesses, rightly, and refuses the work.
            | GraphError::DataRace { .. },
        ) => Ok(None),
        Err(e) => Err(e),
    }
}

const MODES: [CaptureErrorMode; 4] = [
    CaptureErrorMode::Global,
    CaptureErrorMode::ThreadLocal,
    CaptureErrorMode::Relaxed,
    CaptureErrorMode::Default,
];

/// What a thread works on, made before the threads start (a plain allocation is an unsafe
/// call, which another thread's global capture would refuse).
struct Own<B: Backend> {
    buffer: B::Buffer<f32>,
    stream: B::Stream,
    event: B::Event,
}

impl<B: Backend> Own<B> {
    fn new(b: &B) -> Result<Self> {
        Ok(Own {
            buffer: b.alloc_from(&[0.0; ELEMENTS])?,
            stream: b.new_stream()?,
            event: b.new_event()?,
        })
    }
}

/// One capturing thread: `rounds` captures, each on a shared stream in the next mode, of a
/// temporary, an op and a host callback; those that end are replayed once on a stream of its
/// own. Returns the captures that ended.
fn capturer<B: Backend>(
    b: &B,
    streams: &[B::Stream],
    ledger: &Arc<Ledger>,
    own: Own<B>,
    index: usize,
    rounds: usize,
) -> Result<usize> {
    let (x, replay_stream) = (&own.buffer, &own.stream);
    let mut ended = 0;
    for round in 0..rounds {
        let at = round.wrapping_add(index);
        let mut g = b.graph(GraphOptions::new().capture_error_mode(MODES[at % MODES.len()]))?;
        let captured = b.capture_on(&streams[at % STREAMS], &mut g, || {
            let t = b.alloc(ELEMENTS)?;
            b.fill(&t, 1.0)?;
            b.axpy(x, 1.0, &t)?;
            b.host_callback(ledger.callback())
        });
        if raced(captured)?.is_some() {
            let _s = b.use_stream(replay_stream)?;
            // Work other threads issued on the stream during the capture is in the graph
            // (their buffers too), so a replay may meet their eager work unordered.
            raced(g.replay())?;
            ended += 1;
        }
    }
    Ok(ended)
}

/// One enqueueing thread: until `stop`, calls of every kind on the shared streams in turn.
/// Returns the calls made.
fn enqueuer<B: Backend>(
    b: &B,
    streams: &[B::Stream],
    ledger: &Arc<Ledger>,
    own: Own<B>,
    stop: &AtomicBool,
) -> Result<usize> {
    let (y, event) = (&own.buffer, &own.event);
    let mut calls = 0usize;
    while !stop.load(Ordering::Acquire) {
        let here = &streams[calls % STREAMS];
        let there = &streams[(calls + 1) % STREAMS];
        let _here = b.use_stream(here)?;
        let outcome = match calls % 7 {
            0 => b.host_callback(ledger.callback()),
            1 => b.add_scalar(y, 1.0),
            2 => b.alloc(ELEMENTS).and_then(|t| b.fill(&t, 2.0)),
            // An order within the stream, or a fork of the other shared stream into a
            // capture of this one (or a join, or an isolation error).
            3 => b.record_event(event).and_then(|()| b.wait_event(event)),
            4 => b.record_event(event).and_then(|()| {
                let _there = b.use_stream(there)?;
                b.wait_event(event)
            }),
            5 => b.download(y).map(drop),
            _ => b.stream_synchronize(here),
        };
        raced(outcome)?;
        calls += 1;
    }
    Ok(calls)
}

/// A thread's outcome for the main thread: its error, or its panic (a backend's model of a
/// driver crash panics), so that the others are stopped and the case fails at once.
fn reported(work: impl FnOnce() -> Result<usize>) -> std::result::Result<usize, String> {
    match panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(format!("{e:?}: {e}")),
        Err(payload) => Err(format!("panicked: {}", panic_message(&*payload))),
    }
}

/// 12.05: see the module documentation. `SuiteConfig::capture_race_rounds` captures in all.
pub(super) fn capture_race<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let rounds = SuiteConfig::from_env().capture_race_rounds;
    let start = Instant::now();
    let baseline = b.memory_stats();
    let streams: Vec<B::Stream> = (0..STREAMS)
        .map(|_| b.new_stream())
        .collect::<Result<_>>()
        .ctx("new_stream")?;
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(CAPTURERS + ENQUEUERS));
    let (tx, rx) = mpsc::channel::<(bool, std::result::Result<usize, String>)>();
    let per_capturer = rounds.div_ceil(CAPTURERS);
    for index in 0..CAPTURERS {
        let own = Own::new(b).ctx("a capturing thread's buffer, stream and event")?;
        let (b, streams, ledger, barrier, tx) = (
            b.clone(),
            streams.clone(),
            Arc::clone(&ledger),
            Arc::clone(&barrier),
            tx.clone(),
        );
        std::thread::spawn(move || {
            barrier.wait();
            let ended = reported(|| capturer(&b, &streams, &ledger, own, index, per_capturer));
            let _ = tx.send((true, ended));
        });
    }
    for _ in 0..ENQUEUERS {
        let own = Own::new(b).ctx("an enqueueing thread's buffer, stream and event")?;
        let (b, streams, ledger, stop, barrier, tx) = (
            b.clone(),
            streams.clone(),
            Arc::clone(&ledger),
            Arc::clone(&stop),
            Arc::clone(&barrier),
            tx.clone(),
        );
        std::thread::spawn(move || {
            barrier.wait();
            let calls = reported(|| enqueuer(&b, &streams, &ledger, own, &stop));
            let _ = tx.send((false, calls));
        });
    }
    drop(tx);
    let (mut ended, mut calls, mut capturers_left) = (0, 0, CAPTURERS);
    let mut first_error = None;
    for _ in 0..CAPTURERS + ENQUEUERS {
        let Ok((is_capturer, result)) = rx.recv_timeout(DEADLINE.saturating_sub(start.elapsed()))
        else {
            stop.store(true, Ordering::Release);
            return Err(format!(
                "deadlock: the threads did not finish within {DEADLINE:?}"
            ));
        };
        match (is_capturer, result) {
            (true, Ok(n)) => ended += n,
            (false, Ok(n)) => calls += n,
            (_, Err(e)) => {
                first_error.get_or_insert(e);
            }
        }
        if is_capturer {
            capturers_left -= 1;
            if capturers_left == 0 {
                stop.store(true, Ordering::Release);
            }
        }
    }
    stop.store(true, Ordering::Release);
    if let Some(e) = first_error {
        return Err(format!("a thread failed: {e}"));
    }
    drop(streams);
    b.synchronize().ctx("synchronize after the run")?;
    let (made, dropped) = (
        ledger.made.load(Ordering::Acquire),
        ledger.dropped.load(Ordering::Acquire),
    );
    ensure!(
        dropped == made,
        "{made} host callbacks made, {dropped} dropped: each must be dropped exactly once"
    );
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back after the run: before {baseline:?}, after {after:?}"
    );
    println!(
        "    capture race: {rounds} captures begun ({ended} ended and replayed) while {calls} \
         calls were enqueued on their streams; {made} host callbacks, each dropped once; \
         memory back to start; {:.1?}",
        start.elapsed()
    );
    Ok(())
}
