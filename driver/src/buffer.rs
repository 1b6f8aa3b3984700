//! `DriverBuffer`: a device buffer of `f32` of one backend instance.

use std::{
    fmt,
    sync::{Arc, Mutex},
};

use accel_graph_api::{DeviceBuffer, PoolId, backend_kit::pools::OwnedAllocation};

use crate::{Driver, DriverStream, allocator::DriverAllocator, shared::Shared};

/// A device buffer of `f32` of a driver-based backend: plain, or from a graph's pool.
///
/// Dropping it frees the memory (a pool block goes back to its pool) — except memory a graph's
/// captured work uses, which the graph keeps until it is reset or dropped, and memory
/// [`record_stream`](accel_graph_api::Backend::record_stream)ed onto streams, which waits for
/// them.
pub struct DriverBuffer<D: Driver> {
    memory: Option<OwnedAllocation<DriverAllocator<D>>>,
    len: usize,
    shared: Arc<Shared<D>>,
    /// Streams recorded with `record_stream`.
    uses: Mutex<Vec<DriverStream<D>>>,
}

impl<D: Driver> DriverBuffer<D> {
    pub(crate) fn new(
        shared: &Arc<Shared<D>>,
        memory: OwnedAllocation<DriverAllocator<D>>,
        len: usize,
    ) -> Self {
        DriverBuffer {
            memory: Some(memory),
            len,
            shared: Arc::clone(shared),
            uses: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn memory(&self) -> &OwnedAllocation<DriverAllocator<D>> {
        match &self.memory {
            Some(memory) => memory,
            // Taken only in `drop`.
            None => unreachable!("a buffer's memory is present until drop"),
        }
    }

    /// The driver's block, for native work on the same memory (it may be larger than the
    /// buffer: pool blocks are rounded up).
    pub fn block(&self) -> &D::Block {
        &self.memory().get().block().0
    }

    /// Bytes of data (`len * 4`).
    pub fn num_bytes(&self) -> usize {
        // Cannot overflow: the allocation of `len * 4` bytes succeeded.
        self.len.saturating_mul(std::mem::size_of::<f32>())
    }

    /// The pool the buffer came from (`None` for a plain allocation).
    pub fn pool(&self) -> Option<PoolId> {
        self.memory().get().pool()
    }

    pub(crate) fn record_use(&self, stream: &DriverStream<D>) {
        let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        if !uses.contains(stream) {
            uses.push(stream.clone());
        }
    }
}

impl<D: Driver> DeviceBuffer for DriverBuffer<D> {
    fn len(&self) -> usize {
        self.len
    }

    fn device_address(&self) -> u64 {
        self.memory().get().address()
    }

    fn instance_id(&self) -> u64 {
        self.shared.id
    }
}

impl<D: Driver> Drop for DriverBuffer<D> {
    fn drop(&mut self) {
        let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|e| e.into_inner()));
        if let Some(memory) = self.memory.take()
            && !uses.is_empty()
        {
            // Pending from now (neither live nor free), with the recorded streams in its free
            // point: a stream ordered after any of them since counts as ordered after the drop.
            let clocks: Vec<_> = uses.iter().map(|s| Arc::clone(&s.inner.clock)).collect();
            memory.pools().mark_pending(memory.get().id(), &clocks);
            self.shared.free_after(memory, uses);
        }
    }
}

impl<D: Driver> fmt::Debug for DriverBuffer<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("backend", &D::KIND)
            .field("address", &format_args!("{:#x}", self.device_address()))
            .field("len", &self.len)
            .field("pool", &self.pool())
            .finish()
    }
}
