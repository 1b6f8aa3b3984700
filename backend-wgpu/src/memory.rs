//! Device memory: wgpu storage buffers as raw blocks under the shared pool bookkeeping, and
//! [`WgpuBuffer`], the backend's buffer type.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use accel_graph_api::{
    DeviceBuffer, GraphError, Result,
    pools::{MemoryPools, OwnedAllocation, RawAllocator},
};

use crate::gpu::Gpu;

/// WebGPU has no device addresses; blocks get synthetic ones from a per-backend counter so that
/// `device_address()` still names the memory (a reused pool block keeps its address).
const ADDRESS_BASE: u64 = 0x7700_0000_0000;
const ADDRESS_ALIGN: u64 = 256;

/// A raw block: one wgpu storage buffer and its synthetic address.
#[derive(Debug)]
pub struct RawBlock {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) address: u64,
}

/// Allocates wgpu storage buffers.
#[derive(Debug)]
pub struct WgpuAllocator {
    gpu: Arc<Gpu>,
    next_address: AtomicU64,
}

impl WgpuAllocator {
    pub(crate) fn new(gpu: Arc<Gpu>) -> Self {
        WgpuAllocator {
            gpu,
            next_address: AtomicU64::new(ADDRESS_BASE),
        }
    }
}

impl RawAllocator for WgpuAllocator {
    type Block = RawBlock;

    fn allocate(&self, bytes: usize) -> Result<RawBlock> {
        let oom = || GraphError::OutOfMemory {
            backend: "wgpu",
            requested_bytes: bytes,
        };
        // wgpu wants sizes that are multiples of 4; an empty buffer still gets a real one so
        // it has an identity.
        let size = (bytes.max(4) as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        if size > self.gpu.limits.max_buffer_size {
            return Err(oom());
        }
        let scope = self
            .gpu
            .device
            .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("accel-graph buffer"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if pollster::block_on(scope.pop()).is_some() {
            return Err(oom());
        }
        let address = self
            .next_address
            .fetch_add(size.next_multiple_of(ADDRESS_ALIGN), Ordering::Relaxed);
        Ok(RawBlock { buffer, address })
    }

    fn release(&self, block: RawBlock) {
        // Dropping the handle (not `destroy()`): bind groups of captured graphs may still
        // reference the buffer, and wgpu frees it once the last reference is gone.
        drop(block);
    }
}

/// A device buffer of `f32` on the wgpu backend. Dropping it frees the memory (or returns it
/// to its graph pool).
#[derive(Debug)]
pub struct WgpuBuffer {
    pub(crate) memory: OwnedAllocation<WgpuAllocator>,
    pub(crate) len: usize,
    pub(crate) instance: u64,
}

impl WgpuBuffer {
    pub(crate) fn new(
        pools: &Arc<MemoryPools<WgpuAllocator>>,
        allocation: accel_graph_api::pools::Allocation<RawBlock>,
        len: usize,
        instance: u64,
    ) -> Self {
        WgpuBuffer {
            memory: OwnedAllocation::new(pools, allocation),
            len,
            instance,
        }
    }

    /// The underlying wgpu buffer (it may be larger than `len() * 4` bytes: pool blocks are
    /// rounded up), for native work next to the portable ops.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.memory.get().block().buffer
    }

    /// Size in bytes of the elements (`len() * 4`).
    pub fn byte_len(&self) -> u64 {
        self.len as u64 * 4
    }
}

impl DeviceBuffer for WgpuBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn device_address(&self) -> u64 {
        self.memory.get().block().address
    }
}
