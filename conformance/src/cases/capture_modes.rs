//! §5.6: capture error modes, with CUDA's semantics.
//!
//! Every case is a table of rows ([`rows`]): begin capturing `x += 1` in some mode, make one
//! call somewhere (on the capturing thread, on another thread, through another instance of the
//! device), and check the expected outcome — allowed (the capture goes on and replays), refused
//! (`UnsafeDuringCapture` naming the mode and the conflict, and the capture is invalidated) or,
//! for `capture_end` from another thread, `WrongThread` (the capture goes on). One runner
//! ([`check_row`]) checks every row; [`every_unsafe_call`] lists the whole matrix of calls,
//! modes and threads with the outcome CUDA's rules give ([`expected`]).

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureConflict, CaptureErrorMode, GraphError, GraphOptions,
    GraphState,
};

pub(crate) use self::{Call::*, Expect::*, Place::*};
use crate::{
    Target,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_err, expect_state, new_graph,
        on_other_thread, on_stream, recaptures_after_reset, replay_on,
    },
};
pub(crate) use accel_graph_api::CaptureConflict::{CapturingThread, EveryMode, OtherThread};

/// Where the call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// On the capturing thread, through the capturing instance.
    SameThread,
    /// On another thread, through the capturing instance.
    AnotherThread,
    /// On the capturing thread, through another instance of the device.
    AnotherInstance,
    /// On another thread, through another instance of the device.
    AnotherInstanceAndThread,
}

impl Place {
    fn other_thread(self) -> bool {
        matches!(self, AnotherThread | AnotherInstanceAndThread)
    }

    fn other_instance(self) -> bool {
        matches!(self, AnotherInstance | AnotherInstanceAndThread)
    }
}

/// The call made during the capture. Unless it says otherwise it is made with an idle
/// (non-capturing, non-default) stream current where it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// A plain allocation (outside the capture's pool).
    PlainAlloc,
    /// A device-wide `synchronize()`.
    Synchronize,
    /// `stream_synchronize` of the capturing stream.
    SyncCapturingStream,
    /// `stream_synchronize` of an idle stream.
    SyncIdleStream,
    /// `event_synchronize` of an event never recorded.
    EventSynchronize,
    /// `event_query` of an event never recorded (`cuEventQuery`: PyTorch's allocator stops
    /// polling its events during a capture because of this rule).
    EventQuery,
    /// A blocking `upload` (on the capturing thread: with the capturing stream current).
    Upload,
    /// A blocking `download` (on the capturing thread: with the capturing stream current).
    Download,
    /// `is_capturing` of the capturing stream and of an idle one (must answer true, false).
    IsCapturing,
    /// `capture_end()`, with the capturing stream current there (so only the thread differs).
    CaptureEnd,
    /// `capture_end()` with that thread's own current stream (another thread's default
    /// stream): the thread and the stream differ.
    CaptureEndElsewhere,
}

/// What the call must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// It succeeds and the capture goes on.
    Allowed,
    /// It fails with `UnsafeDuringCapture` (the capture's resolved mode, this conflict) and
    /// invalidates the capture.
    Refused(CaptureConflict),
    /// (`capture_end` only) it fails with `WrongThread`, and the capture goes on.
    WrongThread,
    /// (`capture_end` only) it fails with `CaptureStreamMismatch`, and the capture goes on.
    StreamMismatch,
}

/// One row of a capture-mode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    mode: CaptureErrorMode,
    place: Place,
    call: Call,
    expect: Expect,
}

/// A row: in a capture in `mode`, `call` made at `place` must have outcome `expect`.
pub(crate) const fn row(mode: CaptureErrorMode, place: Place, call: Call, expect: Expect) -> Row {
    Row {
        mode,
        place,
        call,
        expect,
    }
}

/// A case checking each of `rows` in turn.
pub(crate) fn rows<B: Backend, const N: usize>(
    rows: [Row; N],
) -> impl Fn(&Target<B>) -> CaseResult + Send + Sync + 'static {
    move |t| rows.iter().try_for_each(|&r| check_row(t, r))
}

