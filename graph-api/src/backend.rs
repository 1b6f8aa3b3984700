//! `Backend`: the static trait (associated types for streams, events, buffers and graphs) that
//! generic code is written against, and the device services such code needs.

use std::{fmt, marker::PhantomData, ops::RangeBounds, sync::Arc};

use crate::{
    AcceleratorGraph, BlockInfo, Capabilities, CaptureExt, CapturedNode, ConditionElement, Element,
    FloatElement, Gemm, GraphError, GraphOptions, InstanceCache, MemoryStats, PoolId, PortableOps,
    Result, View,
    kernel::{Kernel, KernelArg},
};

/// Which backend a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// The deterministic simulated device.
    Mock,
    /// NVIDIA CUDA (driver API through cudarc).
    Cuda,
    /// AMD HIP.
    Hip,
    /// WebGPU through wgpu (software graphs).
    Wgpu,
}

impl BackendKind {
    /// Lower-case name, as `ACCEL_GRAPH_BACKEND` spells it.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Mock => "mock",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
            BackendKind::Wgpu => "wgpu",
        }
    }

    /// All kinds.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Mock,
        BackendKind::Cuda,
        BackendKind::Hip,
        BackendKind::Wgpu,
    ];
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = GraphError;

    /// Parses a backend name, ignoring case and surrounding blanks.
    ///
    /// ```
    /// use accel_graph_api::{BackendKind, GraphError};
    /// assert_eq!(" CUDA ".parse::<BackendKind>()?, BackendKind::Cuda);
    /// assert!(matches!("tpu".parse::<BackendKind>(), Err(GraphError::UnknownBackend(_))));
    /// # Ok::<(), GraphError>(())
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim().to_ascii_lowercase();
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == wanted)
            .ok_or_else(|| GraphError::UnknownBackend(s.to_owned()))
    }
}

/// A device buffer of elements of type [`DeviceBuffer::Element`]. Dropping it frees the
/// memory (or returns it to its pool) — unless a graph's captured work still uses it, in which
/// case the graph keeps it until the graph is reset or dropped.
pub trait DeviceBuffer: Send + Sync + fmt::Debug {
    /// The element type.
    type Element: Element;
    /// Number of elements.
    fn len(&self) -> usize;
    /// True when the buffer has no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of data (`len` elements).
    fn num_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<Self::Element>()
    }
    /// The device address of the first element (identity of the memory, as `data_ptr()`).
    /// Addresses are only comparable between buffers of one backend instance.
    fn device_address(&self) -> u64;
    /// The [`Backend::instance_id`] of the backend that allocated the buffer.
    fn instance_id(&self) -> u64;
    /// True when `self` and `other` are the same memory of the same backend instance: the
    /// identity that decides whether a copy can be skipped.
    fn same_memory(&self, other: &Self) -> bool
    where
        Self: Sized,
    {
        self.instance_id() == other.instance_id() && self.device_address() == other.device_address()
    }
    /// Elements `range` of the buffer ([`GraphError::ViewOutOfRange`] past its end).
    fn view(&self, range: impl RangeBounds<usize>) -> Result<View<'_, Self>>
    where
        Self: Sized,
    {
        View::new(self, range)
    }
}

/// A host function a backend can run in stream order (and capture as a host node).
///
/// A panic inside it never unwinds into the device runtime: it is caught, and the next call
/// that observes the stream (the replay that ran it, or a later replay or synchronize) returns
/// [`GraphError::HostCallbackPanicked`].
pub type HostCallback = Arc<dyn Fn() + Send + Sync>;

/// How an event is made: `torch.cuda.Event(enable_timing=False, external=False)`.
///
/// ```
/// use accel_graph_api::EventOptions;
/// let timing = EventOptions::new().enable_timing(true);
/// assert!(timing.enable_timing && !timing.external);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct EventOptions {
    /// The event records a timestamp, for [`Backend::elapsed_time`].
    pub enable_timing: bool,
    /// Recorded or waited inside a capture, the event becomes a graph node of its own (an
    /// *external* event record / wait), so a replayed graph can be timed or synchronized with
    /// work outside it. Internal events (the default) only order streams: inside a capture they
    /// become dependency edges (fork/join), not nodes.
    pub external: bool,
}

impl EventOptions {
    /// An internal event without timing (the default).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `enable_timing`.
    pub fn enable_timing(mut self, on: bool) -> Self {
        self.enable_timing = on;
        self
    }

    /// Sets `external`.
    pub fn external(mut self, on: bool) -> Self {
        self.external = on;
        self
    }
}

