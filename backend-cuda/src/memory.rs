//! CUDA device memory: `cuMemAlloc`/`cuMemFree` blocks and the blocking host copies (cudarc's
//! `result` layer).

use accel_graph_driver::{
    DriverResult,
    api::{DriverMemory, DriverStreams},
};
use cudarc::driver::{result, sys};

use crate::{
    CuStream, CudaDevice,
    error::{check, from_cudarc},
};

/// A device allocation (the driver-level block behind a [`crate::CudaBuffer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuBlock {
    ptr: sys::CUdeviceptr,
    /// Allocated by another library and handed over ([`crate::CudaBackend::adopt_slice`]):
    /// perhaps by the stream-ordered allocator (`cuMemAllocAsync`, as cudarc allocates), whose
    /// memory `cuMemFree` frees without the implicit synchronization it does for `cuMemAlloc`
    /// memory — so its free synchronizes first.
    adopted: bool,
}

impl CuBlock {
    /// The raw device pointer, for native work on the same memory.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// A block over memory another library allocated in the device's context.
    pub(crate) fn adopted(ptr: sys::CUdeviceptr) -> Self {
        CuBlock { ptr, adopted: true }
    }
}

impl DriverMemory for CudaDevice {
    type Block = CuBlock;

    fn malloc(&self, bytes: usize) -> DriverResult<CuBlock> {
        // The driver rejects zero-byte requests: round up to one element.
        // SAFETY: plain allocation; the memory is only reached through the block.
        let ptr = unsafe { result::malloc_sync(bytes.max(4)) }
            .map_err(|e| from_cudarc(e, "cuMemAlloc"))?;
        Ok(CuBlock {
            ptr,
            adopted: false,
        })
    }

    unsafe fn free(&self, block: CuBlock) -> DriverResult<()> {
        if block.adopted {
            // What `cuMemFree` does implicitly for `cuMemAlloc` memory, and the driver layer
            // counts on: queued work that still uses the block finishes first.
            // SAFETY: plain context synchronization (frees run while no capture of the
            // process runs).
            check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")?;
        }
        // SAFETY: by this method's contract the block came from `malloc` in this context (or
        // was adopted from memory allocated in it), is freed exactly once, and no buffer,
        // graph or queued work uses it any more.
        unsafe { result::free_sync(block.ptr) }.map_err(|e| from_cudarc(e, "cuMemFree"))
    }

    fn block_address(&self, block: &CuBlock) -> u64 {
        block.ptr
    }

    fn recycles_blocks(&self) -> bool {
        // The driver's free waits for the whole device: one wait for many blocks instead.
        true
    }

    unsafe fn upload(
        &self,
        dst: &CuBlock,
        offset: usize,
        src: &[u8],
        stream: &CuStream,
    ) -> DriverResult<()> {
        self.check_joined(stream)?;
        if !src.is_empty() {
            // SAFETY: `dst` is live and holds the `src.len()` bytes from `offset` on (this
            // method's contract), and `src` outlives the synchronization below.
            unsafe { result::memcpy_htod_async(dst.ptr + offset as u64, src, stream.cu_stream()) }
                .map_err(|e| from_cudarc(e, "cuMemcpyHtoDAsync"))?;
        }
        self.stream_synchronize(stream)
    }

    unsafe fn download(
        &self,
        src: &CuBlock,
        offset: usize,
        dst: &mut [u8],
        stream: &CuStream,
    ) -> DriverResult<()> {
        self.check_joined(stream)?;
        if !dst.is_empty() {
            // SAFETY: `src` is live and holds the `dst.len()` bytes from `offset` on (this
            // method's contract), and `dst` outlives the synchronization below.
            unsafe { result::memcpy_dtoh_async(dst, src.ptr + offset as u64, stream.cu_stream()) }
                .map_err(|e| from_cudarc(e, "cuMemcpyDtoHAsync"))?;
        }
        self.stream_synchronize(stream)
    }
}
