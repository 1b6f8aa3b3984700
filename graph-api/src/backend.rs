//! `Backend`: the static trait (associated types for streams, events, buffers and graphs) that
//! generic code is written against, and the device services such code needs.

use std::{fmt, sync::Arc};

use crate::{
    AcceleratorGraph, Capabilities, CaptureExt, GraphOptions, MemoryStats, PoolId, Result,
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
    type Err = crate::GraphError;

    fn from_str(s: &str) -> Result<Self> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| crate::GraphError::BackendUnavailable {
                backend: "unknown",
                reason: format!("unknown backend '{s}': expected one of mock, cuda, hip, wgpu"),
            })
    }
}

/// A device buffer of `f32` elements. Dropping it frees the memory (or returns it to its pool).
pub trait DeviceBuffer: Send + Sync + fmt::Debug {
    /// Number of `f32` elements.
    fn len(&self) -> usize;
    /// True when the buffer has no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The device address of the first element (identity of the memory, as `data_ptr()`).
    fn device_address(&self) -> u64;
}

/// A host function a backend can run in stream order (and capture as a host node).
pub type HostCallback = Arc<dyn Fn() + Send + Sync>;

/// A backend: device services plus a graph type, written against by generic code.
///
/// Streams follow PyTorch: each thread has a *current stream* per backend, initially the
/// default stream, which cannot be captured; [`Backend::use_stream`] switches it for a scope
/// (`with stream:`). Portable ops are issued on the current stream and, if it is capturing,
/// recorded into the capture instead of run. Calls that block (synchronize, upload,
/// download) or allocate outside a capture's pool are *unsafe calls* during a capture; see
/// [`crate::CaptureErrorMode`].
///
/// ```
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions};
///
/// /// Generic code: runs on every backend.
/// fn add_one_twice<B: Backend>(backend: &B) -> accel_graph_api::Result<Vec<f32>> {
///     let x = backend.alloc_from(&[0.0; 8])?;
///     let stream = backend.new_stream()?;
///     let mut graph = backend.graph(GraphOptions::new())?;
///     backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))??;
///     graph.replay()?;
///     graph.replay()?;
///     backend.download(&x)
/// }
/// let out = add_one_twice(&accel_graph_mock::MockBackend::new())?;
/// assert_eq!(out, vec![2.0; 8]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub trait Backend: Clone + Send + Sync + fmt::Debug + 'static {
    /// A stream handle (cheap to clone; clones name the same stream).
    type Stream: Clone + Send + Sync + PartialEq + fmt::Debug;
    /// An event, for ordering work across streams (fork/join).
    type Event: Send + Sync + fmt::Debug;
    /// A device buffer of `f32`.
    type Buffer: DeviceBuffer;
    /// The backend's graph type.
    type Graph: AcceleratorGraph + fmt::Debug;

    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Identity of the device context: clones of a backend share it, separately created
    /// backends differ (unique across the process). Keys process-wide singletons such as a
    /// shared capture stream.
    fn instance_id(&self) -> u64;
    /// What the backend supports.
    fn capabilities(&self) -> Capabilities;

    // --- streams ---
    /// The default stream (the initial current stream). It cannot be captured where
    /// `capabilities().uncapturable_default_stream`.
    fn default_stream(&self) -> Self::Stream;
    /// Creates a new stream.
    fn new_stream(&self) -> Result<Self::Stream>;
    /// This thread's current stream.
    fn current_stream(&self) -> Self::Stream;
    /// Sets this thread's current stream; returns the previous one.
    fn set_current_stream(&self, stream: &Self::Stream) -> Self::Stream;
    /// Makes `stream` current until the guard drops (PyTorch's `with stream:`).
    fn use_stream(&self, stream: &Self::Stream) -> StreamGuard<Self> {
        let previous = self.set_current_stream(stream);
        StreamGuard {
            backend: self.clone(),
            previous: Some(previous),
        }
    }
    /// Waits for all work on the device (unsafe during capture).
    fn synchronize(&self) -> Result<()>;
    /// Waits for all work on `stream` (an error if `stream` is capturing).
    fn stream_synchronize(&self, stream: &Self::Stream) -> Result<()>;
    /// Whether `stream` is capturing (always legal, even during capture).
    fn is_capturing(&self, stream: &Self::Stream) -> Result<bool>;

    // --- events ---
    /// Creates an event.
    fn new_event(&self) -> Result<Self::Event>;
    /// Records `event` on the current stream.
    fn record_event(&self, event: &Self::Event) -> Result<()>;
    /// Makes the current stream wait for `event` (during capture: joins the capture).
    fn wait_event(&self, event: &Self::Event) -> Result<()>;
    /// Blocks until `event` completes (unsafe during capture).
    fn event_synchronize(&self, event: &Self::Event) -> Result<()>;

    // --- memory ---
    /// Allocates `len` f32 elements (contents unspecified). On a capturing current stream the
    /// memory comes from the capture's pool; elsewhere it is a plain allocation, which is an
    /// unsafe call while a capture forbids it.
    fn alloc(&self, len: usize) -> Result<Self::Buffer>;
    /// Copies host data into `dst`, blocking (unsafe during capture).
    fn upload(&self, dst: &Self::Buffer, src: &[f32]) -> Result<()>;
    /// Copies `src` to the host, blocking after the current stream's work (unsafe during
    /// capture).
    fn download(&self, src: &Self::Buffer) -> Result<Vec<f32>>;
    /// Allocates a buffer holding `data`.
    fn alloc_from(&self, data: &[f32]) -> Result<Self::Buffer> {
        let buf = self.alloc(data.len())?;
        self.upload(&buf, data)?;
        Ok(buf)
    }
    /// Memory accounting (allocated/reserved bytes, pools).
    fn memory_stats(&self) -> MemoryStats;

    // --- portable ops, on the current stream ---
    /// `x[i] = value`.
    fn fill(&self, x: &Self::Buffer, value: f32) -> Result<()>;
    /// `dst[i] = src[i]` (equal lengths).
    fn copy(&self, dst: &Self::Buffer, src: &Self::Buffer) -> Result<()>;
    /// `x[i] += c`.
    fn add_scalar(&self, x: &Self::Buffer, c: f32) -> Result<()>;
    /// `x[i] *= a`.
    fn scale(&self, x: &Self::Buffer, a: f32) -> Result<()>;
    /// `y[i] += a * x[i]` (equal lengths; product rounded before the sum: no fused
    /// multiply-add, so results are reproducible bit for bit).
    fn axpy(&self, y: &Self::Buffer, a: f32, x: &Self::Buffer) -> Result<()>;
    /// Runs `f` on the host in stream order ([`GraphError::Unsupported`](crate::GraphError)
    /// where `capabilities().host_callbacks` is false).
    fn host_callback(&self, f: HostCallback) -> Result<()>;

    // --- graphs ---
    /// Creates a graph.
    fn graph(&self, options: GraphOptions) -> Result<Self::Graph>;
    /// A new user pool id `(0, n)` that several graphs can share.
    fn graph_pool_handle(&self) -> PoolId {
        PoolId::new_user()
    }

    /// Captures `f` into `graph` with `stream` current (PyTorch's `with stream, graph:`).
    /// Panic-safe like [`CaptureExt::capture`].
    fn capture_on<R>(
        &self,
        stream: &Self::Stream,
        graph: &mut Self::Graph,
        f: impl FnOnce() -> R,
    ) -> Result<R> {
        let _current = self.use_stream(stream);
        graph.capture(f)
    }
}

/// Restores the previous current stream when dropped; from [`Backend::use_stream`].
#[must_use = "the stream is current only while the guard lives"]
pub struct StreamGuard<B: Backend> {
    backend: B,
    previous: Option<B::Stream>,
}

impl<B: Backend> Drop for StreamGuard<B> {
    fn drop(&mut self) {
        if let Some(prev) = self.previous.take() {
            self.backend.set_current_stream(&prev);
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
