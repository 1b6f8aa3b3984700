//! Start-up probe: does the runtime enforce capture modes on allocations?
//!
//! CUDA refuses `cudaMalloc` on a thread whose capture is not relaxed; ROCm 5.x may not. The
//! backend's plain allocations are real hipMalloc calls, so whether they obey the capture-mode
//! rules is the runtime's property, measured here once rather than assumed.

use accel_graph_api::Result;

use super::{error, ffi};

/// Begins a thread-local capture on a scratch stream, calls hipMalloc on the same thread and
/// reports whether the runtime refused it. Everything is undone before returning.
pub(crate) fn runtime_refuses_capture_alloc() -> Result<bool> {
    let mut stream = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let err = unsafe { ffi::hipStreamCreateWithFlags(&mut stream, ffi::hipStreamNonBlocking) };
    if !error::is_success(err) {
        return Err(error::driver(
            err,
            "capture probe (hipStreamCreateWithFlags)",
        ));
    }
    let outcome = probe_on(stream);
    // SAFETY: the scratch stream is no longer capturing and has no other user.
    unsafe { ffi::hipStreamDestroy(stream) };
    outcome
}

fn probe_on(stream: ffi::hipStream_t) -> Result<bool> {
    // SAFETY: valid stream.
    let err = unsafe {
        ffi::hipStreamBeginCapture(
            stream,
            ffi::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal,
        )
    };
    if !error::is_success(err) {
        return Err(error::driver(err, "capture probe (hipStreamBeginCapture)"));
    }
    let mut ptr = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let alloc = unsafe { ffi::hipMalloc(&mut ptr, 256) };
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is capturing on this thread; the result (an invalidated capture when
    // the allocation was refused) is only cleaned up.
    unsafe { ffi::hipStreamEndCapture(stream, &mut graph) };
    if !graph.is_null() {
        // SAFETY: the graph came from hipStreamEndCapture and has no other owner.
        unsafe { ffi::hipGraphDestroy(graph) };
    }
    if error::is_success(alloc) {
        // SAFETY: allocated just above, freed once, outside the capture.
        unsafe { ffi::hipFree(ptr) };
    }
    // Drain any error the refused call left as the thread's last error.
    // SAFETY: reads and clears the calling thread's last error.
    unsafe { ffi::hipGetLastError() };
    Ok(!error::is_success(alloc))
}
