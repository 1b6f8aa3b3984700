//! Simulated events: CUDA's fork/join rules during capture (through the driver layer's
//! software capture), timing on the device's virtual clock, and external event nodes.

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use accel_graph_api::{EventOptions, backend_kit::EmulatedCudaError};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::DriverEvents,
    software::{EventMark, captured_event_error},
};

use crate::{MockDevice, ops::MockCommand, sanitizer::EventClock};

/// One simulated event (the driver-level object behind a [`crate::MockEvent`]).
///
/// Outside capture the mock is synchronous, so an event completes when recorded, at the
/// virtual time of the device (one microsecond per command run); on a stalled stream it
/// completes when the stream's queue reaches it.
pub struct MockEventState {
    options: EventOptions,
    mark: Mutex<EventMark<u64>>,
    /// Recorded on a stalled stream and not reached yet.
    pending: AtomicBool,
    /// Virtual time of the last completed record, in microseconds.
    stamp: AtomicU64,
    /// What the last completed record marked, for the race sanitizer.
    pub(crate) clock: EventClock,
}

impl MockEventState {
    fn mark(&self) -> MutexGuard<'_, EventMark<u64>> {
        // Replaced whole: a panic elsewhere cannot tear it.
        self.mark.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The record reached the device at virtual time `now`.
    pub(crate) fn complete(&self, now: u64) {
        self.stamp.store(now, Ordering::Release);
        *self.mark() = EventMark::Eager(now);
        self.pending.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for MockEventState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockEventState")
            .field("options", &self.options)
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl DriverEvents for MockDevice {
    type Event = Arc<MockEventState>;

    fn create_event(&self, options: EventOptions) -> DriverResult<Arc<MockEventState>> {
        self.alive()?;
        Ok(Arc::new(MockEventState {
            options,
            mark: Mutex::new(EventMark::Unrecorded),
            pending: AtomicBool::new(false),
            stamp: AtomicU64::new(0),
            clock: EventClock::default(),
        }))
    }

    unsafe fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> DriverResult<()> {
        self.alive()?;
        self.capture.check_link(&event.mark());
        let capturing = self.capture.capture_id(stream.index()).is_some();
        if event.options.external && capturing {
            // An external event is a node of the graph: each replay records it.
            return self.issue(stream, MockCommand::RecordEvent(Arc::clone(event)));
        }
        if let Some(mark) = self.capture.record_event(stream.index())? {
            *event.mark() = mark;
            return Ok(());
        }
        event.pending.store(true, Ordering::Release);
        self.issue(stream, MockCommand::RecordEvent(Arc::clone(event)))
    }

    unsafe fn wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> DriverResult<()> {
        self.alive()?;
        let capturing = self.capture.capture_id(stream.index()).is_some();
        if event.options.external && capturing {
            return self.issue(stream, MockCommand::WaitEvent(Arc::clone(event)));
        }
        if event.pending.load(Ordering::Acquire) && !capturing {
            return Err(DriverError::emulated(
                EmulatedCudaError::NotReady,
                "the mock cannot order a stream behind an event of a stalled stream",
            ));
        }
        let mark = event.mark().clone();
        self.capture.check_link(&mark);
        self.capture
            .wait_event(stream.index(), stream.index() == 0, &mark)?;
        if !capturing {
            self.sanitize_wait(stream, event);
        }
        Ok(())
    }

    fn event_synchronize(&self, event: &Arc<MockEventState>) -> DriverResult<()> {
        self.alive()?;
        self.unsafe_call("event_synchronize", false)?;
        if matches!(*event.mark(), EventMark::Captured { .. }) {
            return Err(captured_event_error());
        }
        if event.pending.load(Ordering::Acquire) {
            return Err(crate::error::stalled("event_synchronize"));
        }
        self.host_waited_for_event(event);
        Ok(())
    }

    fn event_query(&self, event: &Arc<MockEventState>) -> DriverResult<bool> {
        self.alive()?;
        self.unsafe_call("event_query", false)?;
        let complete = !event.pending.load(Ordering::Acquire);
        if complete {
            // The host saw the marked work done: it is ordered before what the host issues next.
            self.host_waited_for_event(event);
        }
        Ok(complete)
    }

    fn elapsed_ms(
        &self,
        start: &Arc<MockEventState>,
        end: &Arc<MockEventState>,
    ) -> DriverResult<f32> {
        self.alive()?;
        for event in [start, end] {
            if event.pending.load(Ordering::Acquire)
                || !matches!(*event.mark(), EventMark::Eager(_))
            {
                return Err(DriverError::emulated(
                    EmulatedCudaError::InvalidValue,
                    "elapsed_time needs two events whose records completed",
                ));
            }
        }
        let (from, to) = (
            start.stamp.load(Ordering::Acquire),
            end.stamp.load(Ordering::Acquire),
        );
        // Virtual microseconds to milliseconds; negative when `end` completed first, as CUDA's.
        let micros = if to >= from {
            to.abs_diff(from) as f64
        } else {
            -(from.abs_diff(to) as f64)
        };
        Ok((micros / 1000.0) as f32)
    }
}
