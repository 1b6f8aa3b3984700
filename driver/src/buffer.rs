//! `DriverBuffer`: a typed device buffer of one backend instance, over its untyped
//! [`BufferMemory`].

use std::{
    fmt,
    marker::PhantomData,
    sync::{Arc, Mutex},
};

use accel_graph_api::{
    DeviceBuffer, Element, GraphError, PoolId,
    backend_kit::pools::OwnedAllocation,
    kernel::{BufferArg, ElementType},
};

use crate::{Driver, DriverStream, allocator::DriverAllocator, shared::Shared};

/// The memory under a buffer, whatever its element type: its pool block, its backend instance,
/// and the streams `record_stream` named. What kernel arguments carry (the backend's
/// [`PortableOps::Memory`](accel_graph_api::PortableOps::Memory)).
///
/// Dropping it frees the memory (a pool block goes back to its pool) — except memory a graph's
/// captured work uses, which the graph keeps until it is reset or dropped, and memory
/// [`record_stream`](accel_graph_api::Backend::record_stream)ed onto streams, which waits for
/// them.
pub struct BufferMemory<D: Driver> {
    memory: Option<OwnedAllocation<DriverAllocator<D>>>,
    /// Bytes of data (the block may be larger: pool blocks are rounded up).
    bytes: usize,
    /// The element type of the buffer that owns it: kernel arguments must name the same.
    element: ElementType,
    pub(crate) shared: Arc<Shared<D>>,
    /// Streams recorded with `record_stream`.
    uses: Mutex<Vec<DriverStream<D>>>,
}

impl<D: Driver> BufferMemory<D> {
    pub(crate) fn allocation(&self) -> &OwnedAllocation<DriverAllocator<D>> {
        match &self.memory {
            Some(memory) => memory,
            // Taken only in `drop`.
            None => unreachable!("a buffer's memory is present until drop"),
        }
    }

    /// The driver's block, for native work on the same memory (it may be larger than the
    /// buffer: pool blocks are rounded up).
    pub fn block(&self) -> &D::Block {
        &self.allocation().get().block().0
    }

    /// Bytes of data.
    pub fn num_bytes(&self) -> usize {
        self.bytes
    }

    /// The device address of the first byte.
    pub fn device_address(&self) -> u64 {
        self.allocation().get().address()
    }

    /// The [`Backend::instance_id`](accel_graph_api::Backend::instance_id) of its backend.
    pub fn instance_id(&self) -> u64 {
        self.shared.id
    }

    /// The pool the memory came from (`None` for a plain allocation).
    pub fn pool(&self) -> Option<PoolId> {
        self.allocation().get().pool()
    }

    /// Records that work issued on the driver stream `stream` through its raw handle — the
    /// user's own kernels and library calls — uses this memory: if that stream takes part in
    /// a capture of this backend instance (begun on it, or forked into it through events,
    /// whether by the backend or by the user's raw calls), the capture's graph keeps the
    /// memory alive until it is reset, as for the portable ops. Returns whether the stream
    /// captures. A stream capturing into a capture this instance did not begin is
    /// [`GraphError::Unsupported`](accel_graph_api::GraphError): nothing would keep the
    /// memory alive for that graph.
    pub fn track_raw_use(&self, stream: &D::Stream) -> accel_graph_api::Result<bool> {
        self.shared.keep_for_raw_work(self.allocation(), stream)
    }

    /// The bytes a kernel argument names in this memory, checked against the memory itself
    /// rather than what the argument says of it ([`DeviceBuffer`] is a public trait, so a
    /// buffer type outside this crate could misstate its length): the memory belongs to
    /// backend instance `instance`, holds elements of the argument's type, and holds every
    /// byte of the view.
    pub(crate) fn checked_bytes(
        &self,
        instance: u64,
        arg: &BufferArg<'_, Self>,
    ) -> accel_graph_api::Result<std::ops::Range<usize>> {
        self.check_instance(instance, arg.instance())?;
        if arg.element() != self.element {
            return Err(GraphError::ArgumentMismatch(format!(
                "a buffer argument names {} elements in memory of {} elements",
                arg.element().name(),
                self.element.name()
            )));
        }
        match arg.byte_range() {
            Some(bytes) if self.holds(&bytes) => Ok(bytes),
            _ => Err(GraphError::ViewOutOfRange {
                start: arg.offset(),
                end: arg.offset().saturating_add(arg.len()),
                len: self.bytes / self.element.size().max(1),
            }),
        }
    }

    /// [`GraphError::ForeignObject`] unless this memory, and what the work naming it was told
    /// of it (`claimed`), are of backend instance `instance`.
    pub(crate) fn check_instance(
        &self,
        instance: u64,
        claimed: u64,
    ) -> accel_graph_api::Result<()> {
        if self.shared.id != instance || claimed != instance {
            return Err(GraphError::ForeignObject { what: "buffer" });
        }
        Ok(())
    }

    /// True when every byte of `bytes` lies in this memory.
    pub(crate) fn holds(&self, bytes: &std::ops::Range<usize>) -> bool {
        bytes.start <= bytes.end && bytes.end <= self.bytes
    }

    pub(crate) fn record_use(&self, stream: &DriverStream<D>) {
        let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        if !uses.contains(stream) {
            uses.push(stream.clone());
        }
    }
}

impl<D: Driver> Drop for BufferMemory<D> {
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

impl<D: Driver> fmt::Debug for BufferMemory<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferMemory")
            .field("backend", &D::KIND)
            .field("address", &format_args!("{:#x}", self.device_address()))
            .field("bytes", &self.bytes)
            .field("pool", &self.pool())
            .finish()
    }
}

/// A device buffer of elements `T` of a driver-based backend: plain, or from a graph's pool.
///
/// Dropping it frees the memory (a pool block goes back to its pool) — except memory a graph's
/// captured work uses, which the graph keeps until it is reset or dropped, and memory
/// [`record_stream`](accel_graph_api::Backend::record_stream)ed onto streams, which waits for
/// them.
pub struct DriverBuffer<D: Driver, T: Element = f32> {
    memory: BufferMemory<D>,
    len: usize,
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
            memory: BufferMemory {
                memory: Some(memory),
                bytes: len.saturating_mul(std::mem::size_of::<T>()),
                element: ElementType::of::<T>(),
                shared: Arc::clone(shared),
                uses: Mutex::new(Vec::new()),
            },
            len,
            element: PhantomData,
        }
    }

    pub(crate) fn memory(&self) -> &OwnedAllocation<DriverAllocator<D>> {
        self.memory.allocation()
    }

    /// The driver's block, for native work on the same memory (it may be larger than the
    /// buffer: pool blocks are rounded up).
    pub fn block(&self) -> &D::Block {
        self.memory.block()
    }

    /// The pool the buffer came from (`None` for a plain allocation).
    pub fn pool(&self) -> Option<PoolId> {
        self.memory.pool()
    }

    pub(crate) fn record_use(&self, stream: &DriverStream<D>) {
        self.memory.record_use(stream);
    }
}

impl<D: Driver, T: Element> AsRef<BufferMemory<D>> for DriverBuffer<D, T> {
    fn as_ref(&self) -> &BufferMemory<D> {
        &self.memory
    }
}

impl<D: Driver, T: Element> DeviceBuffer for DriverBuffer<D, T> {
    type Element = T;

    fn len(&self) -> usize {
        self.len
    }

    fn device_address(&self) -> u64 {
        self.memory.device_address()
    }

    fn instance_id(&self) -> u64 {
        self.memory.shared.id
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
