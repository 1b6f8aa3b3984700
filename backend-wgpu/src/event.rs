//! Events: CUDA's fork/join rules during capture (through the driver layer's software
//! capture), completion through queue submissions, timing through timestamp queries, and
//! external event nodes in graphs.

use std::sync::{Arc, Mutex, MutexGuard};

use accel_graph_api::{EventOptions, backend_kit::EmulatedCudaError};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{DriverEvents, DriverStreams},
    software::{EventMark, captured_event_error},
};

use crate::{WgpuDevice, command::Command, stream::WgpuStreamState, timing::Timer};

/// One event (the driver-level object behind a [`crate::WgpuEvent`]).
///
/// Recorded outside a capture, an event stands for its stream's last submission at that
/// point (for a timing event, the submission that writes its timestamp); recorded on a
/// capturing stream, for that stream's last captured nodes.
pub struct WgpuEventState {
    options: EventOptions,
    mark: Mutex<EventMark<Option<wgpu::SubmissionIndex>>>,
    /// Timing events on adapters with timestamp queries.
    timer: Option<Timer>,
}

impl WgpuEventState {
    fn mark(&self) -> MutexGuard<'_, EventMark<Option<wgpu::SubmissionIndex>>> {
        // Replaced whole: a panic elsewhere cannot tear it.
        self.mark.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How the event was made.
    pub fn options(&self) -> EventOptions {
        self.options
    }

    /// The timestamp a record writes, for timing events.
    pub(crate) fn timer(&self) -> Option<&Timer> {
        self.timer.as_ref()
    }

    /// A record reached the queue: the event completes with `submission`.
    pub(crate) fn complete(&self, submission: Option<wgpu::SubmissionIndex>) {
        *self.mark() = EventMark::Eager(submission);
    }

    /// The submission a completed record stands for, if the last record was outside a capture.
    fn submission(&self) -> Option<wgpu::SubmissionIndex> {
        match &*self.mark() {
            EventMark::Eager(submission) => submission.clone(),
            EventMark::Unrecorded | EventMark::Captured { .. } => None,
        }
    }

    /// The timer of an event whose last record wrote a timestamp.
    fn stamped(&self) -> DriverResult<&Timer> {
        match (&*self.mark(), &self.timer) {
            (EventMark::Eager(Some(_)), Some(timer)) => Ok(timer),
            _ => Err(DriverError::emulated(
                EmulatedCudaError::InvalidValue,
                "elapsed_time needs two timing events recorded outside a capture",
            )),
        }
    }
}

impl std::fmt::Debug for WgpuEventState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = match &*self.mark() {
            EventMark::Unrecorded => "unrecorded",
            EventMark::Eager(_) => "recorded",
            EventMark::Captured { .. } => "captured",
        };
        f.debug_struct("WgpuEventState")
            .field("options", &self.options)
            .field("mark", &mark)
            .finish()
    }
}

impl DriverEvents for WgpuDevice {
    type Event = Arc<WgpuEventState>;

    fn create_event(&self, options: EventOptions) -> DriverResult<Arc<WgpuEventState>> {
        let gpu = self.gpu();
        Ok(Arc::new(WgpuEventState {
            options,
            mark: Mutex::new(EventMark::Unrecorded),
            timer: (options.enable_timing && gpu.timestamps).then(|| Timer::new(gpu)),
        }))
    }

    unsafe fn record_event(
        &self,
        event: &Arc<WgpuEventState>,
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        let capturing = self.capture.capture_id(stream.key()).is_some();
        if event.options.external && capturing {
            // An external event is a node of the graph: each replay records it.
            return self.issue(stream, Command::RecordEvent(Arc::clone(event)));
        }
        if let Some(mark) = self.capture.record_event(stream.key())? {
            *event.mark() = mark;
            return Ok(());
        }
        self.issue(stream, Command::RecordEvent(Arc::clone(event)))
    }

    unsafe fn wait_event(
        &self,
        stream: &WgpuStreamState,
        event: &Arc<WgpuEventState>,
    ) -> DriverResult<()> {
        let capturing = self.capture.capture_id(stream.key()).is_some();
        if event.options.external && capturing {
            return self.issue(stream, Command::WaitEvent);
        }
        // Outside a capture there is nothing to order: every stream feeds the one in-order
        // queue, so work submitted before the event is ahead of anything submitted next.
        let mark = event.mark().clone();
        self.capture
            .wait_event(stream.key(), self.is_default_stream(stream), &mark)
    }

    fn event_synchronize(&self, event: &Arc<WgpuEventState>) -> DriverResult<()> {
        if matches!(*event.mark(), EventMark::Captured { .. }) {
            return Err(captured_event_error());
        }
        match event.submission() {
            Some(index) => self.gpu().wait(Some(&index)),
            None => Ok(()),
        }
    }

    fn event_query(&self, event: &Arc<WgpuEventState>) -> DriverResult<bool> {
        match event.submission() {
            Some(index) => self.gpu().is_done(&index),
            None => Ok(true),
        }
    }

    fn elapsed_ms(
        &self,
        start: &Arc<WgpuEventState>,
        end: &Arc<WgpuEventState>,
    ) -> DriverResult<f32> {
        crate::timing::elapsed_ms(self.gpu(), start.stamped()?, end.stamped()?)
    }
}
