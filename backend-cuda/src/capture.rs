//! CUDA stream capture: `cuStreamBeginCapture` / `cuStreamEndCapture` and the thread's capture
//! mode.

use std::ptr;

use accel_graph_api::CaptureErrorMode;
use accel_graph_driver::{DriverResult, api::DriverCapture};
use cudarc::driver::sys;

use crate::{CuGraph, CuStream, CudaDevice, error::check};

fn cuda_mode(mode: CaptureErrorMode) -> sys::CUstreamCaptureMode {
    use sys::CUstreamCaptureMode as M;
    match mode.resolved() {
        CaptureErrorMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CaptureErrorMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        CaptureErrorMode::Global | CaptureErrorMode::Default => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
    }
}

fn api_mode(mode: sys::CUstreamCaptureMode) -> CaptureErrorMode {
    use sys::CUstreamCaptureMode as M;
    match mode {
        M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => CaptureErrorMode::ThreadLocal,
        M::CU_STREAM_CAPTURE_MODE_RELAXED => CaptureErrorMode::Relaxed,
        _ => CaptureErrorMode::Global,
    }
}

impl DriverCapture for CudaDevice {
    type Graph = CuGraph;

    unsafe fn begin_capture(&self, stream: &CuStream, mode: CaptureErrorMode) -> DriverResult<()> {
        // SAFETY: the stream is alive (the handle holds it).
        check(
            unsafe { sys::cuStreamBeginCapture_v2(stream.cu_stream(), cuda_mode(mode)) },
            "cuStreamBeginCapture",
        )
    }

    unsafe fn end_capture(&self, stream: &CuStream) -> DriverResult<CuGraph> {
        let mut graph = ptr::null_mut();
        // Raw `sys` rather than cudarc's `result::stream::end_capture`, which drops a graph
        // the driver returns alongside an error: it is ours to destroy.
        // SAFETY: ends the capture on its own stream; `graph` is a local out-parameter.
        let rc = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) };
        let graph = CuGraph::from_raw(graph);
        check(rc, "cuStreamEndCapture")?;
        Ok(graph)
    }

    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        let mut raw = cuda_mode(mode);
        // SAFETY: exchanges this thread's mode with a local.
        let rc = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut raw) };
        check(rc, "cuThreadExchangeStreamCaptureMode")?;
        Ok(api_mode(raw))
    }
}
