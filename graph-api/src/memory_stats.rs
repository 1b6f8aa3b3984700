//! `MemoryStats`: what a backend holds in device memory.

/// Device memory accounting of one backend instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Bytes in buffers handed out and not yet dropped.
    pub allocated_bytes: usize,
    /// Bytes held from the device: live plain buffers plus every block owned by a pool.
    pub reserved_bytes: usize,
    /// Of `reserved_bytes`, the part owned by graph pools.
    pub pool_reserved_bytes: usize,
    /// Buffers handed out and not yet dropped.
    pub live_buffers: usize,
    /// Pools that still own memory or are held by a graph.
    pub pools: usize,
}
