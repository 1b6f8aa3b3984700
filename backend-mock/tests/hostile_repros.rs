//! Regression tests of defects the hostile random sequences of the conformance suite (5.15)
//! found, each the defect's minimal reproduction: a fixed sequence of calls on two threads
//! racing, repeated round after round. The threads are lined up so that the race is met
//! often — the old code failed within ten rounds (the first two tests) or a few hundred (the
//! fork) — and each test runs many times that many rounds, about a second or less in a debug
//! build.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    thread,
};

use accel_graph_api::{CaptureErrorMode, prelude::*};
use accel_graph_mock::MockBackend;

/// Rounds of [`capture_end_from_another_thread_as_a_conditional_body_returns`] (the old
/// code failed within ten).
const ROUNDS_A: usize = 2000;

/// Rounds of [`a_fork_racing_a_re_record_of_its_event_leaves_a_stream_capturing`] (the old
/// code failed within about 150).
const ROUNDS_B: usize = 10_000;
/// The delays of the sweep there: `SWEEP` steps on either side of none, each of `SWEEP_STEP`
/// spins — what one thread's call takes before the racing step differs by machine.
const SWEEP: usize = 32;
/// Spins per step of the sweep.
const SWEEP_STEP: usize = 16;

/// Rounds of [`a_graph_dropped_while_a_conditional_body_records_an_event`] (the old code
/// failed in the first).
const ROUNDS_C: usize = 1000;

/// Spins until `flag` is set.
fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::Acquire) {
        thread::yield_now();
    }
}

/// Spins until two threads have called it with `ready`: unlike a barrier's, its threads
/// leave it within a fraction of a microsecond of each other (on two idle cores), so that a
/// sweep of delays after it meets the race's window.
fn meet(ready: &AtomicUsize) {
    ready.fetch_add(1, Ordering::SeqCst);
    let mut spins = 0u32;
    while ready.load(Ordering::SeqCst) < 2 {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            // A core shared with other work: let the other thread run.
            thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

fn spin(n: usize) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// A relaxed capture ended from another thread just as a conditional node's body returns.
///
/// Thread A captures on `s` (relaxed mode) and calls `if_then`; its body issues an op on a
/// buffer, drops the buffer's last handle and, as it returns, lets thread B go. Thread B, with
/// `s` current, calls `capture_end` until it is no longer refused with
/// `CaptureEndInsideBody`. That refusal used to hold only while the body ran: an end in the
/// window between the body's return and the end of the conditional node ended the capture
/// under the half-built node, which was then finished on a stream that no longer captured and
/// run there at once, on a buffer the capture no longer kept alive (`DanglingBuffer`; on a
/// GPU, a write into freed memory). Fixed: a conditional node counts as open from its begin to
/// its end, and a capture does not end under an open node (`CaptureEndInsideBody`, the capture
/// invalidated). Checked: the conditional never touches freed memory, and nothing captures
/// after the graph's reset.
#[test]
fn capture_end_from_another_thread_as_a_conditional_body_returns() -> Result<()> {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let cond = b.alloc_from(&[1u32])?;
    let _current = b.use_stream(&s)?;
    for round in 0..ROUNDS_A {
        let x = b.alloc_from(&[1.0f32; 4])?;
        let graph =
            Mutex::new(b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::Relaxed))?);
        graph.lock().unwrap().capture_begin()?;
        let go = AtomicBool::new(false);
        let conditional = thread::scope(|scope| {
            let (graph, go) = (&graph, &go);
            let other = b.clone();
            let s = &s;
            scope.spawn(move || {
                // Relaxed mode lets another thread end the capture from the capture stream.
                let _current = other.use_stream(s).unwrap();
                wait_for(go);
                while matches!(
                    graph.lock().unwrap().capture_end(),
                    Err(GraphError::CaptureEndInsideBody)
                ) {
                    std::hint::spin_loop();
                }
            });
            let body = b.clone();
            b.if_then(&cond, move || {
                let work = body.add_scalar(&x, 1.0);
                // The last handle: only the capture can keep the memory now.
                drop(x);
                // The other thread's tries begin as the body returns.
                go.store(true, Ordering::Release);
                work
            })
        });
        assert!(
            !matches!(conditional, Err(GraphError::DanglingBuffer { .. })),
            "round {round}: the conditional node touched freed memory: {conditional:?}"
        );
        graph.lock().unwrap().reset();
        assert!(
            !b.is_capturing(&s)?,
            "round {round}: the stream still captures"
        );
    }
    Ok(())
}

