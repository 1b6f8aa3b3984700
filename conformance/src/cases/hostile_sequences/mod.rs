//! §5.15: hostile random call sequences, hunting hangs and panics.
//!
//! Unlike the state machine (§5.14) these sequences predict nothing. They make calls a careful
//! program would not — captures begun and ended on random streams in random modes, events
//! recorded inside captures and waited on from other streams (twice), events recorded eagerly
//! and waited on by a capturing stream (which invalidates the capture), buffers dropped and
//! replaced while captures use them, conditional nodes whose bodies end the capture around
//! them, begin others, switch streams or fail, kernel launches, matrix products and node
//! updates with arguments of every kind — and check only what must hold whatever the calls:
//!
//! * every call returns, `Ok` or a typed error (an error only a defect gives — a replay into
//!   freed memory, a panicking host callback or kernel — fails the sequence);
//! * nothing panics (a panic in a dependency of the backend fails the sequence too);
//! * no call hangs: a watchdog thread aborts the whole process when a sequence runs longer
//!   than a generous bound (20 s; [`watchdog::HANG_SECS_ENV`]), after printing the sequence's
//!   seed and its calls up to the one in progress on each thread — a hang fails CI instead
//!   of stalling it;
//! * once everything is dropped, no stream captures and the instance holds exactly the memory
//!   it held before the sequence.
//!
//! Each sequence runs on an instance of its own (opened for it, where the suite can) and is
//! drawn from its seed alone, so a seed reproduces it: the failure message names it, and
//! [`SEED_ENV`] with [`SEQUENCES_ENV`]`=1` runs that sequence alone. The case runs
//! [`SuiteConfig::api_sequences`] single-thread sequences (10,000 by default, lowered for slow
//! devices by that variable) and a twentieth as many sequences of 2 to 4 threads sharing the
//! streams, graphs, buffers and events, each thread with its own current stream (the variables
//! below change either count). The threads of a sequence make every call a single thread
//! makes, conditional nodes included — on each other's streams and inside each other's
//! captures, their bodies ending and beginning captures while other threads end, reset or drop
//! the graph capturing around them, record the events the bodies wait on and wait on those
//! they record.

mod actions;
mod watchdog;
mod world;

use std::{
    sync::{
        Arc, Barrier,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use accel_graph_api::{AcceleratorGraph, Backend, CaptureErrorMode, GraphOptions};

use self::{
    actions::{Offers, Sequence},
    watchdog::{Describe, Watchdog},
    world::{CallLog, Tally, World},
};
use crate::{
    Case, SuiteConfig, Target,
    case::requirements::none,
    check::{CaseResult, Ctx, ensure},
};

/// Single-thread sequences, when set (default: [`SuiteConfig::api_sequences`]).
pub(crate) const SEQUENCES_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_HOSTILE_SEQUENCES";
/// Threaded sequences, when set (default: a twentieth of the single-thread ones, at least 1).
pub(crate) const THREADED_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_HOSTILE_THREADED";
/// The seed of the first sequence (the others follow it: `seed + 1`, ...), when set; decimal
/// or `0x` hexadecimal.
pub(crate) const SEED_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_HOSTILE_SEED";
/// Set (to anything), every call is printed to stderr before it is made, each sequence's seed
/// before its calls: where a call kills the process (a fault inside a driver), the last lines
/// printed name it.
pub(crate) const TRACE_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_HOSTILE_TRACE";
/// The first seed when [`SEED_ENV`] is unset: every run walks the same sequences.
const FIRST_SEED: u64 = 0x5eed_0000_0000;

const HOSTILE: &str = "5.15 hostile sequences";
const SINGLE: &str = "5.15a hostile random call sequences on one thread: every call returns, \
                      nothing panics, nothing captures or leaks afterwards";
const THREADED: &str = "5.15b hostile random call sequences of 2-4 threads sharing streams, \
                        graphs, buffers and events: every call returns, nothing panics or leaks";
const REGRESSION: &str = "5.15c capture_end returns after another stream waited twice on an \
                          event of the capture invalidated by an eager event";

/// The cases of §5.15, in running order.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(SINGLE, HOSTILE, none, |t| hostile(t, false)),
        Case::new(THREADED, HOSTILE, none, |t| hostile(t, true)),
        Case::new(
            REGRESSION,
            HOSTILE,
            none,
            invalidated_capture_event_waited_twice,
        ),
    ])
}

