//! HIP device memory: `hipMalloc`/`hipFree` blocks and the blocking host copies.

use std::ffi::c_void;

use accel_graph_driver::{
    DriverResult,
    api::{DriverMemory, DriverStreams},
};

use crate::{HStream, HipDevice, error::check, ffi};

/// A device allocation (the driver-level block behind a [`crate::HipBuffer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HBlock {
    ptr: *mut c_void,
}

// SAFETY: a device pointer is a plain address valid in every host thread; the block is only
// read through it by the runtime, and freed once by the driver layer.
unsafe impl Send for HBlock {}
// SAFETY: as above; the value is never mutated.
unsafe impl Sync for HBlock {}

impl HBlock {
    /// The raw device pointer, for native work (your kernels, hipBLAS) on the same memory.
    pub fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// No memory: the operand of a launch that touches none.
    pub(crate) fn null() -> Self {
        HBlock {
            ptr: std::ptr::null_mut(),
        }
    }
}

impl DriverMemory for HipDevice {
    type Block = HBlock;

    fn malloc(&self, bytes: usize) -> DriverResult<HBlock> {
        let mut ptr = std::ptr::null_mut();
        // A zero-byte request still gets a block of its own: round up to one element.
        // SAFETY: `ptr` is a local out-parameter; the memory is only reached through the block.
        let err = unsafe { ffi::hipMalloc(&mut ptr, bytes.max(4)) };
        check(err, "hipMalloc")?;
        Ok(HBlock { ptr })
    }

    unsafe fn free(&self, block: HBlock) -> DriverResult<()> {
        // SAFETY: by this method's contract the block came from `malloc`, is freed exactly
        // once, and no buffer, graph or queued work uses it any more.
        check(unsafe { ffi::hipFree(block.ptr) }, "hipFree")
    }

    fn block_address(&self, block: &HBlock) -> u64 {
        block.ptr as u64
    }

    fn recycles_blocks(&self) -> bool {
        // The driver's free waits for the whole device: one wait for many blocks instead.
        true
    }

    unsafe fn upload(
        &self,
        dst: &HBlock,
        offset: usize,
        src: &[u8],
        stream: &HStream,
    ) -> DriverResult<()> {
        let kind = ffi::hipMemcpyKind::hipMemcpyHostToDevice;
        let at = dst.ptr.wrapping_byte_add(offset);
        // SAFETY: `dst` is live and holds the `src.len()` bytes from `offset` on (this
        // method's contract), and `src` outlives the synchronization in `copy_and_wait`.
        unsafe { self.copy_and_wait(at, src.as_ptr().cast(), src.len(), kind, stream) }
    }

    unsafe fn download(
        &self,
        src: &HBlock,
        offset: usize,
        dst: &mut [u8],
        stream: &HStream,
    ) -> DriverResult<()> {
        let kind = ffi::hipMemcpyKind::hipMemcpyDeviceToHost;
        let at = src.ptr.wrapping_byte_add(offset);
        // SAFETY: `src` is live and holds the `dst.len()` bytes from `offset` on (this
        // method's contract), and `dst` outlives the synchronization in `copy_and_wait`.
        unsafe { self.copy_and_wait(dst.as_mut_ptr().cast(), at, dst.len(), kind, stream) }
    }
}

impl HipDevice {
    /// Copies `bytes` bytes in `stream`'s order and waits for the stream.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes until the wait returns.
    unsafe fn copy_and_wait(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: ffi::hipMemcpyKind,
        stream: &HStream,
    ) -> DriverResult<()> {
        if bytes > 0 {
            // SAFETY: the caller's contract.
            let err = unsafe { ffi::hipMemcpyAsync(dst, src, bytes, kind, stream.raw()) };
            check(err, "hipMemcpyAsync")?;
        }
        self.stream_synchronize(stream)
    }
}
