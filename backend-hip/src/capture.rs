//! HIP stream capture: `hipStreamBeginCapture` / `hipStreamEndCapture` and the thread's
//! capture mode.

use accel_graph_driver::native::CaptureModes;

use crate::{HGraph, HStream, HipDevice, error::check, ffi};

/// HIP's capture modes.
pub(crate) const MODES: CaptureModes<ffi::hipStreamCaptureMode> = CaptureModes {
    global: ffi::hipStreamCaptureMode::hipStreamCaptureModeGlobal,
    thread_local: ffi::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal,
    relaxed: ffi::hipStreamCaptureMode::hipStreamCaptureModeRelaxed,
    exchange: exchange_mode,
};

/// Sets this thread's capture mode, leaving the previous one in `mode`; true on success.
fn exchange_mode(mode: &mut ffi::hipStreamCaptureMode) -> bool {
    // SAFETY: exchanges this thread's mode with the caller's variable.
    let status = unsafe { ffi::hipThreadExchangeStreamCaptureMode(mode) };
    status == ffi::hipError_t::hipSuccess
}

accel_graph_driver::native_capture_impl! {
    HipDevice, HStream => raw, HGraph, MODES, check;
    begin: ffi::hipStreamBeginCapture, end: ffi::hipStreamEndCapture,
    exchange: ffi::hipThreadExchangeStreamCaptureMode;
}
