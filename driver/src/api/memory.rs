//! `DriverMemory`: raw device allocations and the blocking host copies.

use super::{DriverResult, DriverStreams};

/// Device memory of a driver.
///
/// The driver layer decides *when* blocks are freed (never while a capture runs, never while a
/// graph's work uses them); a driver only allocates, frees and copies.
pub trait DriverMemory: DriverStreams {
    /// A raw allocation: a cheap handle that buffers carry copies of (a device pointer, a
    /// reference-counted buffer).
    type Block: Clone + Send + Sync + 'static;

    /// Allocates `bytes` bytes (at least one byte's worth: a zero-byte request still gets a
    /// block of its own, so every buffer has an identity).
    fn malloc(&self, bytes: usize) -> DriverResult<Self::Block>;

    /// Frees a block.
    ///
    /// # Safety
    /// `block` must have come from this driver's [`malloc`](Self::malloc) and must be freed
    /// only once, and nothing may use it any more: no buffer, no graph (captured or
    /// executable) and no work still queued on any stream.
    unsafe fn free(&self, block: Self::Block) -> DriverResult<()>;

    /// The block's device address.
    fn block_address(&self, block: &Self::Block) -> u64;

    /// Whether the driver layer keeps blocks nothing uses any more for later allocations,
    /// handing one out again only after a device-wide wait that began after it was let go,
    /// instead of a [`free`](Self::free) and a [`malloc`](Self::malloc) each time: for
    /// drivers whose free waits for the whole device (CUDA, HIP). Default: no, every block
    /// is freed once nothing uses it.
    fn recycles_blocks(&self) -> bool {
        false
    }

    /// Copies `src` into bytes `offset .. offset + src.len()` of `dst` in `stream`'s order
    /// and waits for the copy. Offsets and lengths may be any byte count (a view of `u8`s).
    ///
    /// # Safety
    /// `dst` must be live (allocated by this driver and not freed) and those bytes must lie
    /// inside it.
    unsafe fn upload(
        &self,
        dst: &Self::Block,
        offset: usize,
        src: &[u8],
        stream: &Self::Stream,
    ) -> DriverResult<()>;

    /// Copies bytes `offset .. offset + dst.len()` of `src` to `dst` after `stream`'s work
    /// and waits for the copy. Offsets and lengths may be any byte count.
    ///
    /// # Safety
    /// `src` must be live (allocated by this driver and not freed) and those bytes must lie
    /// inside it.
    unsafe fn download(
        &self,
        src: &Self::Block,
        offset: usize,
        dst: &mut [u8],
        stream: &Self::Stream,
    ) -> DriverResult<()>;
}
