//! `DriverOps`: the portable ops' kernels and host functions.

use std::ffi::c_void;

use accel_graph_api::PortableOp;

use super::{DriverCapture, DriverMemory, DriverResult};

/// The memory an op touches: `len` `f32` elements of a block from element `offset` on.
#[derive(Debug)]
pub struct Region<'a, B> {
    /// The block.
    pub block: &'a B,
    /// The first element (the view's offset into its buffer, which starts at the block's
    /// start).
    pub offset: usize,
    /// Elements (the view's length; the block may be larger).
    pub len: usize,
}

impl<B> Region<'_, B> {
    /// The first element's byte offset in the block.
    pub fn byte_offset(&self) -> usize {
        self.offset * std::mem::size_of::<f32>()
    }

    /// Bytes the region covers.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<f32>()
    }
}

impl<B> Clone for Region<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Region<'_, B> {}

/// A host function the driver calls in stream order, with the data pointer given.
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// The kernels of the portable ops, and host functions.
pub trait DriverOps: DriverMemory + DriverCapture {
    /// Issues `op` on `stream` (run, or recorded if the stream is capturing).
    ///
    /// # Safety
    /// Every region's elements `offset .. offset + len` must lie inside its block, and the
    /// block must be live; where the op reads two operands, their lengths must be equal. If `stream` is
    /// capturing, the caller must keep the blocks alive as long as any executable made from
    /// the capture can launch (the driver records the op, not a hold on its memory).
    unsafe fn launch_op(
        &self,
        op: PortableOp<Region<'_, Self::Block>>,
        stream: &Self::Stream,
    ) -> DriverResult<()>;

    /// Calls `func(data)` in `stream`'s order (recorded as a host node if the stream is
    /// capturing).
    ///
    /// # Safety
    /// `data` must stay valid until `func` has run: for an eager call, until it runs once;
    /// for a captured one, as long as any executable made from the capture can launch.
    unsafe fn launch_host(
        &self,
        stream: &Self::Stream,
        func: HostFn,
        data: *mut c_void,
    ) -> DriverResult<()>;
}