fn count(name: &str, default: usize) -> Result<usize, String> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("{name}={text:?} is not a count")),
        Err(_) => Ok(default),
    }
}

fn first_seed() -> Result<u64, String> {
    match std::env::var(SEED_ENV) {
        Ok(text) => {
            let t = text.trim();
            match t.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            }
            .map_err(|_| format!("{SEED_ENV}={text:?} is not a seed"))
        }
        Err(_) => Ok(FIRST_SEED),
    }
}

/// What the watchdog prints of a sequence in progress: its seed and each thread's calls up
/// to the one in progress, each with the ticks it began and returned at (calls of different
/// threads whose ticks overlap ran at the same time). Read with atomics only (the sequence's
/// threads may hold any lock).
struct Journal {
    label: String,
    sequence: Sequence,
    /// The setup's calls, then each thread's.
    logs: Vec<CallLog>,
}

impl Journal {
    fn new(label: String, sequence: Sequence) -> Arc<Self> {
        let clock = Arc::new(AtomicUsize::new(0));
        let logs = std::iter::once(&sequence.setup)
            .chain(&sequence.threads)
            .map(|calls| CallLog::new(&clock, calls.len()))
            .collect();
        Arc::new(Journal {
            label,
            sequence,
            logs,
        })
    }

    fn describe(&self) -> String {
        let mut out = format!("{}\n", self.label);
        let lists = std::iter::once(&self.sequence.setup).chain(&self.sequence.threads);
        for (n, (calls, log)) in lists.zip(&self.logs).enumerate() {
            let at = log.at();
            let name = match n {
                0 => "setup".to_owned(),
                n => format!("thread {}", n - 1),
            };
            let state = match at {
                0 => "not started".to_owned(),
                at if at > calls.len() => format!("all {} calls returned", calls.len()),
                at => format!("in call {} of {}", at - 1, calls.len()),
            };
            out.push_str(&format!("  {name}: {state}\n"));
            for (i, call) in calls.iter().enumerate().take(at.min(calls.len())) {
                let mark = if i + 1 == at { "=>" } else { "  " };
                let span = match log.span(i) {
                    [begin, 0] => format!("{begin}.."),
                    [begin, end] => format!("{begin}..{end}"),
                };
                out.push_str(&format!("    {mark} {i:3} [{span:>11}] {call:?}\n"));
            }
        }
        out
    }
}

/// 5.15a and 5.15b: the random sequences, on one thread or several.
fn hostile<B: Backend>(t: &Target<B>, threaded: bool) -> CaseResult {
    let config = SuiteConfig::from_env();
    let single = count(SEQUENCES_ENV, config.api_sequences)?;
    let n = if threaded {
        count(THREADED_ENV, (single / 20).max(1))?
    } else {
        single
    };
    let first = first_seed()?;
    let caps = t.capabilities();
    let offers = Offers {
        conditionals: caps.conditional_nodes,
        host_callbacks: caps.host_callbacks,
    };
    let (case, kind) = if threaded {
        (THREADED, "threaded")
    } else {
        (SINGLE, "single-thread")
    };
    let watchdog = Watchdog::start(case)?;
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut threads = 0;
    for i in 0..n {
        let seed = first.wrapping_add(i as u64);
        if std::env::var_os(TRACE_ENV).is_some() {
            eprintln!("5.15 {kind} sequence {i}, seed {seed:#x}");
        }
        let sequence = if threaded {
            Sequence::threaded(seed, offers)
        } else {
            Sequence::single(seed, offers)
        };
        threads += sequence.threads.len();
        let label = format!(
            "{kind} sequence {i} of {n}, seed {seed:#x} ({} calls); run it alone with \
             {SEED_ENV}={seed:#x} {SEQUENCES_ENV}=1 {THREADED_ENV}=1 and the filter \"5.15\"",
            sequence.len(),
        );
        let journal = Journal::new(label, sequence);
        let describe: Describe = {
            let journal = Arc::clone(&journal);
            Arc::new(move || journal.describe())
        };
        watchdog.arm(describe);
        let result = run_sequence(t, &journal, &mut tally);
        watchdog.disarm();
        result.map_err(|message| {
            format!(
                "{message}\n{}(the watchdog's bound: {} s)",
                journal.describe(),
                watchdog.limit().as_secs()
            )
        })?;
    }
    let errors: Vec<String> = tally
        .errors
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "{}: {n} {} sequences ({threads} threads) in {:.1} s: {} calls, {} Ok, {} typed errors, \
         {} found their slot empty; errors: {}",
        &case[..5],
        kind,
        start.elapsed().as_secs_f64(),
        tally.calls(),
        tally.ok,
        tally.errors.values().sum::<usize>(),
        tally.empty,
        errors.join(", ")
    );
    Ok(())
}

