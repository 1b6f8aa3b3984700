//! HIP stream capture: `hipStreamBeginCapture` / `hipStreamEndCapture` and the thread's
//! capture mode.

use accel_graph_api::CaptureErrorMode;
use accel_graph_driver::{DriverResult, api::DriverCapture};

use crate::{HGraph, HStream, HipDevice, error::check, ffi};

fn hip_mode(mode: CaptureErrorMode) -> ffi::hipStreamCaptureMode {
    use ffi::hipStreamCaptureMode as M;
    match mode.resolved() {
        CaptureErrorMode::ThreadLocal => M::hipStreamCaptureModeThreadLocal,
        CaptureErrorMode::Relaxed => M::hipStreamCaptureModeRelaxed,
        CaptureErrorMode::Global | CaptureErrorMode::Default => M::hipStreamCaptureModeGlobal,
    }
}

fn api_mode(mode: ffi::hipStreamCaptureMode) -> CaptureErrorMode {
    use ffi::hipStreamCaptureMode as M;
    match mode {
        M::hipStreamCaptureModeThreadLocal => CaptureErrorMode::ThreadLocal,
        M::hipStreamCaptureModeRelaxed => CaptureErrorMode::Relaxed,
        _ => CaptureErrorMode::Global,
    }
}

/// Runs `f` with this thread's capture mode relaxed: work that is no stream work (destroying
/// a graph, loading the kernels' module) must not disturb a capture in progress elsewhere in
/// the process, nor be refused by it.
pub(crate) fn relaxed<T>(f: impl FnOnce() -> T) -> T {
    let mut mode = ffi::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
    // SAFETY: exchanges this thread's mode with a local; restored below.
    let err = unsafe { ffi::hipThreadExchangeStreamCaptureMode(&mut mode) };
    let out = f();
    if err == ffi::hipError_t::hipSuccess {
        // SAFETY: puts the previous mode back.
        unsafe { ffi::hipThreadExchangeStreamCaptureMode(&mut mode) };
    }
    out
}

impl DriverCapture for HipDevice {
    type Graph = HGraph;

    unsafe fn begin_capture(&self, stream: &HStream, mode: CaptureErrorMode) -> DriverResult<()> {
        // SAFETY: the stream is alive (the handle holds it).
        check(
            unsafe { ffi::hipStreamBeginCapture(stream.raw(), hip_mode(mode)) },
            "hipStreamBeginCapture",
        )
    }

    unsafe fn end_capture(&self, stream: &HStream) -> DriverResult<HGraph> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture on its own stream; `graph` is a local out-parameter.
        let err = unsafe { ffi::hipStreamEndCapture(stream.raw(), &mut graph) };
        // Owned before the check: a graph returned alongside an error is ours to destroy.
        let graph = HGraph::from_raw(graph);
        check(err, "hipStreamEndCapture")?;
        Ok(graph)
    }

    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        let mut raw = hip_mode(mode);
        // SAFETY: exchanges this thread's mode with a local.
        let err = unsafe { ffi::hipThreadExchangeStreamCaptureMode(&mut raw) };
        check(err, "hipThreadExchangeStreamCaptureMode")?;
        Ok(api_mode(raw))
    }
}
