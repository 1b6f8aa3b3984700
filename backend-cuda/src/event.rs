//! CUDA events: fork/join across streams, timing, and external event nodes in captures.

use accel_graph_api::EventOptions;
use accel_graph_driver::{DriverResult, api::DriverEvents};
use cudarc::driver::{CudaEvent, sys};

use crate::{
    CuStream, CudaDevice,
    error::{check, error, from_cudarc},
};

/// A CUDA event of the backend (the driver-level object behind a [`crate::CudaEventHandle`]).
pub struct CuEvent {
    event: CudaEvent,
    external: bool,
}

impl CuEvent {
    /// The raw `CUevent`, for native work. Do not destroy it.
    pub fn cu_event(&self) -> sys::CUevent {
        self.event.cu_event()
    }
}

impl CudaDevice {
    /// Whether `stream` is capturing (for the external-event flags, which CUDA accepts only
    /// during capture).
    fn stream_capturing(stream: &CuStream) -> DriverResult<bool> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: live stream, local out-parameter.
        let rc = unsafe { sys::cuStreamIsCapturing(stream.cu_stream(), &mut status) };
        check(rc, "cuStreamIsCapturing")?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }
}

impl DriverEvents for CudaDevice {
    type Event = CuEvent;

    fn create_event(&self, options: EventOptions) -> DriverResult<CuEvent> {
        let flags = if options.enable_timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let event = self
            .ctx
            .new_event(Some(flags))
            .map_err(|e| from_cudarc(e, "cuEventCreate"))?;
        Ok(CuEvent {
            event,
            external: options.external,
        })
    }

    unsafe fn record_event(&self, event: &CuEvent, stream: &CuStream) -> DriverResult<()> {
        // An event recorded in a capture the backend does not know would fork the backend's
        // streams into that capture when they wait on it.
        self.check_joined(stream)?;
        let flags = if event.external && Self::stream_capturing(stream)? {
            // A node of its own in the graph, recorded by every replay.
            sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32
        } else {
            sys::CUevent_record_flags::CU_EVENT_RECORD_DEFAULT as u32
        };
        // SAFETY: event and stream are alive.
        check(
            unsafe { sys::cuEventRecordWithFlags(event.cu_event(), stream.cu_stream(), flags) },
            "cuEventRecord",
        )
    }

    unsafe fn wait_event(&self, stream: &CuStream, event: &CuEvent) -> DriverResult<()> {
        self.check_joined(stream)?;
        let flags = if event.external && Self::stream_capturing(stream)? {
            sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL as u32
        } else {
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT as u32
        };
        // SAFETY: event and stream are alive.
        let status = unsafe { sys::cuStreamWaitEvent(stream.cu_stream(), event.cu_event(), flags) };
        check(status, "cuStreamWaitEvent")?;
        // The driver layer joined the stream to the capture this wait forks it into, if any.
        self.note_joined(stream);
        Ok(())
    }

    fn event_synchronize(&self, event: &CuEvent) -> DriverResult<()> {
        // SAFETY: the event is alive.
        check(
            unsafe { sys::cuEventSynchronize(event.cu_event()) },
            "cuEventSynchronize",
        )
    }

    fn event_query(&self, event: &CuEvent) -> DriverResult<bool> {
        // SAFETY: the event is alive.
        match unsafe { sys::cuEventQuery(event.cu_event()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(error(other, "cuEventQuery")),
        }
    }

    fn elapsed_ms(&self, start: &CuEvent, end: &CuEvent) -> DriverResult<f32> {
        let mut ms = 0f32;
        // SAFETY: both events are alive; `ms` is a local out-parameter.
        let rc = unsafe { sys::cuEventElapsedTime(&mut ms, start.cu_event(), end.cu_event()) };
        check(rc, "cuEventElapsedTime")?;
        Ok(ms)
    }
}
