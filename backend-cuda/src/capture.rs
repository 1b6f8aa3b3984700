//! CUDA stream capture: `cuStreamBeginCapture` / `cuStreamEndCapture` and the thread's capture
//! mode.
//!
//! Written out rather than with `native_capture_impl!` for one addition: a capture begun on an
//! adopted stream is remembered by the stream, so that work on it can tell the backend's
//! captures from those begun behind its back (see [`CudaDevice::check_joined`]).

use accel_graph_api::CaptureErrorMode;
use accel_graph_driver::{DriverResult, api::DriverCapture, native::CaptureModes};
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

impl DriverCapture for CudaDevice {
    type Graph = CuGraph;

    unsafe fn begin_capture(&self, stream: &CuStream, mode: CaptureErrorMode) -> DriverResult<()> {
        // SAFETY: the stream is alive (the handle holds it).
        let status =
            unsafe { sys::cuStreamBeginCapture_v2(stream.cu_stream(), MODES.native(mode)) };
        check(status, "cuStreamBeginCapture")?;
        self.note_joined(stream);
        Ok(())
    }

    unsafe fn end_capture(&self, stream: &CuStream) -> DriverResult<CuGraph> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture on its own stream; `graph` is a local out-parameter.
        let status = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) };
        // Owned before the check: a failed end may still return a graph, destroyed on drop.
        let graph = CuGraph::from_raw(graph);
        check(status, "cuStreamEndCapture")?;
        crate::host_copies::refuse_pageable_copies(graph.cu_graph())?;
        Ok(graph)
    }

    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        let mut raw = MODES.native(mode);
        // SAFETY: exchanges this thread's mode with a local.
        let status = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut raw) };
        check(status, "cuThreadExchangeStreamCaptureMode")?;
        Ok(MODES.api(raw))
    }
}