/// A fork racing an eager re-record of its event, then a `capture_begin` on the forked
/// stream.
///
/// A capture on `s1` records event `e`. Then, at once, thread A waits on `e` from `s2` (a
/// fork of `s2` into the capture) while thread B records `e` again, eagerly, on the default
/// stream: the two threads meet, then one of them waits a few spins, a different number each
/// round. `wait_event` decided to fork from the capture `e` was last recorded in *before* it
/// took the event for the driver's wait; when B's record landed in between, the layer joined
/// `s2` to the capture but the driver waited on an eager event and forked nothing. A
/// `capture_begin` on `s2` then began a capture in the driver, was refused by the layer
/// (`CaptureInvalidated`: "capture_begin on a stream that takes part in another capture") and
/// returned without ending the driver's capture: `s2` captured for good, with no graph owning
/// the capture. Fixed twice over: `wait_event` decides again when the event was recorded again
/// between its decision and the driver's wait, and a refused `capture_begin` ends the capture
/// it began in the driver. Checked: after every graph is dropped, `s2` does not capture.
#[test]
fn a_fork_racing_a_re_record_of_its_event_leaves_a_stream_capturing() -> Result<()> {
    let b = MockBackend::new();
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    let e = b.new_event()?;
    for round in 0..ROUNDS_B {
        let mut g1 = b.graph(GraphOptions::new())?;
        let mut g0 = b.graph(GraphOptions::new())?;
        {
            let _current = b.use_stream(&s1)?;
            g1.capture_begin()?;
            b.record_event(&e)?;
        }
        // One of the two threads waits a little after they meet, a little longer each round
        // (see `SWEEP`): some rounds start the record as the wait is deciding.
        let offset = round % (2 * SWEEP + 1);
        let (delay_wait, delay_record) = match offset.checked_sub(SWEEP) {
            Some(d) => (0, d * SWEEP_STEP),
            None => ((SWEEP - offset) * SWEEP_STEP, 0),
        };
        let ready = AtomicUsize::new(0);
        let (e, ready) = (&e, &ready);
        let (waited, recorded) = thread::scope(|scope| {
            let a = scope.spawn(|| {
                let _current = b.use_stream(&s2).unwrap();
                meet(ready);
                spin(delay_wait);
                b.wait_event(e)
            });
            let r = scope.spawn(|| {
                meet(ready);
                spin(delay_record);
                b.record_event(e)
            });
            (a.join().unwrap(), r.join().unwrap())
        });
        let begun = {
            let _current = b.use_stream(&s2)?;
            g0.capture_begin()
        };
        drop((g0, g1));
        assert!(
            !b.is_capturing(&s2)?,
            "round {round}: s2 still captures after every graph was dropped (wait_event: \
             {waited:?}, record_event: {recorded:?}, capture_begin on s2: {begun:?})"
        );
    }
    Ok(())
}

/// A graph dropped (its capture aborted) by another thread while a `while_loop` body of its
/// capture records an event and opens a nested conditional node.
///
/// Thread A captures on `s1` (relaxed) and calls `while_loop`; its body records event `e`
/// (in the capture), lets thread B go and calls `if_then` (a nested conditional node). Thread
/// B drops the graph — `reset` ends the capture without the refusal `capture_end` gives while a
/// body is being captured — and then waits on `e` from its own current stream. The capture
/// used to end in the driver under the open nodes, and the mock's model of the CUDA driver's
/// race panicked: an event recorded in a capture used while another thread grows or ends that
/// capture, which crashes the CUDA driver (see `driver/src/event.rs`). Fixed: a reset or drop
/// under an open conditional node invalidates the capture and leaves its abort to the thread
/// that ends the last open node. Checked: no panic on either thread, every call returns `Ok`
/// or a typed error, and nothing captures afterwards.
#[test]
fn a_graph_dropped_while_a_conditional_body_records_an_event() -> Result<()> {
    let b = MockBackend::new();
    let s1 = b.new_stream()?;
    let e = b.new_event()?;
    let (flag, cond) = (b.alloc_from(&[1.0f32])?, b.alloc_from(&[1u32])?);
    for round in 0..ROUNDS_C {
        b.upload(&flag, &[1.0])?;
        let graph = Mutex::new(Some(
            b.graph(
                GraphOptions::new()
                    .keep_graph(true)
                    .capture_error_mode(CaptureErrorMode::Relaxed),
            )?,
        ));
        let (go, went) = mpsc::channel();
        let (dropper, looped) = thread::scope(|scope| {
            let (graph, e, b) = (&graph, &e, &b);
            let dropper = scope.spawn(move || {
                went.recv().unwrap();
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(graph.lock().unwrap().take());
                    b.wait_event(e)
                }))
            });
            let looped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _current = b.use_stream(&s1)?;
                if let Some(g) = graph.lock().unwrap().as_mut() {
                    g.capture_begin()?;
                }
                b.while_loop(&flag, || {
                    b.record_event(e)?;
                    let _ = go.send(());
                    b.if_then(&cond, || Ok(()))?;
                    b.fill(&flag, 0.0)
                })
            }));
            (dropper.join().unwrap(), looped)
        });
        let message = |p: &Box<dyn std::any::Any + Send>| {
            p.downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        };
        if let Err(p) = &dropper {
            panic!(
                "round {round}: dropping the graph / wait_event panicked: {}",
                message(p)
            );
        }
        if let Err(p) = &looped {
            panic!("round {round}: the while_loop panicked: {}", message(p));
        }
        drop(graph);
        assert!(!b.is_capturing(&s1)?, "round {round}: s1 still captures");
    }
    Ok(())
}
