//! §5.6: capture error modes, with CUDA's semantics. The unsafe call is a plain `alloc`
//! (outside the capture's pool): made on the capturing thread with a non-capturing stream
//! current, or from another thread (whose current stream is the default stream).

use std::thread;

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, GraphState,
};

use crate::{
    Case,
    case::requirements,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_err, expect_state,
        leak_checked, new_graph, recaptures_after_reset, replay_on,
    },
};

const SECTION: &str = "5.06 capture modes";

pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    let req = requirements::capture_modes_enforced;
    vec![
        Case::new(
            "5.06a global: unsafe call on the capturing thread errors and invalidates",
            SECTION,
            req,
            |b: &B| own_thread_unsafe(b, CaptureErrorMode::Global),
        ),
        Case::new(
            "5.06b thread_local: unsafe call on the capturing thread errors and invalidates",
            SECTION,
            req,
            |b: &B| own_thread_unsafe(b, CaptureErrorMode::ThreadLocal),
        ),
        Case::new(
            "5.06c relaxed: unsafe call on the capturing thread is allowed",
            SECTION,
            req,
            |b: &B| own_thread_unsafe(b, CaptureErrorMode::Relaxed),
        ),
        Case::new(
            "5.06d default behaves as global on the capturing thread",
            SECTION,
            req,
            |b: &B| own_thread_unsafe(b, CaptureErrorMode::Default),
        ),
        Case::new(
            "5.06e global: unsafe call from another thread errors and invalidates",
            SECTION,
            req,
            |b: &B| other_thread_unsafe(b, CaptureErrorMode::Global),
        ),
        Case::new(
            "5.06f thread_local: unsafe call from another thread is allowed",
            SECTION,
            req,
            |b: &B| other_thread_unsafe(b, CaptureErrorMode::ThreadLocal),
        ),
        Case::new(
            "5.06g relaxed: unsafe call from another thread is allowed",
            SECTION,
            req,
            |b: &B| other_thread_unsafe(b, CaptureErrorMode::Relaxed),
        ),
        Case::new(
            "5.06h default behaves as global from another thread",
            SECTION,
            req,
            |b: &B| other_thread_unsafe(b, CaptureErrorMode::Default),
        ),
        Case::new(
            "5.06i global: synchronize() on the capturing thread errors and invalidates",
            SECTION,
            req,
            synchronize_during_capture::<B>,
        ),
        Case::new(
            "5.06j global: capture_end from another thread is WrongThread",
            SECTION,
            req,
            |b: &B| end_from_other_thread(b, CaptureErrorMode::Global),
        ),
        Case::new(
            "5.06k thread_local: capture_end from another thread is WrongThread",
            SECTION,
            req,
            |b: &B| end_from_other_thread(b, CaptureErrorMode::ThreadLocal),
        ),
        Case::new(
            "5.06l default: capture_end from another thread is WrongThread",
            SECTION,
            req,
            |b: &B| end_from_other_thread(b, CaptureErrorMode::Default),
        ),
        Case::new(
            "5.06m relaxed: capture_end from another thread works",
            SECTION,
            req,
            |b: &B| end_from_other_thread(b, CaptureErrorMode::Relaxed),
        ),
        Case::new(
            "5.06n relaxed: stream_synchronize on the capturing stream still fails and invalidates",
            SECTION,
            req,
            sync_capturing_stream_relaxed::<B>,
        ),
        Case::new(
            "5.06p relaxed: device synchronize on the capturing thread fails and invalidates",
            SECTION,
            req,
            |b: &B| device_synchronize_conflicts(b, CaptureErrorMode::Relaxed, false),
        ),
        Case::new(
            "5.06q thread_local: device synchronize from another thread fails and invalidates",
            SECTION,
            req,
            |b: &B| device_synchronize_conflicts(b, CaptureErrorMode::ThreadLocal, true),
        ),
        Case::new(
            "5.06o is_capturing is legal during a global capture, from any thread",
            SECTION,
            req,
            is_capturing_always_legal::<B>,
        ),
    ]
}

fn forbids_on_own_thread(mode: CaptureErrorMode) -> bool {
    mode.resolved() != CaptureErrorMode::Relaxed
}

fn forbids_on_other_thread(mode: CaptureErrorMode) -> bool {
    mode.resolved() == CaptureErrorMode::Global
}

