//! Device memory: a raw allocator on `cuMemAlloc`/`cuMemFree` under the shared pool
//! bookkeeping, and the backend's buffer type.

use std::sync::{Arc, Mutex};

use accel_graph_api::{
    CaptureErrorMode, DeviceBuffer, Result,
    pools::{MemoryPools, OwnedAllocation, RawAllocator},
};
use cudarc::driver::{CudaContext, sys};

use crate::{
    capture_registry::any_capture_active,
    driver_error::{CallSite, check},
};

/// A device allocation's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr(pub sys::CUdeviceptr);

/// `cuMemAlloc`/`cuMemFree` in one context. Frees requested while a capture is in progress
/// are deferred until none is, since `cuMemFree` may synchronize and so invalidate it.
pub struct CudaAllocator {
    ctx: Arc<CudaContext>,
    deferred: Mutex<Vec<DevicePtr>>,
}

impl CudaAllocator {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Self {
        CudaAllocator {
            ctx,
            deferred: Mutex::new(Vec::new()),
        }
    }

    /// Frees every deferred block if no capture is in progress any more.
    pub(crate) fn flush_deferred(&self) {
        if any_capture_active() {
            return;
        }
        let blocks = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        for block in blocks {
            self.free_now(block);
        }
    }

    fn free_now(&self, block: DevicePtr) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        // SAFETY: `block` came from `cuMemAlloc` in this context and is freed exactly once.
        let rc = unsafe { sys::cuMemFree_v2(block.0) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?rc, "cuMemFree failed");
        }
    }

    /// Blocks waiting to be freed (for tests and diagnostics).
    pub fn deferred_frees(&self) -> usize {
        self.deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

impl RawAllocator for CudaAllocator {
    type Block = DevicePtr;

    fn allocate(&self, bytes: usize) -> Result<DevicePtr> {
        self.flush_deferred();
        self.ctx
            .bind_to_thread()
            .map_err(|e| crate::driver_error::from_cudarc(e, "cuCtxSetCurrent"))?;
        let mut ptr = 0;
        // SAFETY: plain allocation into a local; zero-byte requests are rounded up to one
        // element because the driver rejects them.
        let rc = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(4)) };
        check(
            rc,
            CallSite {
                call: "cuMemAlloc",
                operation: "alloc",
                bytes,
                mode: current_mode_hint(),
                unsafe_call: true,
            },
        )?;
        Ok(DevicePtr(ptr))
    }

    fn release(&self, block: DevicePtr) {
        if any_capture_active() {
            self.deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(block);
        } else {
            self.free_now(block);
        }
    }
}

impl Drop for CudaAllocator {
    fn drop(&mut self) {
        // The last owner is going: free whatever waited, capture or not (a capture of this
        // context cannot outlive every buffer and graph of the backend).
        let blocks = std::mem::take(self.deferred.get_mut().unwrap_or_else(|e| e.into_inner()));
        for block in blocks {
            self.free_now(block);
        }
    }
}

thread_local! {
    /// The capture mode an allocation on this thread would violate, set by the backend
    /// around allocations so `cuMemAlloc` errors can name it.
    static MODE_HINT: std::cell::Cell<CaptureErrorMode> =
        const { std::cell::Cell::new(CaptureErrorMode::Global) };
}

fn current_mode_hint() -> CaptureErrorMode {
    MODE_HINT.with(|m| m.get())
}

/// Sets the mode named by allocation errors on this thread.
pub(crate) fn set_mode_hint(mode: CaptureErrorMode) {
    MODE_HINT.with(|m| m.set(mode));
}

/// A device buffer of `f32`: plain (`cuMemAlloc`) or from a graph pool; dropping it frees the
/// memory or returns it to its pool.
#[derive(Debug)]
pub struct CudaBuffer {
    pub(crate) memory: OwnedAllocation<CudaAllocator>,
    pub(crate) len: usize,
    pub(crate) instance: u64,
}

impl CudaBuffer {
    /// The raw device pointer, for the user's own kernels and libraries.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.memory.get().block().0
    }

    /// Bytes of data (`len * 4`).
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<f32>()
    }

    pub(crate) fn new(
        pools: &Arc<MemoryPools<CudaAllocator>>,
        allocation: accel_graph_api::pools::Allocation<DevicePtr>,
        len: usize,
        instance: u64,
    ) -> Self {
        CudaBuffer {
            memory: OwnedAllocation::new(pools, allocation),
            len,
            instance,
        }
    }
}

impl DeviceBuffer for CudaBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn device_address(&self) -> u64 {
        self.device_ptr()
    }
}

impl std::fmt::Debug for CudaAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaAllocator")
            .field("deferred_frees", &self.deferred_frees())
            .finish()
    }
}
