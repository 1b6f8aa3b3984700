//! The probe of what the runtime itself does with `hipMalloc` during a capture.
//!
//! CUDA refuses an allocation on a thread whose capture is not relaxed; ROCm 5.x may not. The
//! backend does not depend on the answer: the driver layer applies CUDA's capture-mode rules
//! to every call the backend makes, on every runtime. It is kept because the driver layer does
//! not see the user's own native calls made during a capture (a library allocating its
//! workspace, say): whether those are refused as on CUDA is the runtime's property, measured
//! here rather than assumed, and reported by [`crate::HipDevice::runtime_refuses_capture_alloc`].
//!
//! It runs once per process, in the first `HipDevice::open` that reaches it: the probe begins
//! a capture and allocates, which would invalidate another instance's capture running in
//! global mode, and before the first open returns no instance exists to capture.

use std::sync::OnceLock;

use accel_graph_driver::DriverResult;

use crate::{HGraph, HStream, error::check, ffi};

/// The probe's answer, once it ran.
static ANSWER: OnceLock<Option<bool>> = OnceLock::new();

/// Whether the runtime refused `hipMalloc` on the thread of a thread-local capture; `None` if
/// the probe could not run (logged).
pub(crate) fn runtime_refuses_capture_alloc() -> Option<bool> {
    *ANSWER.get_or_init(|| {
        probe()
            .inspect_err(|e| tracing::warn!(error = %e, "the HIP capture-allocation probe failed"))
            .ok()
    })
}

/// The probe's answer if it ran in this process; `None` if it did not (or could not run).
pub(crate) fn known_answer() -> Option<bool> {
    ANSWER.get().copied().flatten()
}

/// Begins a thread-local capture on a scratch stream, calls `hipMalloc` on the same thread and
/// reports whether the runtime refused it. Everything is undone before returning.
fn probe() -> DriverResult<bool> {
    let stream = HStream::create()?;
    // SAFETY: a live stream of our own.
    let err = unsafe {
        ffi::hipStreamBeginCapture(
            stream.raw(),
            ffi::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal,
        )
    };
    check(err, "hipStreamBeginCapture")?;
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a local out-parameter.
    let alloc = unsafe { ffi::hipMalloc(&mut ptr, 256) };
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream captures on this thread; the result (an invalidated capture when the
    // allocation was refused) is only cleaned up.
    unsafe { ffi::hipStreamEndCapture(stream.raw(), &mut graph) };
    drop(HGraph::from_raw(graph));
    if alloc == ffi::hipError_t::hipSuccess {
        // SAFETY: allocated just above, freed once, outside the capture.
        unsafe { ffi::hipFree(ptr) };
    }
    // SAFETY: reads and clears the calling thread's last error, which the refused call left.
    unsafe { ffi::hipGetLastError() };
    Ok(alloc != ffi::hipError_t::hipSuccess)
}
