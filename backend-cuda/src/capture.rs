//! CUDA stream capture: `cuStreamBeginCapture` / `cuStreamEndCapture` and the thread's capture
//! mode.

use accel_graph_driver::native::CaptureModes;
use cudarc::driver::sys;

use crate::{CuGraph, CuStream, CudaDevice, error::check};

/// CUDA's capture modes.
pub(crate) const MODES: CaptureModes<sys::CUstreamCaptureMode> = CaptureModes {
    global: sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    thread_local: sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    relaxed: sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    exchange: exchange_mode,
};

/// Sets this thread's capture mode, leaving the previous one in `mode`; true on success.
fn exchange_mode(mode: &mut sys::CUstreamCaptureMode) -> bool {
    // SAFETY: exchanges this thread's mode with the caller's variable.
    let status = unsafe { sys::cuThreadExchangeStreamCaptureMode(mode) };
    status == sys::CUresult::CUDA_SUCCESS
}

accel_graph_driver::native_capture_impl! {
    CudaDevice, CuStream => cu_stream, CuGraph, MODES, check;
    begin: sys::cuStreamBeginCapture_v2, end: sys::cuStreamEndCapture,
    exchange: sys::cuThreadExchangeStreamCaptureMode;
}
