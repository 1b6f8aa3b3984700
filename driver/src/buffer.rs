//! `DriverBuffer`: a typed device buffer of one backend instance.

use std::{
    fmt,
    marker::PhantomData,
    sync::{Arc, Mutex},
};

use accel_graph_api::{DeviceBuffer, Element, PoolId, backend_kit::pools::OwnedAllocation};

use crate::{Driver, DriverStream, allocator::DriverAllocator, shared::Shared};

/// A device buffer of elements `T` of a driver-based backend: plain, or from a graph's pool.
///
/// Dropping it frees the memory (a pool block goes back to its pool) — except memory a graph's
/// captured work uses, which the graph keeps until it is reset or dropped, and memory
/// [`record_stream`](accel_graph_api::Backend::record_stream)ed onto streams, which waits for
/// them.
pub struct DriverBuffer<D: Driver, T: Element = f32> {
    memory: Option<OwnedAllocation<DriverAllocator<D>>>,
    len: usize,
    shared: Arc<Shared<D>>,
    /// Streams recorded with `record_stream`.
    uses: Mutex<Vec<DriverStream<D>>>,
    /// The element type: the buffer owns no `T` (the device memory holds them), and a buffer
    /// of any `T` is `Send + Sync` as its memory is.
    element: PhantomData<fn() -> T>,
}

impl<D: Driver, T: Element> DriverBuffer<D, T> {
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
            element: PhantomData,
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

impl<D: Driver, T: Element> DeviceBuffer for DriverBuffer<D, T> {
    type Element = T;

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

impl<D: Driver, T: Element> Drop for DriverBuffer<D, T> {
    fn drop(&mut self) {
        let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|e| e.into_inner()));
        if let Some(memory) = self.memory.take()
            && !uses.is_empty()
        {
            self.shared.free_after(memory, uses);
        }
    }
}

impl<D: Driver, T: Element> fmt::Debug for DriverBuffer<D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("backend", &D::KIND)
            .field("element", &T::type_name())
            .field("address", &format_args!("{:#x}", self.device_address()))
            .field("len", &self.len)
            .field("pool", &self.pool())
            .finish()
    }
}