/// The outcome CUDA's rules give `call` at `place` during a capture in `mode`:
///
/// * a device-wide synchronize, and waiting for the capturing stream, conflict with the capture
///   in every mode, from everywhere;
/// * so do blocking copies on the capturing thread through the capturing instance, whose
///   current stream is capturing (through another instance they copy on its idle stream);
/// * `is_capturing` is always legal;
/// * any other unsafe call is refused on the capturing thread unless the mode is relaxed, and
///   on other threads only in global mode;
/// * `capture_end` from another thread is `WrongThread` unless the mode is relaxed, whatever
///   stream is current there (the thread is checked first); in relaxed mode, with another
///   stream current there, it is `CaptureStreamMismatch`.
pub(crate) fn expected(mode: CaptureErrorMode, place: Place, call: Call) -> Expect {
    let mode = mode.resolved();
    match call {
        Synchronize | SyncCapturingStream => Refused(EveryMode),
        Upload | Download if !place.other_thread() && !place.other_instance() => Refused(EveryMode),
        IsCapturing => Allowed,
        CaptureEnd if place.other_thread() && mode != CaptureErrorMode::Relaxed => WrongThread,
        CaptureEnd => Allowed,
        CaptureEndElsewhere if mode != CaptureErrorMode::Relaxed => WrongThread,
        CaptureEndElsewhere => StreamMismatch,
        _ if !place.other_thread() && mode != CaptureErrorMode::Relaxed => Refused(CapturingThread),
        _ if place.other_thread() && mode == CaptureErrorMode::Global => Refused(OtherThread),
        _ => Allowed,
    }
}

/// Every unsafe call, in every mode, on the capturing thread and on another one, with the
/// outcome [`expected`] gives it.
pub(crate) fn every_unsafe_call<B: Backend>(t: &Target<B>) -> CaseResult {
    // Calls that conflict with the capture itself first, then those the mode decides.
    let calls = [
        Synchronize,
        SyncCapturingStream,
        Upload,
        Download,
        PlainAlloc,
        SyncIdleStream,
        EventSynchronize,
        EventQuery,
    ];
    for call in calls {
        for mode in CaptureErrorMode::ALL {
            for place in [SameThread, AnotherThread] {
                check_row(t, row(mode, place, call, expected(mode, place, call)))?;
            }
        }
    }
    println!(
        "5.06t: {} unsafe calls x {} modes x 2 threads checked",
        calls.len(),
        CaptureErrorMode::ALL.len()
    );
    Ok(())
}

/// The runner. Begins capturing `x += 1` in `r.mode` on a fresh stream of the primary
/// instance, makes `r.call` at `r.place`, then checks `r.expect`:
///
/// * `Allowed`: the call worked; the capture ends (where it was ended) and one replay gives
///   x = 1;
/// * `Refused(conflict)`: `UnsafeDuringCapture { mode: r.mode.resolved(), conflict }`; the
///   capture is invalidated — further work on it and `capture_end` fail with
///   `CaptureInvalidated`, the graph is empty, nothing captures, nothing ran — and the graph
///   captures again after `reset()`;
/// * `WrongThread`, `StreamMismatch`: that error, and the capture goes on (still capturing,
///   work issued now is captured) and ends on its own thread: one replay gives x = 2.
pub(crate) fn check_row<B: Backend>(t: &Target<B>, r: Row) -> CaseResult {
    check_row_inner(t, r).map_err(|e| {
        format!(
            "{} capture, {:?} at {:?} (expected {:?}): {e}",
            r.mode, r.call, r.place, r.expect
        )
    })
}