/// A backend: device services plus a graph type, written against by generic code.
///
/// Streams follow PyTorch: each thread has a *current stream* per backend instance, initially
/// the default stream, which cannot be captured; [`Backend::use_stream`] switches it for a
/// scope (`with stream:`). Portable ops ([`PortableOps`], a supertrait) are issued on the
/// current stream and, if it is capturing, recorded into the capture instead of run. Calls that
/// block (synchronize, upload, download) or allocate outside a capture's pool are *unsafe
/// calls* during a capture; see [`crate::CaptureErrorMode`].
///
/// Memory a graph's captured work uses stays allocated until the graph is reset or dropped,
/// even when the buffer handle is dropped first, so a replay never touches freed memory.
///
/// ```
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, PortableOps};
///
/// /// Generic code: runs on every backend.
/// fn add_one_twice<B: Backend>(backend: &B) -> accel_graph_api::Result<Vec<f32>> {
///     let x = backend.alloc_from(&[0.0; 8])?;
///     let stream = backend.new_stream()?;
///     let mut graph = backend.graph(GraphOptions::new())?;
///     backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
///     graph.replay()?;
///     graph.replay()?;
///     backend.download(&x)
/// }
/// let out = add_one_twice(&accel_graph_mock::MockBackend::new())?;
/// assert_eq!(out, vec![2.0; 8]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub trait Backend: PortableOps + Clone + Send + Sync + fmt::Debug + 'static {
    /// A stream handle (cheap to clone; clones name the same stream).
    type Stream: Clone + Send + Sync + PartialEq + fmt::Debug + 'static;
    /// An event, for ordering work across streams (fork/join) and timing.
    type Event: Send + Sync + fmt::Debug + 'static;
    /// The backend's graph type.
    type Graph: AcceleratorGraph + fmt::Debug + 'static;

    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Identity of the backend instance: clones share it, separately created backends differ
    /// (unique across the process, across backends too).
    fn instance_id(&self) -> u64;
    /// What the backend supports.
    fn capabilities(&self) -> Capabilities;
    /// Values kept for this instance (clones share them) and dropped with it: where
    /// utilities keep per-instance singletons such as a shared capture stream.
    fn instance_cache(&self) -> &InstanceCache;

    // --- streams ---
    /// The default stream (the initial current stream). It cannot be captured where
    /// `capabilities().uncapturable_default_stream`.
    fn default_stream(&self) -> Self::Stream;
    /// Creates a new stream.
    fn new_stream(&self) -> Result<Self::Stream>;
    /// This thread's current stream.
    fn current_stream(&self) -> Self::Stream;
    /// Sets this thread's current stream; returns the previous one. A stream of another
    /// backend instance is refused with [`GraphError::ForeignObject`].
    fn set_current_stream(&self, stream: &Self::Stream) -> Result<Self::Stream>;
    /// Makes `stream` current until the guard drops (PyTorch's `with stream:`). A stream of
    /// another backend instance is refused with [`GraphError::ForeignObject`].
    fn use_stream(&self, stream: &Self::Stream) -> Result<StreamGuard<Self>> {
        let previous = self.set_current_stream(stream)?;
        Ok(StreamGuard {
            backend: self.clone(),
            previous: Some(previous),
            not_send: PhantomData,
        })
    }
    /// Waits for all work on the device (unsafe during capture: it conflicts with every
    /// capture in progress).
    fn synchronize(&self) -> Result<()>;
    /// Waits for all work on `stream` (an error if `stream` is capturing).
    fn stream_synchronize(&self, stream: &Self::Stream) -> Result<()>;
    /// Whether `stream` is capturing (always legal, even during capture).
    fn is_capturing(&self, stream: &Self::Stream) -> Result<bool>;

    // --- events ---
    /// Creates an internal event without timing.
    fn new_event(&self) -> Result<Self::Event> {
        self.new_event_with(EventOptions::new())
    }
    /// Creates an event with `options` (timing, external).
    fn new_event_with(&self, options: EventOptions) -> Result<Self::Event>;
    /// Records `event` on the current stream.
    fn record_event(&self, event: &Self::Event) -> Result<()>;
    /// Makes the current stream wait for `event` (during capture: joins the capture).
    fn wait_event(&self, event: &Self::Event) -> Result<()>;
    /// Blocks until `event` completes (unsafe during capture).
    fn event_synchronize(&self, event: &Self::Event) -> Result<()>;
    /// Whether the work before `event`'s last record has completed (never blocks).
    fn event_query(&self, event: &Self::Event) -> Result<bool>;
    /// Milliseconds between two completed timing events (`start.elapsed_time(end)`).
    /// [`GraphError::Unsupported`] where `capabilities().event_timing` is false.
    fn elapsed_time(&self, start: &Self::Event, end: &Self::Event) -> Result<f32>;

    // --- memory ---
    /// Allocates `len` elements of `T` (contents unspecified). On a capturing current stream
    /// the memory comes from the capture's pool; elsewhere it is a plain allocation, which is
    /// an unsafe call while a capture forbids it.
    fn alloc<T: Element>(&self, len: usize) -> Result<Self::Buffer<T>>;
    /// Copies host data into `dst` (a buffer or a [`View`] of one), blocking (unsafe during
    /// capture). `src` must have exactly `dst`'s length.
    fn upload<'a, T: Element>(
        &self,
        dst: impl Into<View<'a, Self::Buffer<T>>>,
        src: &[T],
    ) -> Result<()>;
    /// Copies `src` (a buffer or a [`View`] of one) into `dst`, blocking after the current
    /// stream's work (unsafe during capture). `dst` must have exactly `src`'s length.
    fn download_into<'a, T: Element>(
        &self,
        src: impl Into<View<'a, Self::Buffer<T>>>,
        dst: &mut [T],
    ) -> Result<()>;
    /// Copies `src` (a buffer or a [`View`] of one) to a new vector, blocking after the
    /// current stream's work (unsafe during capture).
    fn download<'a, T: Element>(
        &self,
        src: impl Into<View<'a, Self::Buffer<T>>>,
    ) -> Result<Vec<T>> {
        let src = src.into();
        let mut out = vec![<T as bytemuck::Zeroable>::zeroed(); src.len()];
        self.download_into(src, &mut out)?;
        Ok(out)
    }
    /// Allocates a buffer holding `data`.
    fn alloc_from<T: Element>(&self, data: &[T]) -> Result<Self::Buffer<T>> {
        let buf = self.alloc(data.len())?;
        self.upload(&buf, data)?;
        Ok(buf)
    }
    /// Marks `buffer` as used by work on `stream` (PyTorch's `Tensor.record_stream`): when
    /// the buffer is dropped, its memory is handed out again only after `stream` has passed
    /// the point of the drop (inside a capture: after the capture ends) — until then its block
    /// is pending ([`BlockState::PendingFree`](crate::BlockState::PendingFree),
    /// [`MemoryStats::pending_free_bytes`]). A pool block freed so goes to an allocation only
    /// if that allocation is also ordered after `stream` (by events, or a completed
    /// synchronize), besides the stream the buffer was allocated on.
    fn record_stream<T: Element>(
        &self,
        buffer: &Self::Buffer<T>,
        stream: &Self::Stream,
    ) -> Result<()>;
    /// Memory accounting: active and reserved bytes, per pool too.
    fn memory_stats(&self) -> MemoryStats;
    /// Every block the backend holds from the device, with its pool and state
    /// (`torch.cuda.memory_snapshot()`).
    fn memory_snapshot(&self) -> Vec<BlockInfo>;
    /// Returns to the device every block nobody uses any more
    /// (`torch.accelerator.empty_cache()`): frees waiting for a capture to end are made once no
    /// capture runs, free blocks of pools no graph holds are released.
    fn empty_cache(&self) -> Result<()>;

    /// Runs `f` on the host in stream order ([`GraphError::Unsupported`] where
    /// `capabilities().host_callbacks` is false).
    fn host_callback(&self, f: HostCallback) -> Result<()>;

    // --- user kernels and GEMM ---
    /// Launches `kernel` on the current stream over `grid` blocks (workgroups) of its block
    /// size, with `args` in the order of its parameters; recorded, with its buffers kept alive,
    /// if the stream is capturing. The arguments are checked first
    /// ([`GraphError::KernelArguments`]: their number, element and scalar types, extents), and
    /// the kernel is compiled for this backend on its first launch (see
    /// [`Backend::prepare_kernel`]). See [`crate::kernel`] for how each backend binds them.
    fn launch_kernel(
        &self,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[KernelArg<'_, Self::Memory>],
    ) -> Result<()>;

    /// Compiles and loads `kernel` for this backend now (NVRTC / hipRTC, a WGSL pipeline),
    /// so that its first launch — perhaps inside a capture — does no compilation. Kernels are
    /// compiled once per backend instance (and, on CUDA and HIP, cached on disk across
    /// processes). Errors: the kernel lacks this backend's source
    /// ([`GraphError::Unsupported`]), the compiler is missing
    /// ([`GraphError::LibraryUnavailable`]) or rejects the source (its log in the error).
    fn prepare_kernel(&self, kernel: &Kernel) -> Result<()>;

    /// The matrix product `spec` (`C = alpha · op(A) · op(B) + beta · C`, row-major) of `f32`,
    /// `bf16` or `f16` operands on the current stream, captured like any op. cuBLAS on CUDA
    /// (with a workspace per stream made outside captures, as PyTorch does), a kernel on HIP
    /// and wgpu, the host reference ([`crate::gemm_reference`]) on the mock.
    fn gemm<'a, 'b, 'c, T: FloatElement>(
        &self,
        spec: &Gemm,
        a: impl Into<View<'a, Self::Buffer<T>>>,
        b: impl Into<View<'b, Self::Buffer<T>>>,
        c: impl Into<View<'c, Self::Buffer<T>>>,
    ) -> Result<()>;

    // --- graphs ---
    /// Creates a graph. A pool id that this instance did not issue (by
    /// [`Backend::graph_pool_handle`] or as a graph's [`AcceleratorGraph::pool`]) is refused
    /// with [`GraphError::InvalidPoolId`].
    fn graph(&self, options: GraphOptions) -> Result<Self::Graph>;
    /// A new user pool id `(0, n)` that several graphs of this instance can share.
    fn graph_pool_handle(&self) -> PoolId;

    // --- graph editing (see the `editing` module of this crate) ---
    /// The node that the last work issued on the current stream became in its capture (an
    /// op, a kernel launch, a product, a host callback, a child graph or a conditional node),
    /// for [`Backend::update_node`] later.
    ///
    /// Errors with [`GraphError::NodeUnavailable`] when the current stream is not capturing,
    /// has issued no work in its capture yet, or is a conditional node's body.
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// let b = accel_graph_mock::MockBackend::new();
    /// let x = b.alloc_from(&[0.0f32; 2])?;
    /// let s = b.new_stream()?;
    /// let mut g = b.graph(GraphOptions::new())?;
    /// let (first, second) = b.capture_on(&s, &mut g, || {
    ///     b.fill(&x, 1.0)?;
    ///     let first = b.captured_node()?;
    ///     b.scale(&x, 3.0)?;
    ///     Ok((first, b.captured_node()?))
    /// })?;
    /// assert_eq!((first.index(), second.index()), (0, 1));
    /// assert!(matches!(b.captured_node(), Err(GraphError::NodeUnavailable { .. })));
    /// # Ok::<(), GraphError>(())
    /// ```
    fn captured_node(&self) -> Result<CapturedNode>;

    /// `graph.update_from(from)` for generic code: see
    /// [`Graph::update_from`](crate::Graph::update_from).
    fn update_graph(&self, graph: &mut Self::Graph, from: &Self::Graph) -> Result<()>;

    /// `graph.update_node(node, args)` for generic code: see
    /// [`Graph::update_node`](crate::Graph::update_node).
    fn update_node(
        &self,
        graph: &mut Self::Graph,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, Self::Memory>)],
    ) -> Result<()>;

    /// Runs `then` when the condition — the one element of `cond` — is true (see
    /// [`ConditionElement`]). On a capturing stream this is one conditional node: `then` is
    /// captured (not run) into its body, and every replay tests the condition as it is at that
    /// point of the replay, on the device (or in the backend's emulation, with the same
    /// results). On a stream that is not capturing the condition is read back and `then` runs
    /// or not, now.
    ///
    /// The body runs with another stream current (its capture's): work it issues must use the
    /// current stream (the backend's ops do). An error or panic in the body, or a failure to
    /// build the node, invalidates the enclosing capture (its `capture_end` reports
    /// [`GraphError::CaptureInvalidated`]). Errors: `cond` not of one element
    /// ([`GraphError::LengthMismatch`]), a backend without conditional nodes
    /// ([`GraphError::Unsupported`] naming the missing capability,
    /// `capabilities().conditional_nodes`). A graph holding conditional nodes cannot be
    /// replayed into another capture as a child graph, nor updated from another capture
    /// (CUDA supports neither).
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// let b = accel_graph_mock::MockBackend::new();
    /// let (x, flag) = (b.alloc_from(&[0.0f32; 2])?, b.alloc_from(&[1u32])?);
    /// let s = b.new_stream()?;
    /// let mut g = b.graph(GraphOptions::new())?;
    /// b.capture_on(&s, &mut g, || b.if_then(&flag, || b.add_scalar(&x, 1.0)))?;
    /// g.replay()?; // flag is 1: x += 1
    /// b.upload(&flag, &[0])?;
    /// g.replay()?; // flag is 0: skipped
    /// assert_eq!(b.download(&x)?, vec![1.0, 1.0]);
    /// # Ok::<(), GraphError>(())
    /// ```
    fn if_then<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, Self::Buffer<T>>>,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()>;

    /// Runs `then` when the condition is true, `otherwise` when it is false: as
    /// [`Backend::if_then`], with two bodies. Needs `capabilities().conditional_if_else`.
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// let b = accel_graph_mock::MockBackend::new();
    /// let (x, flag) = (b.alloc_from(&[0.0f32])?, b.alloc_from(&[0.0f32])?);
    /// let s = b.new_stream()?;
    /// let mut g = b.graph(GraphOptions::new())?;
    /// b.capture_on(&s, &mut g, || {
    ///     b.if_else(&flag, || b.add_scalar(&x, 1.0), || b.add_scalar(&x, 10.0))
    /// })?;
    /// g.replay()?;
    /// assert_eq!(b.download(&x)?, vec![10.0]);
    /// # Ok::<(), GraphError>(())
    /// ```
    fn if_else<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, Self::Buffer<T>>>,
        then: impl FnOnce() -> Result<()>,
        otherwise: impl FnOnce() -> Result<()>,
    ) -> Result<()>;

    /// Runs `body` again and again while the condition is true, testing it before each run
    /// (the body's work must eventually make it false). Captured, this is one conditional
    /// node: a replay runs the whole loop with one launch. As [`Backend::if_then`] otherwise;
    /// eagerly the condition is read back before each run.
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// let b = accel_graph_mock::MockBackend::new();
    /// let (x, left) = (b.alloc_from(&[0.0f32])?, b.alloc(1)?);
    /// let s = b.new_stream()?;
    /// let mut g = b.graph(GraphOptions::new())?;
    /// b.capture_on(&s, &mut g, || {
    ///     b.fill(&left, 3.0)?; // captured work writes the condition
    ///     b.while_loop(&left, || {
    ///         b.add_scalar(&x, 1.0)?;
    ///         b.add_scalar(&left, -1.0)
    ///     })
    /// })?;
    /// g.replay()?;
    /// g.replay()?;
    /// assert_eq!(b.download(&x)?, vec![6.0]);
    /// # Ok::<(), GraphError>(())
    /// ```
    fn while_loop<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, Self::Buffer<T>>>,
        body: impl FnMut() -> Result<()>,
    ) -> Result<()>;

    /// Captures the fallible body `f` into `graph` with `stream` current (PyTorch's
    /// `with stream, graph:`), returning the body's value.
    ///
    /// If the body returns an error or panics, or the capture cannot end, the capture is
    /// discarded (the graph is reset, no stream stays capturing) and the error returned (the
    /// panic resumed). See [`CaptureExt::capture`].
    fn capture_on<R>(
        &self,
        stream: &Self::Stream,
        graph: &mut Self::Graph,
        f: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let _current = self.use_stream(stream)?;
        graph.capture(f)
    }

    /// [`Backend::capture_on`] for a body that cannot fail.
    fn capture_on_infallible<R>(
        &self,
        stream: &Self::Stream,
        graph: &mut Self::Graph,
        f: impl FnOnce() -> R,
    ) -> Result<R> {
        self.capture_on(stream, graph, || Ok(f()))
    }
}

/// Restores the previous current stream when dropped; from [`Backend::use_stream`].
///
/// Like `MutexGuard`, it cannot leave its thread: the current stream is per thread, so a
/// guard dropped elsewhere would restore the wrong thread's stream.
///
/// ```compile_fail
/// use accel_graph_api::Backend;
/// let backend = accel_graph_mock::MockBackend::new();
/// let stream = backend.new_stream().unwrap();
/// let guard = backend.use_stream(&stream).unwrap();
/// std::thread::spawn(move || drop(guard)); // error: the guard is not `Send`
/// ```
#[must_use = "the stream is current only while the guard lives"]
pub struct StreamGuard<B: Backend> {
    backend: B,
    previous: Option<B::Stream>,
    /// A raw pointer is neither `Send` nor `Sync`.
    not_send: PhantomData<*const ()>,
}

impl<B: Backend> Drop for StreamGuard<B> {
    fn drop(&mut self) {
        if let Some(prev) = self.previous.take() {
            // The previous stream was current on this thread, so it is the backend's own.
            let _ = self.backend.set_current_stream(&prev);
        }
    }
}

impl<B: Backend> fmt::Debug for StreamGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamGuard")
            .field("previous", &self.previous)
            .finish()
    }
}