/// Capture `x += 1` in `mode`; in the middle, switch to another (non-capturing) stream and
/// make a plain allocation.
fn own_thread_unsafe<B: Backend>(b: &B, mode: CaptureErrorMode) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let other = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new().capture_error_mode(mode))?;
        ensure!(
            g.capture_error_mode() == mode,
            "capture_error_mode() is {:?}, built with {mode:?}",
            g.capture_error_mode()
        );
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        let unsafe_call = {
            let _other = b.use_stream(&other);
            b.alloc(4)
        };
        if forbids_on_own_thread(mode) {
            expect_err!(
                unsafe_call,
                GraphError::UnsafeDuringCapture { .. },
                format!("{mode}: plain alloc on the capturing thread")
            );
            expect_err!(
                g.capture_end(),
                GraphError::CaptureInvalidated { .. },
                format!("{mode}: capture_end after an unsafe call")
            );
            expect_state(&g, GraphState::Empty, "after an invalidated capture")?;
            expect_capturing(b, &stream, false, "after an invalidated capture")?;
            recaptures_after_reset(b, &mut g)
        } else {
            let buffer =
                unsafe_call.ctx(&format!("{mode}: plain alloc on the capturing thread"))?;
            g.capture_end().ctx("capture_end")?;
            drop(buffer);
            g.replay().ctx("replay")?;
            expect_all(b, &x, 1.0, "replay of the relaxed capture")
        }
    })
}

/// Capture `x += 1` in `mode`; in the middle, another thread makes a plain allocation.
fn other_thread_unsafe<B: Backend>(b: &B, mode: CaptureErrorMode) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new().capture_error_mode(mode))?;
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        let unsafe_call = thread::scope(|s| s.spawn(|| b.alloc(4)).join()).map_err(|p| {
            format!(
                "the other thread panicked: {}",
                crate::report::panic_message(&*p)
            )
        });
        let unsafe_call = match unsafe_call {
            Ok(result) => result,
            Err(message) => {
                g.reset();
                return Err(message);
            }
        };
        if forbids_on_other_thread(mode) {
            expect_err!(
                unsafe_call,
                GraphError::UnsafeDuringCapture { .. },
                format!("{mode}: plain alloc from another thread")
            );
            // As the CUDA driver does: the forbidden call invalidates the global capture too.
            expect_err!(
                g.capture_end(),
                GraphError::CaptureInvalidated { .. },
                format!("{mode}: capture_end after another thread's unsafe call")
            );
            expect_state(&g, GraphState::Empty, "after an invalidated capture")?;
            expect_capturing(b, &stream, false, "after an invalidated capture")?;
            recaptures_after_reset(b, &mut g)
        } else {
            let buffer = unsafe_call.ctx(&format!("{mode}: plain alloc from another thread"))?;
            g.capture_end().ctx("capture_end")?;
            drop(buffer);
            g.replay().ctx("replay")?;
            expect_all(b, &x, 1.0, "replay")
        }
    })
}

fn synchronize_during_capture<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(
            b,
            GraphOptions::new().capture_error_mode(CaptureErrorMode::Global),
        )?;
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        expect_err!(
            b.synchronize(),
            GraphError::UnsafeDuringCapture { .. },
            "synchronize() on the capturing thread"
        );
        expect_err!(
            g.capture_end(),
            GraphError::CaptureInvalidated { .. },
            "capture_end after synchronize()"
        );
        expect_capturing(b, &stream, false, "after an invalidated capture")?;
        expect_all(b, &x, 0.0, "x after the invalidated capture")?;
        recaptures_after_reset(b, &mut g)
    })
}

/// Begin a capture here, try to end it from another thread (with the capture stream current
/// there, so only the thread differs).
fn end_from_other_thread<B: Backend>(b: &B, mode: CaptureErrorMode) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new().capture_error_mode(mode))?;
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        let ended = thread::scope(|s| {
            s.spawn(|| {
                let _there = b.use_stream(&stream);
                g.capture_end()
            })
            .join()
        });
        let ended = match ended {
            Ok(result) => result,
            Err(p) => {
                g.reset();
                return Err(format!(
                    "capture_end on another thread panicked: {}",
                    crate::report::panic_message(&*p)
                ));
            }
        };
        if mode.resolved() == CaptureErrorMode::Relaxed {
            ended.ctx("relaxed: capture_end from another thread")?;
        } else {
            expect_err!(
                ended,
                GraphError::WrongThread,
                format!("{mode}: capture_end from another thread")
            );
            expect_state(&g, GraphState::Capturing, "after WrongThread")?;
            expect_capturing(b, &stream, true, "after WrongThread")?;
            g.capture_end()
                .ctx("capture_end from the capturing thread")?;
        }
        expect_state(&g, GraphState::Ready, "after the capture ended")?;
        expect_capturing(b, &stream, false, "after the capture ended")?;
        replay_on(b, &stream, &mut g)?;
        expect_all(b, &x, 1.0, "replay")
    })
}

