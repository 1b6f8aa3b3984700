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
        let index = self.submit(|queue| queue.submit([encoder.finish()]));
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
    /// all a wait would add (the queue is in order), so it does not wait. WebGPU writes whole
    /// 4-byte words: a range that starts or ends inside a word (a view of bytes or 16-bit
    /// floats) first reads the words at its edges back, so the bytes around it are kept.
    unsafe fn upload(
        &self,
        dst: &WgpuBlock,
        offset: usize,
        src: &[u8],
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        if src.is_empty() {
            return Ok(());
        }
        let gpu = self.gpu();
        let (start, end) = word_span(offset, src.len());
        let data = if (start, end) == (offset as u64, (offset + src.len()) as u64) {
            std::borrow::Cow::Borrowed(src)
        } else {
            let mut words = gpu.read_back(end - start, |encoder, staging| {
                encoder.copy_buffer_to_buffer(&dst.buffer, start, staging, 0, end - start);
            })?;
            let at = offset - start as usize;
            words[at..at + src.len()].copy_from_slice(src);
            std::borrow::Cow::Owned(words)
        };
        stream.submit(|| {
            gpu.submit(|queue| {
                queue.write_buffer(&dst.buffer, start, &data);
                queue.submit([])
            })
        });
        Ok(())
    }

    unsafe fn download(
        &self,
        src: &WgpuBlock,
        offset: usize,
        dst: &mut [u8],
        _stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // After every submission so far, the stream's included (the queue is in order).
        // Copies move whole words: read the words around the range, keep its bytes.
        let (start, end) = word_span(offset, dst.len());
        let bytes = self.gpu().read_back(end - start, |encoder, staging| {
            encoder.copy_buffer_to_buffer(&src.buffer, start, staging, 0, end - start);
        })?;
        let at = offset - start as usize;
        dst.copy_from_slice(&bytes[at..at + dst.len()]);
        Ok(())
    }
}

/// The 4-byte words (`start..end` in bytes) that hold bytes `offset .. offset + len`: WebGPU
/// copies and writes whole words only. Blocks are sized in whole words, so the span stays
/// inside the block.
fn word_span(offset: usize, len: usize) -> (u64, u64) {
    let align = wgpu::COPY_BUFFER_ALIGNMENT;
    let start = offset as u64 / align * align;
    let end = (offset + len) as u64;
    (start, end.div_ceil(align) * align)
}

#[cfg(test)]
mod tests {
    use super::word_span;

    #[test]
    fn spans_cover_whole_words() {
        assert_eq!(word_span(0, 8), (0, 8));
        assert_eq!(word_span(1, 2), (0, 4));
        assert_eq!(word_span(6, 3), (4, 12));
    }
}
