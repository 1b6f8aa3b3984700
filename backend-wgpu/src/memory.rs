//! Device memory: one wgpu storage buffer per block, at a synthetic address (WebGPU has
//! none), and the blocking copies between host and device.

use std::sync::mpsc;

use accel_graph_driver::{DriverResult, api::DriverMemory};

use crate::{
    WgpuDevice,
    device::Gpu,
    error::{out_of_memory, wgpu_failure},
    stream::WgpuStreamState,
};

/// Synthetic addresses are aligned like CUDA's allocations.
const ADDRESS_ALIGNMENT: u64 = 256;

/// A block of device memory: a wgpu storage buffer (a reference-counted handle) and its
/// synthetic address. What [`crate::WgpuBuffer::block`](accel_graph_driver::DriverBuffer::block)
/// returns, for native work on the same memory.
#[derive(Debug, Clone)]
pub struct WgpuBlock {
    buffer: wgpu::Buffer,
    address: u64,
}

impl WgpuBlock {
    /// The wgpu buffer (it may be larger than the buffer's elements: sizes are rounded up).
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The block's synthetic device address: stable and unique within the backend instance.
    pub fn address(&self) -> u64 {
        self.address
    }
}

impl Gpu {
    /// Copies `bytes` bytes into a mappable staging buffer with `copy` (after every submission
    /// so far, the queue being in order), waits, and returns them.
    pub(crate) fn read_back(
        &self,
        bytes: u64,
        copy: impl FnOnce(&mut wgpu::CommandEncoder, &wgpu::Buffer),
    ) -> DriverResult<Vec<u8>> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("accel-graph read-back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        copy(&mut encoder, &staging);
        let index = self.queue.submit([encoder.finish()]);
        let (tx, rx) = mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.wait(Some(&index))?;
        rx.recv()
            .map_err(|_| wgpu_failure("MapAsync", "the map callback never ran"))?
            .map_err(|e| wgpu_failure("MapAsync", e.to_string()))?;
        let out = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| wgpu_failure("GetMappedRange", e.to_string()))?
            .to_vec();
        staging.unmap();
        Ok(out)
    }
}

impl DriverMemory for WgpuDevice {
    type Block = WgpuBlock;

    fn malloc(&self, bytes: usize) -> DriverResult<WgpuBlock> {
        let gpu = self.gpu();
        // wgpu wants sizes that are multiples of 4; an empty buffer still gets a real one so
        // it has an identity.
        let size = u64::try_from(bytes.max(4))
            .ok()
            .and_then(|b| b.checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT))
            .filter(|&size| size <= gpu.limits.max_buffer_size)
            .ok_or_else(|| {
                out_of_memory(
                    bytes,
                    &format!(
                        "the adapter's largest buffer is {} bytes",
                        gpu.limits.max_buffer_size
                    ),
                )
            })?;
        let span = size
            .checked_next_multiple_of(ADDRESS_ALIGNMENT)
            .ok_or_else(|| out_of_memory(bytes, "the size exceeds the address space"))?;
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("accel-graph buffer"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(out_of_memory(bytes, &error.to_string()));
        }
        let address = self
            .next_address(span)
            .ok_or_else(|| out_of_memory(bytes, "the synthetic address space is exhausted"))?;
        Ok(WgpuBlock { buffer, address })
    }

    unsafe fn free(&self, block: WgpuBlock) -> DriverResult<()> {
        // Dropping the handle, not `destroy()`: wgpu keeps the buffer until submitted work
        // and the bind groups of resolved commands no longer use it. The driver layer already
        // keeps a graph's blocks until the graph is reset.
        drop(block);
        Ok(())
    }

    fn block_address(&self, block: &WgpuBlock) -> u64 {
        block.address
    }

    /// wgpu stages the bytes at once, so `src` is free on return; the empty submit puts the
    /// write in the queue's order right now, ahead of any later work of any stream, which is
    /// all a wait would add (the queue is in order), so it does not wait.
    unsafe fn upload(
        &self,
        dst: &WgpuBlock,
        src: &[u8],
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        if src.is_empty() {
            return Ok(());
        }
        let gpu = self.gpu();
        stream.submit(|| {
            gpu.queue.write_buffer(&dst.buffer, 0, src);
            gpu.queue.submit([])
        });
        Ok(())
    }

    unsafe fn download(
        &self,
        src: &WgpuBlock,
        dst: &mut [u8],
        _stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // After every submission so far, the stream's included (the queue is in order).
        let bytes = self.gpu().read_back(dst.len() as u64, |encoder, staging| {
            encoder.copy_buffer_to_buffer(&src.buffer, 0, staging, 0, dst.len() as u64);
        })?;
        dst.copy_from_slice(&bytes);
        Ok(())
    }
}
