//! `MemoryStats` and `BlockInfo`: what a backend holds in device memory, in total, per pool
//! and block by block.

use crate::PoolId;

/// Device memory accounting of one backend instance (`torch.cuda.memory_stats()` in brief).
///
/// *Active* bytes are in buffers handed out and not dropped; *reserved* bytes are held from
/// the device: active ones, free blocks cached in graph pools, blocks a graph keeps alive after
/// their buffer was dropped, blocks whose dropped buffer `record_stream`ed streams may still
/// use, and frees waiting for a capture to end. Each block counts in at most one of
/// `allocated_bytes`, `graph_held_bytes` and `pending_free_bytes`, so at all times
/// `reserved_bytes >= allocated_bytes + graph_held_bytes + pending_free_bytes`.
///
/// Blocks the backend's allocator keeps after nothing uses them any more, for later
/// allocations, are outside these figures (the driver-based backends report them as
/// `cached_bytes`); `empty_cache` gives them back to the device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MemoryStats {
    /// Bytes in buffers handed out and not yet dropped (active).
    pub allocated_bytes: usize,
    /// Bytes held from the device.
    pub reserved_bytes: usize,
    /// Of `reserved_bytes`, the part owned by graph pools.
    pub pool_reserved_bytes: usize,
    /// Of `reserved_bytes`, blocks whose buffer was dropped but which a graph's captured work
    /// still uses: they go back when the last such graph is reset or dropped.
    pub graph_held_bytes: usize,
    /// Of `reserved_bytes`, blocks whose buffer was dropped while streams it was
    /// `record_stream`ed onto may still use it: they go back (to the device, or to their pool)
    /// once those streams passed the drop — after the capture, if they were capturing.
    pub pending_free_bytes: usize,
    /// Buffers handed out and not yet dropped.
    pub live_buffers: usize,
    /// Every pool that still owns memory or is held by a graph, by id.
    pub pools: Vec<PoolStats>,
}

impl MemoryStats {
    /// The statistics of `pool`, if it exists.
    pub fn pool(&self, pool: PoolId) -> Option<&PoolStats> {
        self.pools.iter().find(|p| p.pool == pool)
    }
}

/// One graph memory pool's accounting.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// The pool.
    pub pool: PoolId,
    /// Bytes of every block the pool owns.
    pub reserved_bytes: usize,
    /// Bytes of its blocks handed out as live buffers.
    pub active_bytes: usize,
    /// Graphs holding the pool (captured into it and not reset).
    pub graphs: usize,
}

/// What a block of device memory is used for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out as a live buffer.
    Live,
    /// Free in its pool, ready for the pool's next allocation.
    Free,
    /// Its buffer was dropped, but a graph's captured work still uses it: kept until the last
    /// such graph is reset or dropped.
    GraphHeld,
    /// Its buffer was dropped while streams it was `record_stream`ed onto may still use it:
    /// freed once they passed the drop.
    PendingFree,
}

/// One block of device memory (`torch.cuda.memory_snapshot()` segments, with
/// `segment_pool_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockInfo {
    /// Device address of the block.
    pub address: u64,
    /// Its size in bytes (rounded up inside pools).
    pub bytes: usize,
    /// The pool it belongs to; `None` for a plain allocation.
    pub pool: Option<PoolId>,
    /// What it is used for.
    pub state: BlockState,
    /// Graphs whose captured work uses it.
    pub graph_holds: usize,
}
