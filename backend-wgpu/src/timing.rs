//! Timing events through timestamp queries (`Features::TIMESTAMP_QUERY`): each record of a
//! timing event writes a GPU timestamp once the work before it has finished, and
//! `elapsed_time` reads two of them back.

use accel_graph_driver::DriverResult;

use crate::device::Gpu;

/// Bytes of one resolved timestamp.
const STAMP_BYTES: u64 = wgpu::QUERY_SIZE as u64;

/// The timestamp of one timing event: a one-query set, and the buffer it is resolved into.
///
/// The resolve buffer is never mapped (reads copy it into a staging buffer first), so a record
/// can always write it, even while another thread reads the event's time.
#[derive(Debug)]
pub(crate) struct Timer {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
}

impl Timer {
    pub(crate) fn new(gpu: &Gpu) -> Self {
        Timer {
            queries: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("accel-graph event"),
                ty: wgpu::QueryType::Timestamp,
                count: 1,
            }),
            resolved: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("accel-graph event time"),
                size: STAMP_BYTES,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
        }
    }

    /// Encodes a record: an empty compute pass that writes the timestamp at its end (after
    /// the work encoded or submitted before it), resolved into the event's buffer.
    pub(crate) fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("accel-graph event record"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.queries,
                beginning_of_pass_write_index: None,
                end_of_pass_write_index: Some(0),
            }),
        }));
        encoder.resolve_query_set(&self.queries, 0..1, &self.resolved, 0);
    }
}

/// Milliseconds from `start`'s last timestamp to `end`'s (negative when `end` came first, as
/// CUDA's). Reads both after every submission so far, so after their last records.
pub(crate) fn elapsed_ms(gpu: &Gpu, start: &Timer, end: &Timer) -> DriverResult<f32> {
    let bytes = gpu.read_back(2 * STAMP_BYTES, |encoder, staging| {
        encoder.copy_buffer_to_buffer(&start.resolved, 0, staging, 0, STAMP_BYTES);
        encoder.copy_buffer_to_buffer(&end.resolved, 0, staging, STAMP_BYTES, STAMP_BYTES);
    })?;
    let stamp = |at: usize| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(raw)
    };
    let (from, to) = (stamp(0), stamp(8));
    // Ticks to nanoseconds by the queue's period, then to milliseconds.
    let ticks = if to >= from {
        (to - from) as f64
    } else {
        -((from - to) as f64)
    };
    let nanos = ticks * f64::from(gpu.queue.get_timestamp_period());
    Ok((nanos / 1e6) as f32)
}
