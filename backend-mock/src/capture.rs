//! Simulated stream capture: CUDA's rules, through the driver layer's software capture, and
//! CUDA's capture modes as the device applies them to unsafe calls.

use std::{
    cell::Cell,
    sync::{Arc, Mutex},
    thread::{self, ThreadId},
};

use accel_graph_api::{CaptureErrorMode, backend_kit::EmulatedCudaError};
use accel_graph_driver::{DriverError, DriverResult, api::DriverCapture};

use crate::{MockDevice, graph::MockRawGraph, stream::MockStreamState};

thread_local! {
    /// The calling thread's capture mode, as `cuThreadExchangeStreamCaptureMode` keeps it: per
    /// thread, for the whole process.
    static THREAD_MODE: Cell<CaptureErrorMode> = const { Cell::new(CaptureErrorMode::Global) };
}

/// One capture as the device sees it.
struct DeviceCapture {
    origin: u64,
    thread: ThreadId,
    mode: CaptureErrorMode,
}

/// The captures in progress at the device, with the thread and mode each began with: what
/// CUDA checks an unsafe call against when it reaches the driver, independently of the
/// driver layer's own rules.
#[derive(Default)]
pub(crate) struct DeviceCaptures {
    active: Mutex<Vec<DeviceCapture>>,
}

impl DeviceCaptures {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<DeviceCapture>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self, origin: u64, mode: CaptureErrorMode) {
        self.lock().push(DeviceCapture {
            origin,
            thread: thread::current().id(),
            mode: mode.resolved(),
        });
    }

    fn end(&self, origin: u64) {
        self.lock().retain(|c| c.origin != origin);
    }

    /// The origin streams of the captures an unsafe call from the calling thread meets, by
    /// CUDA's rules for the thread's mode; a device-wide call meets every capture.
    fn met_by_unsafe_call(&self, device_wide: bool) -> Vec<u64> {
        let me = thread::current().id();
        let relaxed = THREAD_MODE.with(Cell::get) == CaptureErrorMode::Relaxed;
        self.lock()
            .iter()
            .filter(|c| {
                device_wide
                    || (!relaxed
                        && if c.thread == me {
                            c.mode != CaptureErrorMode::Relaxed
                        } else {
                            c.mode == CaptureErrorMode::Global
                        })
            })
            .map(|c| c.origin)
            .collect()
    }
}

impl MockDevice {
    /// Applies CUDA's capture modes at the device to an unsafe call (`operation`): a call
    /// that meets a capture is refused and invalidates it, as CUDA does — from the calling
    /// thread, while the capture's owner may be using or ending it, the race NVIDIA's driver
    /// was seen to crash in. Counted, so tests can assert it never happens.
    pub(crate) fn unsafe_call(&self, operation: &str, device_wide: bool) -> DriverResult<()> {
        let met = self.device_captures.met_by_unsafe_call(device_wide);
        if met.is_empty() {
            return Ok(());
        }
        crate::counters::Counters::bump(&self.counters.unsafe_calls_meeting_captures, 1);
        let reason = format!("{operation} reached the device during the capture");
        for origin in met {
            self.capture.invalidate_stream(origin, &reason);
        }
        Err(DriverError::emulated(
            EmulatedCudaError::CaptureUnsupported,
            format!("{operation} conflicts with a stream capture in progress at the device"),
        ))
    }
}

impl DriverCapture for MockDevice {
    type Graph = MockRawGraph;

    unsafe fn begin_capture(
        &self,
        stream: &Arc<MockStreamState>,
        mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        self.alive()?;
        self.capture.begin(stream.index())?;
        self.device_captures.begin(stream.index(), mode);
        Ok(())
    }

    unsafe fn end_capture(&self, stream: &Arc<MockStreamState>) -> DriverResult<MockRawGraph> {
        self.alive()?;
        let nodes = self.capture.end(stream.index());
        self.device_captures.end(stream.index());
        let nodes = nodes?;
        self.sanitize_graph(&nodes)?;
        Ok(MockRawGraph { nodes })
    }

    /// Per thread, as CUDA keeps it; the simulated device applies it to unsafe calls as CUDA
    /// does (see [`crate::MockCounters::unsafe_calls_meeting_captures`]).
    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        Ok(THREAD_MODE.with(|m| m.replace(mode)))
    }
}
