//! Device memory: hipMalloc/hipFree under the shared pool bookkeeping, with frees deferred
//! while a capture runs (hipFree synchronizes the device, which a capture forbids).

use std::{
    ffi::c_void,
    sync::{Arc, Mutex},
};

use accel_graph_api::{
    CaptureErrorMode, DeviceBuffer, GraphError, Result,
    pools::{OwnedAllocation, RawAllocator},
};

use super::{
    captures::Captures,
    error::{self, CallSite},
    ffi::{self, Handle},
};

/// A raw device allocation.
pub(crate) type DevicePtr = Handle<c_void>;

/// hipMalloc/hipFree for one backend instance.
pub(crate) struct HipAllocator {
    captures: Arc<Captures>,
    /// Blocks released while a capture ran, freed when none runs any more.
    deferred: Mutex<Vec<DevicePtr>>,
}

impl HipAllocator {
    pub(crate) fn new(captures: Arc<Captures>) -> Self {
        HipAllocator {
            captures,
            deferred: Mutex::new(Vec::new()),
        }
    }

    /// Frees the blocks released during captures, if no capture runs now.
    pub(crate) fn flush_deferred(&self) {
        let active = self.captures.lock();
        if !active.is_empty() {
            return;
        }
        let blocks = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        for block in blocks {
            free(block);
        }
        drop(active);
    }
}

/// True for the codes with which a runtime refuses a call made during a capture.
fn is_capture_refusal(err: ffi::hipError_t) -> bool {
    matches!(
        err,
        ffi::hipError_t::hipErrorStreamCaptureUnsupported
            | ffi::hipError_t::hipErrorStreamCaptureImplicit
    )
}

fn free(block: DevicePtr) {
    // SAFETY: `block` came from hipMalloc and is freed exactly once (the pools hand each
    // block back once).
    let err = unsafe { ffi::hipFree(block.0) };
    if !error::is_success(err) {
        tracing::warn!(
            error = %error::name_of(err),
            "hipFree failed; the block is lost"
        );
    }
}

impl RawAllocator for HipAllocator {
    type Block = DevicePtr;

    fn allocate(&self, bytes: usize) -> Result<DevicePtr> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; hipMalloc writes a device pointer or fails.
        let err = unsafe { ffi::hipMalloc(&mut ptr, bytes.max(1)) };
        if !error::is_success(err) {
            if is_capture_refusal(err) {
                // The runtime refused the call because of a capture: apply the same rules to
                // the backend's registry, so an own-thread violation invalidates the capture
                // whatever the runtime does with it.
                self.captures.check_unsafe_call("alloc (hipMalloc)")?;
            }
            return Err(error::map(
                err,
                CallSite {
                    operation: "alloc (hipMalloc)",
                    mode: self.captures.forbidding_mode(),
                    requested_bytes: bytes,
                },
            ));
        }
        Ok(Handle(ptr))
    }

    fn release(&self, block: DevicePtr) {
        // The registry lock keeps a capture from beginning between the check and the free.
        let active = self.captures.lock();
        if active.is_empty() {
            free(block);
        } else {
            self.deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(block);
        }
        drop(active);
    }
}

impl Drop for HipAllocator {
    fn drop(&mut self) {
        for block in self
            .deferred
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            free(block);
        }
    }
}

/// Switches the calling thread to relaxed capture mode until dropped, so the pool allocator
/// may call hipMalloc while a capture runs (what PyTorch's caching allocator does).
pub(crate) struct RelaxedCaptureMode {
    previous: ffi::hipStreamCaptureMode,
}

impl RelaxedCaptureMode {
    pub(crate) fn enter() -> Result<Self> {
        let mut mode = ffi::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        // SAFETY: `mode` is a valid in/out pointer.
        let err = unsafe { ffi::hipThreadExchangeStreamCaptureMode(&mut mode) };
        if !error::is_success(err) {
            return Err(error::map(
                err,
                CallSite {
                    operation: "hipThreadExchangeStreamCaptureMode",
                    mode: CaptureErrorMode::Global,
                    requested_bytes: 0,
                },
            ));
        }
        Ok(RelaxedCaptureMode { previous: mode })
    }
}

impl Drop for RelaxedCaptureMode {
    fn drop(&mut self) {
        // SAFETY: `previous` is a valid in/out pointer holding the mode read at `enter`.
        let err = unsafe { ffi::hipThreadExchangeStreamCaptureMode(&mut self.previous) };
        if !error::is_success(err) {
            tracing::warn!(error = %error::name_of(err), "could not restore the capture mode");
        }
    }
}

/// A device buffer of `f32` on a HIP device.
pub struct HipBuffer {
    pub(crate) memory: OwnedAllocation<HipAllocator>,
    pub(crate) len: usize,
    pub(crate) instance: u64,
}

impl HipBuffer {
    /// The raw device pointer, for native work (user kernels, hipBLAS) on the same memory.
    pub fn device_ptr(&self) -> *mut c_void {
        self.memory.get().block().0
    }

    pub(crate) fn check(&self, instance: u64) -> Result<()> {
        if self.instance == instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "buffer" })
        }
    }
}

impl DeviceBuffer for HipBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn device_address(&self) -> u64 {
        self.device_ptr() as u64
    }
}

impl std::fmt::Debug for HipBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipBuffer")
            .field("ptr", &self.device_ptr())
            .field("len", &self.len)
            .finish()
    }
}
