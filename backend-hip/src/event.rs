//! HIP events: fork/join across streams, timing, and external event nodes in captures (where
//! the runtime has `hipEventRecordWithFlags`).

use accel_graph_api::EventOptions;
use accel_graph_driver::{DriverResult, api::DriverEvents, api::DriverStreams};

use crate::{
    HStream, HipDevice,
    error::{check, error, name_of},
    ffi,
};

/// A HIP event of the backend (the driver-level object behind a [`crate::HipEvent`]).
#[derive(Debug)]
pub struct HEvent {
    raw: ffi::hipEvent_t,
    external: bool,
}

// SAFETY: a hipEvent_t is a process-wide runtime handle that any host thread may use; the
// wrapper only carries the pointer and destroys the event once, on drop.
unsafe impl Send for HEvent {}
// SAFETY: as above; nothing is mutated through `&HEvent`.
unsafe impl Sync for HEvent {}

impl HEvent {
    /// The raw `hipEvent_t`, for native work. Do not destroy it, and do not make a stream wait
    /// on it through the raw handle while a capture runs (see [`HStream::raw`]).
    pub fn raw(&self) -> ffi::hipEvent_t {
        self.raw
    }
}

impl Drop for HEvent {
    fn drop(&mut self) {
        // SAFETY: the event was created by `create_event` and is destroyed once.
        let err = unsafe { ffi::hipEventDestroy(self.raw) };
        if err != ffi::hipError_t::hipSuccess {
            tracing::warn!(error = %name_of(err), "hipEventDestroy failed");
        }
    }
}

impl DriverEvents for HipDevice {
    type Event = HEvent;

    fn create_event(&self, options: EventOptions) -> DriverResult<HEvent> {
        let flags = if options.enable_timing {
            ffi::hipEventDefault
        } else {
            ffi::hipEventDisableTiming
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a local out-parameter.
        let err = unsafe { ffi::hipEventCreateWithFlags(&mut raw, flags) };
        check(err, "hipEventCreateWithFlags")?;
        Ok(HEvent {
            raw,
            external: options.external,
        })
    }

    unsafe fn record_event(&self, event: &HEvent, stream: &HStream) -> DriverResult<()> {
        // An external record is a node of its own in the graph, recorded by every replay. The
        // flag exists only where `hipEventRecordWithFlags` does (not in ROCm 5.2), and is
        // meant for capturing streams only, as CUDA's: elsewhere the record is a plain one.
        if event.external
            && let Some(record_with_flags) = ffi::optional().event_record_with_flags
            && self.capture_id(stream)?.is_some()
        {
            // SAFETY: event and stream are alive; the signature was checked at lookup.
            let err =
                unsafe { record_with_flags(event.raw, stream.raw(), ffi::EVENT_RECORD_EXTERNAL) };
            return check(err, "hipEventRecordWithFlags");
        }
        // SAFETY: event and stream are alive.
        check(
            unsafe { ffi::hipEventRecord(event.raw, stream.raw()) },
            "hipEventRecord",
        )
    }

    unsafe fn wait_event(&self, stream: &HStream, event: &HEvent) -> DriverResult<()> {
        // An external wait in a capture is a node of its own, which may wait on a record made
        // outside the capture — on runtimes with external event nodes (those that have
        // `hipEventRecordWithFlags`). ROCm 5.2 accepts no flag: there an external wait is a
        // plain wait (an edge in a capture, refused for a record made outside it).
        let flags = if event.external
            && ffi::optional().event_record_with_flags.is_some()
            && self.capture_id(stream)?.is_some()
        {
            ffi::EVENT_WAIT_EXTERNAL
        } else {
            0
        };
        // SAFETY: event and stream are alive.
        check(
            unsafe { ffi::hipStreamWaitEvent(stream.raw(), event.raw, flags) },
            "hipStreamWaitEvent",
        )
    }

    fn event_synchronize(&self, event: &HEvent) -> DriverResult<()> {
        // SAFETY: the event is alive.
        check(
            unsafe { ffi::hipEventSynchronize(event.raw) },
            "hipEventSynchronize",
        )
    }

    fn event_query(&self, event: &HEvent) -> DriverResult<bool> {
        // SAFETY: the event is alive.
        match unsafe { ffi::hipEventQuery(event.raw) } {
            ffi::hipError_t::hipSuccess => Ok(true),
            ffi::hipError_t::hipErrorNotReady => Ok(false),
            other => Err(error(other, "hipEventQuery")),
        }
    }

    fn elapsed_ms(&self, start: &HEvent, end: &HEvent) -> DriverResult<f32> {
        let mut ms = 0f32;
        // SAFETY: both events are alive; `ms` is a local out-parameter.
        let err = unsafe { ffi::hipEventElapsedTime(&mut ms, start.raw, end.raw) };
        check(err, "hipEventElapsedTime")?;
        Ok(ms)
    }
}
