//! HIP device memory: `hipMalloc`/`hipFree` blocks and the blocking host copies.

use std::ffi::c_void;

use accel_graph_driver::{DriverResult, api::DriverMemory};

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

    unsafe fn upload(&self, dst: &HBlock, src: &[u8], stream: &HStream) -> DriverResult<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is live and holds at least `src.len()` bytes (this method's contract),
        // and `src` outlives the synchronization below.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                dst.ptr,
                src.as_ptr().cast(),
                src.len(),
                ffi::hipMemcpyKind::hipMemcpyHostToDevice,
                stream.raw(),
            )
        };
        check(err, "hipMemcpyAsync")?;
        // SAFETY: live stream.
        check(
            unsafe { ffi::hipStreamSynchronize(stream.raw()) },
            "hipStreamSynchronize",
        )
    }

    unsafe fn download(&self, src: &HBlock, dst: &mut [u8], stream: &HStream) -> DriverResult<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` is live and holds at least `dst.len()` bytes (this method's contract),
        // and `dst` outlives the synchronization below.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                dst.as_mut_ptr().cast(),
                src.ptr,
                dst.len(),
                ffi::hipMemcpyKind::hipMemcpyDeviceToHost,
                stream.raw(),
            )
        };
        check(err, "hipMemcpyAsync")?;
        // SAFETY: live stream.
        check(
            unsafe { ffi::hipStreamSynchronize(stream.raw()) },
            "hipStreamSynchronize",
        )
    }
}