/// Relaxed mode allows unsafe calls, not calls that conflict with the capture itself: waiting
/// for the capturing stream can never finish, so it fails and invalidates the capture.
fn sync_capturing_stream_relaxed<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(
            b,
            GraphOptions::new().capture_error_mode(CaptureErrorMode::Relaxed),
        )?;
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        expect_err!(
            b.stream_synchronize(&stream),
            GraphError::UnsafeDuringCapture { .. },
            "relaxed: stream_synchronize(capturing stream)"
        );
        expect_err!(
            g.capture_end(),
            GraphError::CaptureInvalidated { .. },
            "relaxed: capture_end after synchronizing the capturing stream"
        );
        expect_capturing(b, &stream, false, "after an invalidated capture")?;
        recaptures_after_reset(b, &mut g)
    })
}

/// Asking whether a stream captures is never an unsafe call, on any thread, and does not
/// disturb a global capture.
fn is_capturing_always_legal<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let idle = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(
            b,
            GraphOptions::new().capture_error_mode(CaptureErrorMode::Global),
        )?;
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        expect_capturing(b, &stream, true, "own thread, capturing stream")?;
        expect_capturing(b, &idle, false, "own thread, idle stream")?;
        let there = thread::scope(|s| {
            s.spawn(|| -> Result<(bool, bool), GraphError> {
                Ok((b.is_capturing(&stream)?, b.is_capturing(&idle)?))
            })
            .join()
        });
        let there = match there {
            Ok(result) => result,
            Err(p) => {
                g.reset();
                return Err(format!(
                    "is_capturing on another thread panicked: {}",
                    crate::report::panic_message(&*p)
                ));
            }
        };
        let (capturing, idle_capturing) = there.ctx("is_capturing from another thread")?;
        ensure!(
            capturing && !idle_capturing,
            "from another thread: is_capturing(capturing) = {capturing}, \
             is_capturing(idle) = {idle_capturing}"
        );
        g.capture_end()
            .ctx("capture_end after is_capturing calls")?;
        g.replay().ctx("replay")?;
        expect_all(b, &x, 1.0, "replay")
    })
}

/// A device-wide synchronize waits for the capturing stream too, which can never finish: it
/// conflicts with every capture, whatever its mode and whichever thread calls it, fails and
/// invalidates the capture (as `cuCtxSynchronize` does).
fn device_synchronize_conflicts<B: Backend>(
    b: &B,
    mode: CaptureErrorMode,
    from_other_thread: bool,
) -> CaseResult {
    leak_checked(b, || {
        let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
        let stream = b.new_stream().ctx("new_stream")?;
        let mut g = new_graph(b, GraphOptions::new().capture_error_mode(mode))?;
        let _current = b.use_stream(&stream);
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        let synchronized = if from_other_thread {
            match thread::scope(|s| s.spawn(|| b.synchronize()).join()) {
                Ok(result) => result,
                Err(p) => {
                    g.reset();
                    return Err(format!(
                        "synchronize on another thread panicked: {}",
                        crate::report::panic_message(&*p)
                    ));
                }
            }
        } else {
            b.synchronize()
        };
        let place = if from_other_thread {
            "from another thread"
        } else {
            "on the capturing thread"
        };
        expect_err!(
            synchronized,
            GraphError::UnsafeDuringCapture { .. },
            format!("{mode}: synchronize() {place}")
        );
        expect_err!(
            g.capture_end(),
            GraphError::CaptureInvalidated { .. },
            format!("{mode}: capture_end after synchronize() {place}")
        );
        expect_capturing(b, &stream, false, "after an invalidated capture")?;
        expect_all(b, &x, 0.0, "x after the invalidated capture")?;
        recaptures_after_reset(b, &mut g)
    })
}