/// The streams of a sequence on `b`: the default stream and two new ones.
fn streams_of<B: Backend>(b: &B) -> Result<Vec<B::Stream>, String> {
    Ok(vec![
        b.default_stream(),
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    ])
}

/// Runs one sequence on an instance of its own (the primary one where the suite cannot open
/// another), then drops everything and checks that nothing captures or leaks.
fn run_sequence<B: Backend>(t: &Target<B>, journal: &Journal, tally: &mut Tally) -> CaseResult {
    let b = if t.can_open_another() {
        t.another_instance()?
    } else {
        t.backend().clone()
    };
    let streams = streams_of(&b)?;
    let previous = b
        .set_current_stream(&streams[0])
        .ctx("set_current_stream")?;
    let baseline = b.memory_stats();
    let world = World::new(&b, &streams).ctx("making the sequence's events and flags")?;
    let sequence = &journal.sequence;
    let mut outcome = world.run_calls(&sequence.setup, &journal.logs[0], tally);
    if outcome.is_ok() {
        outcome = match sequence.threads.as_slice() {
            [calls] => world.run_calls(calls, &journal.logs[1], tally),
            threads => run_threads(&world, threads, journal, tally),
        };
    }
    // Torn down whatever happened, so that a failure leaves the primary instance usable.
    let _ = b.set_current_stream(&streams[0]);
    let teardown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.teardown()));
    let restored = b.set_current_stream(&previous);
    outcome?;
    if let Err(payload) = teardown {
        return Err(format!(
            "dropping the sequence's graphs, events and buffers panicked: {}",
            crate::report::panic_message(&*payload)
        ));
    }
    restored.ctx("set_current_stream back")?;
    for (k, stream) in streams.iter().enumerate() {
        ensure!(
            !b.is_capturing(stream).ctx("is_capturing")?,
            "stream {k} is still capturing after every graph was dropped"
        );
    }
    // A buffer given to `record_stream` is freed once its streams passed the drop, which the
    // allocator learns at a synchronize.
    b.synchronize().ctx("synchronize after the sequence")?;
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory leaked by the sequence: before {baseline:?}, after everything was dropped \
         and a synchronize {after:?}"
    );
    Ok(())
}

