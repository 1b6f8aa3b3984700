//! 10.11 – 10.12: a host callback that panics. The panic never unwinds into the device runtime:
//! it is caught and reported once, as `HostCallbackPanicked { callback, message }`, by the call
//! that observes it — the replay (or `host_callback`) that ran it on a synchronous backend, or
//! the next replay or synchronize on an asynchronous one — and the stream and graph stay usable.

use std::{
    panic,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, HostCallback};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, new_graph, on_stream},
};

/// The message of the deliberate panics.
const MESSAGE: &str = "deliberate host callback panic";

/// A callback counting its calls, which panics on its first call only.
fn panics_once(calls: &Arc<AtomicUsize>) -> HostCallback {
    let calls = Arc::clone(calls);
    Arc::new(move || {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("{MESSAGE}");
        }
    })
}

/// A callback counting its calls.
fn counts(calls: &Arc<AtomicUsize>) -> HostCallback {
    let calls = Arc::clone(calls);
    Arc::new(move || {
        calls.fetch_add(1, Ordering::SeqCst);
    })
}

/// Runs `f` with the panic hook silenced: the deliberate panics are not news. (Cases run one
/// at a time, so swapping the process-wide hook disturbs nobody.)
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let out = f();
    panic::set_hook(previous);
    out
}

/// Of `results` (the calls that may observe the panic), exactly one must be the panic's
/// report, naming a callback that `names` accepts and carrying the panic's message; the others
/// must succeed.
fn reported_once(
    results: Vec<(&str, Result<(), GraphError>)>,
    names: impl Fn(&str) -> bool,
) -> CaseResult {
    let mut reports = 0;
    for (call, result) in results {
        match result {
            Ok(()) => {}
            Err(GraphError::HostCallbackPanicked { callback, message }) => {
                reports += 1;
                ensure!(
                    names(&callback),
                    "{call} reported the panic of callback {callback:?}, which is not the one \
                     that panicked"
                );
                ensure!(
                    message.contains(MESSAGE),
                    "{call} reported the panic with message {message:?}"
                );
            }
            Err(e) => return Err(format!("{call}: unexpected error {e:?}: {e}")),
        }
    }
    ensure!(
        reports == 1,
        "the panic was reported {reports} times, expected exactly once"
    );
    Ok(())
}

/// 10.11: a graph captures a counting callback, `x += 1` and a callback that panics on its
/// first call (host nodes #0 and #1). The first replay and the synchronize after it report
/// the panic exactly once between them, naming host node #1 of the graph; the replay still ran
/// the graph's work. A second replay and synchronize succeed: the graph still works.
pub(super) fn captured<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        b.host_callback(counts(&first))?;
        b.add_scalar(&x, 1.0)?;
        b.host_callback(panics_once(&second))
    })
    .ctx("capture of two host callbacks and x += 1")?;
    ensure!(
        first.load(Ordering::SeqCst) + second.load(Ordering::SeqCst) == 0,
        "a host callback ran at capture"
    );
    let results = quietly(|| -> Result<_, String> {
        let _current = on_stream(b, &stream)?;
        let replay = g.replay();
        let synchronize = b.synchronize();
        Ok(vec![
            ("the first replay", replay),
            ("the synchronize after it", synchronize),
        ])
    })?;
    reported_once(results, |callback| {
        callback.starts_with("host node #1 of graph ")
    })?;
    {
        let _current = on_stream(b, &stream)?;
        g.replay().ctx("a second replay after the panic")?;
        b.synchronize().ctx("synchronize after the second replay")?;
    }
    let calls = (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst));
    ensure!(
        calls == (2, 2),
        "the callbacks ran {calls:?} times in two replays, expected (2, 2)"
    );
    expect_all(b, &x, 2.0, "x after two replays of x += 1")
}

/// 10.12: an eager host callback that panics: `host_callback` and the synchronize after it
/// report the panic exactly once between them, naming an eager callback; the stream then
/// runs work and callbacks as before.
pub(super) fn eager<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let _current = on_stream(b, &stream)?;
    let (panicky, counting) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let results = quietly(|| {
        let issued = b.host_callback(panics_once(&panicky));
        let synchronize = b.synchronize();
        vec![
            ("host_callback", issued),
            ("the synchronize after it", synchronize),
        ]
    });
    reported_once(results, |callback| callback.contains("eager"))?;
    b.add_scalar(&x, 1.0).ctx("add_scalar after the panic")?;
    b.host_callback(counts(&counting))
        .ctx("a host callback after the panic")?;
    b.host_callback(panics_once(&panicky))
        .ctx("the same callback again (it panics only once)")?;
    b.synchronize().ctx("synchronize after the panic")?;
    let calls = (
        panicky.load(Ordering::SeqCst),
        counting.load(Ordering::SeqCst),
    );
    ensure!(
        calls == (2, 1),
        "the callbacks ran {calls:?} times, expected (2, 1)"
    );
    expect_all(b, &x, 1.0, "x after the panic")
}