fn check_row_inner<B: Backend>(t: &Target<B>, r: Row) -> CaseResult {
    let b = t.backend();
    let other = if r.place.other_instance() {
        Some(t.another_instance()?)
    } else {
        None
    };
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    // What the call needs is made before the capture begins (making it is unsafe too).
    let props = match &other {
        Some(o) => Props::new(o)?,
        None => Props::new(b)?,
    };
    let mut g = new_graph(b, GraphOptions::new().capture_error_mode(r.mode))?;
    ensure!(
        g.capture_error_mode() == r.mode,
        "capture_error_mode() is {:?}, built with {:?}",
        g.capture_error_mode(),
        r.mode
    );
    let current = on_stream(b, &stream)?;
    g.capture_begin().ctx("capture_begin")?;
    b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;

    let outcome = if matches!(r.call, CaptureEnd | CaptureEndElsewhere) {
        let ended = on_other_thread("capture_end", || {
            let _there = match r.call {
                CaptureEnd => Some(b.use_stream(&stream)?),
                _ => None,
            };
            g.capture_end()
        });
        match ended {
            Ok(result) => result.map(|()| None),
            Err(message) => {
                g.reset();
                return Err(message);
            }
        }
    } else {
        let own = other.is_none();
        match props.call(r.call, r.place.other_thread(), &stream, own) {
            Ok(result) => result,
            Err(message) => {
                g.reset();
                return Err(message);
            }
        }
    };

    match r.expect {
        Allowed => {
            let kept = outcome.ctx("the call")?;
            if g.state() == GraphState::Capturing {
                g.capture_end().ctx("capture_end after the call")?;
            }
            drop(kept);
            expect_state(&g, GraphState::Ready, "after the capture ended")?;
            expect_capturing(b, &stream, false, "after the capture ended")?;
            g.replay().ctx("replay")?;
            expect_all(b, &x, 1.0, "one replay of x += 1")
        }
        WrongThread | StreamMismatch => {
            let refused = match r.expect {
                WrongThread => matches!(outcome, Err(GraphError::WrongThread)),
                _ => matches!(outcome, Err(GraphError::CaptureStreamMismatch)),
            };
            if !refused {
                g.reset();
                return Err(format!(
                    "capture_end: expected {:?}, got {outcome:?}",
                    r.expect
                ));
            }
            expect_state(&g, GraphState::Capturing, "after the refused capture_end")?;
            expect_capturing(b, &stream, true, "after the refused capture_end")?;
            b.add_scalar(&x, 1.0)
                .ctx("add_scalar after the refused capture_end (the capture goes on)")?;
            g.capture_end()
                .ctx("capture_end on the capturing thread after the refused one")?;
            drop(current);
            replay_on(b, &stream, &mut g)?;
            expect_all(b, &x, 2.0, "one replay of the two adds captured")
        }
        Refused(conflict) => {
            let mode = r.mode.resolved();
            match outcome {
                Err(GraphError::UnsafeDuringCapture {
                    mode: m,
                    conflict: c,
                    ..
                }) if m == mode && c == conflict => {}
                Err(e) => {
                    g.reset();
                    return Err(format!(
                        "expected UnsafeDuringCapture {{ mode: {mode:?}, conflict: \
                         {conflict:?} }}, got Err({e:?}): {e}"
                    ));
                }
                Ok(_) => {
                    g.reset();
                    return Err("expected UnsafeDuringCapture, got Ok".into());
                }
            }
            expect_err!(
                b.add_scalar(&x, 1.0),
                GraphError::CaptureInvalidated { .. },
                "work issued on the invalidated capture"
            );
            expect_err!(
                g.capture_end(),
                GraphError::CaptureInvalidated { .. },
                "capture_end after the refused call"
            );
            expect_state(&g, GraphState::Empty, "after an invalidated capture")?;
            expect_capturing(b, &stream, false, "after an invalidated capture")?;
            drop(current);
            expect_all(b, &x, 0.0, "x after the invalidated capture")?;
            recaptures_after_reset(b, &mut g)
        }
    }
}

/// What a call produced: a buffer it allocated (kept until the capture ended), or nothing.
type Made<B> = Result<Option<<B as accel_graph_api::PortableOps>::Buffer<f32>>, GraphError>;

/// What a call needs, made before the capture begins, on the instance that makes the call: an
/// idle stream, an event never recorded, a buffer.
struct Props<B: Backend> {
    backend: B,
    idle: B::Stream,
    event: B::Event,
    buffer: B::Buffer<f32>,
}

impl<B: Backend> Props<B> {
    fn new(b: &B) -> Result<Self, String> {
        Ok(Props {
            backend: b.clone(),
            idle: b.new_stream().ctx("new_stream")?,
            event: b.new_event().ctx("new_event")?,
            buffer: b.alloc_from(&[1.0; 2]).ctx("alloc_from")?,
        })
    }

    /// Makes `call` (on another thread if `other_thread`). `capturing` is the stream being
    /// captured; `own` says whether the call goes through the capturing instance (whose
    /// capturing stream the blocking copies use on the capturing thread). `Err` is a failure of
    /// the case itself.
    fn call(
        &self,
        call: Call,
        other_thread: bool,
        capturing: &B::Stream,
        own: bool,
    ) -> Result<Made<B>, String> {
        let b = &self.backend;
        let run = || -> Result<Made<B>, String> {
            // Blocking copies on the capturing thread use its current stream, which captures.
            let on_capturing = own && !other_thread && matches!(call, Upload | Download);
            let _current = on_stream(b, if on_capturing { capturing } else { &self.idle })?;
            Ok(match call {
                PlainAlloc => b.alloc(4).map(Some),
                Synchronize => b.synchronize().map(|()| None),
                SyncCapturingStream => b.stream_synchronize(capturing).map(|()| None),
                SyncIdleStream => b.stream_synchronize(&self.idle).map(|()| None),
                EventSynchronize => b.event_synchronize(&self.event).map(|()| None),
                EventQuery => b.event_query(&self.event).map(|_| None),
                Upload => b.upload(&self.buffer, &[1.0, 2.0]).map(|()| None),
                Download => b.download(&self.buffer).map(|_| None),
                IsCapturing => match (b.is_capturing(capturing), b.is_capturing(&self.idle)) {
                    (Ok(true), Ok(false)) => Ok(None),
                    (yes, no) => {
                        return Err(format!(
                            "is_capturing(capturing stream) = {yes:?}, \
                             is_capturing(idle stream) = {no:?}; expected Ok(true), Ok(false)"
                        ));
                    }
                },
                CaptureEnd | CaptureEndElsewhere => {
                    unreachable!("capture_end is made by the runner")
                }
            })
        };
        if other_thread {
            on_other_thread(&format!("{call:?}"), run)?
        } else {
            run()
        }
    }
}