/// The threads of a sequence, started together: the first failure (by thread) is the
/// sequence's.
fn run_threads<B: Backend>(
    world: &World<B>,
    threads: &[Vec<actions::Action>],
    journal: &Journal,
    tally: &mut Tally,
) -> CaseResult {
    let start = Barrier::new(threads.len());
    let results: Vec<(Tally, CaseResult)> = std::thread::scope(|s| {
        let handles: Vec<_> = threads
            .iter()
            .zip(&journal.logs[1..])
            .map(|(calls, log)| {
                let start = &start;
                s.spawn(move || {
                    let mut tally = Tally::default();
                    start.wait();
                    let outcome = world.run_calls(calls, log, &mut tally);
                    (tally, outcome)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|payload| {
                    let message = crate::report::panic_message(&*payload);
                    (Tally::default(), Err(message))
                })
            })
            .collect()
    });
    let mut first = Ok(());
    for (n, (counted, outcome)) in results.into_iter().enumerate() {
        tally.add(&counted);
        if let Err(message) = outcome
            && first.is_ok()
        {
            first = Err(format!("thread {n}: {message}"));
        }
    }
    first
}

/// The steps of 5.15c, for the watchdog.
const STEPS: [&str; 12] = [
    "s1: capture_begin",
    "s1: record_event(e) in the capture",
    "s3: record_event(f), eager",
    "s1: wait_event(f): invalidates the capture",
    "s2: wait_event(e), first time",
    "s2: wait_event(e), second time",
    "s1: capture_end",
    "reset",
    "is_capturing(s1, s2, s3)",
    "eager work on s1, s2, s3",
    "capture and replay again",
    "drop everything",
];

/// 5.15c: on stream s1 a capture begins and records event `e`; an eager event recorded on
/// another stream and waited on by s1 invalidates the capture; s2 waits on `e` twice (each
/// wait fails: `e` belongs to a dead capture); then `capture_end` on s1 must return (it once
/// waited forever), nothing may stay capturing, and everything must work again. In every
/// capture mode, under the watchdog.
fn invalidated_capture_event_waited_twice<B: Backend>(t: &Target<B>) -> CaseResult {
    let watchdog = Watchdog::start(REGRESSION)?;
    for mode in CaptureErrorMode::ALL {
        let step = Arc::new(AtomicUsize::new(0));
        let describe: Describe = {
            let step = Arc::clone(&step);
            Arc::new(move || {
                let at = step.load(Ordering::Relaxed);
                let mut out = format!("5.15c in capture mode {mode}:\n");
                for (i, name) in STEPS.iter().enumerate().take(at + 1) {
                    let mark = if i == at { "=>" } else { "  " };
                    out.push_str(&format!("    {mark} {name}\n"));
                }
                out
            })
        };
        watchdog.arm(describe);
        let result = waited_twice_once(t.backend(), mode, &step);
        watchdog.disarm();
        result.map_err(|e| format!("capture mode {mode}: {e}"))?;
    }
    Ok(())
}

fn waited_twice_once<B: Backend>(b: &B, mode: CaptureErrorMode, step: &AtomicUsize) -> CaseResult {
    let next = |n: usize| step.store(n, Ordering::Relaxed);
    let baseline = b.memory_stats();
    let (s1, s2, s3) = (
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    );
    let (e, f) = (
        b.new_event().ctx("new_event")?,
        b.new_event().ctx("new_event")?,
    );
    let x = b.alloc_from(&[1.0f32; 4]).ctx("alloc_from")?;
    let mut g = b
        .graph(GraphOptions::new().capture_error_mode(mode))
        .ctx("graph")?;
    let previous = b.current_stream();
    let on = |s: &B::Stream| b.set_current_stream(s).map(drop).ctx("set_current_stream");
    let mut calls = Vec::new();
    let run = (|| -> CaseResult {
        next(0);
        on(&s1)?;
        g.capture_begin().ctx("capture_begin on s1")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar in the capture")?;
        next(1);
        b.record_event(&e).ctx("record_event(e) in the capture")?;
        next(2);
        on(&s3)?;
        calls.push(("s3: record_event(f)", b.record_event(&f)));
        next(3);
        on(&s1)?;
        calls.push(("s1: wait_event(f)", b.wait_event(&f)));
        next(4);
        on(&s2)?;
        calls.push(("s2: wait_event(e)", b.wait_event(&e)));
        next(5);
        calls.push(("s2: wait_event(e) again", b.wait_event(&e)));
        next(6);
        on(&s1)?;
        calls.push(("s1: capture_end", g.capture_end()));
        next(7);
        g.reset();
        next(8);
        for (name, s) in [("s1", &s1), ("s2", &s2), ("s3", &s3)] {
            ensure!(
                !b.is_capturing(s).ctx("is_capturing")?,
                "{name} still captures after capture_end and reset"
            );
        }
        next(9);
        for s in [&s1, &s2, &s3] {
            on(s)?;
            b.add_scalar(&x, 1.0).ctx("eager add_scalar afterwards")?;
            // Orders the next stream's work after this one's.
            b.synchronize().ctx("synchronize")?;
        }
        next(10);
        on(&s1)?;
        g.capture_begin().ctx("capture_begin again")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar in the new capture")?;
        g.capture_end().ctx("capture_end of the new capture")?;
        g.replay().ctx("replay")?;
        let data = b.download(&x).ctx("download")?;
        ensure!(
            data == [5.0; 4],
            "x is {data:?} after three eager increments and one replay, expected 5s"
        );
        Ok(())
    })();
    let _ = b.set_current_stream(&previous);
    run.map_err(|message| {
        let outcomes: Vec<String> = calls
            .iter()
            .map(|(name, r)| format!("{name}: {r:?}"))
            .collect();
        format!("{message} (calls before: {})", outcomes.join("; "))
    })?;
    next(11);
    drop((g, x, e, f, s1, s2, s3));
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not returned: before {baseline:?}, after {after:?}"
    );
    Ok(())
}
