//! `CudaBackend`: the [`Backend`] implementation on the CUDA driver API.

use std::{
    ffi::c_void,
    panic::{self, AssertUnwindSafe},
    ptr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use accel_graph_api::{
    Backend, BackendKind, Capabilities, CurrentStream, Graph, GraphError, GraphOptions,
    HostCallback, MemoryStats, PoolId, Result, pools::MemoryPools,
};
use cudarc::driver::{CudaContext, CudaStream, sys};

use crate::{
    CudaGraphImpl,
    capture_registry::CaptureRegistry,
    driver_error::{BACKEND, CallSite, check, from_cudarc},
    kernels::{self, Kernels},
    loader,
    memory::{CudaAllocator, CudaBuffer, set_mode_hint},
    stream::{CudaEventHandle, CudaStreamHandle},
};

thread_local! {
    /// `(instance, CUstream)` of the backend instance that last set this thread's current
    /// stream: a one-entry cache in front of the `CurrentStream` slot.
    static CURRENT_RAW: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// Process-wide counter of backend instances (the `instance_id`).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// State shared by clones of one backend.
pub(crate) struct Shared {
    pub(crate) kernels: Kernels,
    pub(crate) pools: Arc<MemoryPools<CudaAllocator>>,
    pub(crate) captures: CaptureRegistry,
    pub(crate) current: CurrentStream<CudaStreamHandle>,
    pub(crate) instance: u64,
    device_name: String,
    /// Last, so that it is released after the module above is unloaded.
    pub(crate) ctx: Arc<CudaContext>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The module unload that follows needs the context current on this thread.
        let _ = self.ctx.bind_to_thread();
        if self.captures.has_retired_callbacks() {
            // Host nodes of reset graphs may still be queued; let them run before their
            // callbacks are dropped with the registry.
            // SAFETY: plain device synchronisation.
            let _ = unsafe { sys::cuCtxSynchronize() };
        }
    }
}

/// The CUDA backend: one device's primary context, loaded at run time through cudarc.
///
/// Capture is CUDA's own stream capture (`cuStreamBeginCapture`) on the thread's current
/// stream, so anything issued on that stream is captured: the portable ops, the user's own
/// cudarc kernels and cuBLAS calls ([`CudaBackend::current_cuda_stream`] gives the stream).
///
/// ```no_run
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions};
/// use accel_graph_cuda::CudaBackend;
///
/// let backend = CudaBackend::new(0)?; // BackendUnavailable without a driver
/// let x = backend.alloc_from(&[0.0; 4])?;
/// let stream = backend.new_stream()?;
/// let mut graph = backend.graph(GraphOptions::new())?;
/// backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))??;
/// graph.replay()?;
/// assert_eq!(backend.download(&x)?, vec![1.0; 4]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Clone)]
pub struct CudaBackend {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.shared.device_name)
            .field("ordinal", &self.shared.ctx.ordinal())
            .field("instance", &self.shared.instance)
            .finish()
    }
}

fn unavailable(call: &str, err: cudarc::driver::DriverError) -> GraphError {
    let (name, message) = crate::driver_error::describe(err.0);
    let hint = if err.0 == sys::CUresult::CUDA_ERROR_STUB_LIBRARY {
        " (the CUDA toolkit's stub libcuda was loaded instead of the driver's: remove the \
         toolkit's stubs/ folder from LD_LIBRARY_PATH)"
    } else {
        ""
    };
    GraphError::BackendUnavailable {
        backend: BACKEND,
        reason: format!("{call} failed: {name}: {message}{hint}"),
    }
}

impl CudaBackend {
    /// Opens device `ordinal`. Without a usable driver or device the error is
    /// [`GraphError::BackendUnavailable`] carrying the loader's or driver's text.
    pub fn new(ordinal: usize) -> Result<Self> {
        loader::ensure_driver_library()?;
        loader::guard_loader("loading the CUDA driver API", || Self::open(ordinal))
    }

    fn open(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable("cuInit/cuDevicePrimaryCtxRetain", e))?;
        // Our buffers are not cudarc slices, and slices users make in this context must not
        // record/wait events behind the capture's back (that breaks capture with
        // CUDA_ERROR_STREAM_CAPTURE_ISOLATION): turn cudarc's per-slice event tracking off.
        // SAFETY: ordering across streams is the caller's job, as for every CUDA stream.
        unsafe { ctx.disable_event_tracking() };
        let device_name = ctx.name().map_err(|e| from_cudarc(e, "cuDeviceGetName"))?;
        let kernels = Kernels::load()?;
        warm_up(&kernels)?;
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let default = CudaStreamHandle {
            stream: ctx.default_stream(),
            instance,
        };
        Ok(CudaBackend {
            shared: Arc::new(Shared {
                kernels,
                pools: MemoryPools::new(CudaAllocator::new(Arc::clone(&ctx))),
                captures: CaptureRegistry::default(),
                current: CurrentStream::new(default),
                instance,
                device_name,
                ctx,
            }),
        })
    }

    /// The cudarc context (the device's primary context), for the user's own modules,
    /// kernels and libraries. Its event tracking is disabled; see the crate documentation.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.shared.ctx
    }

    /// This thread's current stream as a cudarc stream: work launched on it while a capture
    /// is in progress is captured into the graph.
    pub fn current_cuda_stream(&self) -> Arc<CudaStream> {
        Arc::clone(&self.current_stream().stream)
    }

    /// Device memory `(free, total)` in bytes, from `cuMemGetInfo`.
    pub fn mem_get_info(&self) -> Result<(usize, usize)> {
        self.shared
            .ctx
            .mem_get_info()
            .map_err(|e| from_cudarc(e, "cuMemGetInfo"))
    }

    /// Frees waiting for the end of a capture (see the crate documentation).
    pub fn deferred_frees(&self) -> usize {
        self.shared.pools.raw().deferred_frees()
    }

    /// Makes the context current on this thread (a no-op when it is already: one
    /// `cuCtxGetCurrent`, kept this cheap because every op and replay pays it).
    pub(crate) fn bind(&self) -> Result<()> {
        let want = self.shared.ctx.cu_ctx();
        let mut current = ptr::null_mut();
        // SAFETY: reads this thread's current context into a local.
        let rc = unsafe { sys::cuCtxGetCurrent(&mut current) };
        if rc == sys::CUresult::CUDA_SUCCESS && current == want {
            return Ok(());
        }
        // SAFETY: the context is alive while the backend holds it.
        let rc = unsafe { sys::cuCtxSetCurrent(want) };
        crate::driver_error::check_call(rc, "cuCtxSetCurrent")
    }

    /// This thread's current stream as a raw handle, without touching the stream's
    /// reference count: the replay and op fast path.
    pub(crate) fn current_cu_stream(&self) -> sys::CUstream {
        let instance = self.shared.instance;
        let cached = CURRENT_RAW.with(|c| c.get());
        if cached.0 == instance {
            cached.1 as sys::CUstream
        } else {
            self.current_stream().cu_stream()
        }
    }

    /// Maps a failed driver call of `operation` to its error, naming the governing capture mode.
    pub(crate) fn result(
        &self,
        rc: sys::CUresult,
        call: &str,
        operation: &str,
        bytes: usize,
    ) -> Result<()> {
        self.result_of(rc, call, operation, bytes, false)
    }

    /// As [`CudaBackend::result`] for an unsafe call (synchronisation, blocking copy): refused
    /// with `UnsafeDuringCapture` also when the capture it hit was invalidated already.
    pub(crate) fn unsafe_result(
        &self,
        rc: sys::CUresult,
        call: &str,
        operation: &str,
    ) -> Result<()> {
        self.result_of(rc, call, operation, 0, true)
    }

    fn result_of(
        &self,
        rc: sys::CUresult,
        call: &str,
        operation: &str,
        bytes: usize,
        unsafe_call: bool,
    ) -> Result<()> {
        if rc == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        check(
            rc,
            CallSite {
                call,
                operation,
                bytes,
                mode: self.shared.captures.governing_mode(),
                unsafe_call,
            },
        )
    }

    /// The capture status of `stream` (`NONE` also when the query fails).
    pub(crate) fn capture_status(&self, stream: sys::CUstream) -> sys::CUstreamCaptureStatus {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: live stream, local out-parameter.
        let rc = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
        if rc == sys::CUresult::CUDA_SUCCESS {
            status
        } else {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        }
    }

    /// The id of the capture `stream` belongs to, if one is active on it.
    pub(crate) fn capture_id(&self, stream: sys::CUstream) -> Option<u64> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0;
        // SAFETY: only the two out-parameters are requested; the others may be null.
        let rc = unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream,
                &mut status,
                &mut id,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        (rc == sys::CUresult::CUDA_SUCCESS
            && status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE)
            .then_some(id)
    }

    fn own_buffer(&self, buf: &CudaBuffer) -> Result<()> {
        if buf.instance == self.shared.instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "buffer" })
        }
    }

    fn own_stream(&self, stream: &CudaStreamHandle) -> Result<()> {
        if stream.instance == self.shared.instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "stream" })
        }
    }

    fn own_event(&self, event: &CudaEventHandle) -> Result<()> {
        if event.instance == self.shared.instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "event" })
        }
    }

    /// The current stream with the context bound to this thread: where ops go.
    fn op_stream(&self) -> Result<sys::CUstream> {
        self.bind()?;
        Ok(self.current_cu_stream())
    }

    fn launch_unary(
        &self,
        op: &'static str,
        f: sys::CUfunction,
        x: &CudaBuffer,
        c: f32,
    ) -> Result<()> {
        self.own_buffer(x)?;
        let stream = self.op_stream()?;
        let mut ptr = x.device_ptr();
        let mut c = c;
        let mut n = x.len as u64;
        let mut args = [
            (&mut ptr as *mut u64).cast::<c_void>(),
            (&mut c as *mut f32).cast::<c_void>(),
            (&mut n as *mut u64).cast::<c_void>(),
        ];
        // SAFETY: the arguments match `(u64 x, f32 c, u64 n)` and `x` holds `n` elements.
        let rc = unsafe { kernels::launch(f, x.len, stream, &mut args) };
        self.result(rc, "cuLaunchKernel", op, 0)
    }
}

/// Launches each kernel once on an empty range so the module is fully loaded before any
/// capture (lazy loading inside a capture is an implicit synchronization).
fn warm_up(kernels: &Kernels) -> Result<()> {
    let mut zero_ptr = 0u64;
    let mut zero_f = 0f32;
    let mut zero_n = 0u64;
    for f in [kernels.add_scalar, kernels.scale] {
        let mut args = [
            (&mut zero_ptr as *mut u64).cast::<c_void>(),
            (&mut zero_f as *mut f32).cast::<c_void>(),
            (&mut zero_n as *mut u64).cast::<c_void>(),
        ];
        // SAFETY: n = 0, so no thread touches memory.
        let rc = unsafe { kernels::launch(f, 0, ptr::null_mut(), &mut args) };
        crate::driver_error::check_call(rc, "cuLaunchKernel")?;
    }
    let mut zero_x = 0u64;
    let mut args = [
        (&mut zero_ptr as *mut u64).cast::<c_void>(),
        (&mut zero_f as *mut f32).cast::<c_void>(),
        (&mut zero_x as *mut u64).cast::<c_void>(),
        (&mut zero_n as *mut u64).cast::<c_void>(),
    ];
    // SAFETY: n = 0, so no thread touches memory.
    let rc = unsafe { kernels::launch(kernels.axpy, 0, ptr::null_mut(), &mut args) };
    crate::driver_error::check_call(rc, "cuLaunchKernel")?;
    // SAFETY: plain device synchronisation outside any capture.
    let rc = unsafe { sys::cuCtxSynchronize() };
    crate::driver_error::check_call(rc, "cuCtxSynchronize")
}

/// Runs `f` with this thread's capture mode relaxed, as PyTorch's caching allocator does for
/// allocations into a graph's pool during capture (the allocation is not part of the graph).
pub(crate) fn with_relaxed_capture_mode<T>(f: impl FnOnce() -> T) -> T {
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: exchanges this thread's mode with a local; restored below.
    let rc = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    let out = f();
    if rc == sys::CUresult::CUDA_SUCCESS {
        // SAFETY: puts the previous mode back.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
    out
}

/// Host function of an eager callback: runs it once and frees it.
unsafe extern "C" fn run_host_callback_once(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostCallback>` leaked by `host_callback` for this one call.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    if panic::catch_unwind(AssertUnwindSafe(|| (**callback)())).is_err() {
        tracing::error!("a host callback panicked; the panic was contained");
    }
}

/// Host function of a captured callback: runs it; the graph owns it and frees it at reset.
unsafe extern "C" fn run_host_callback_kept(data: *mut c_void) {
    // SAFETY: `data` points to a `HostCallback` kept alive by the graph that launches it.
    let callback = unsafe { &*data.cast::<HostCallback>() };
    if panic::catch_unwind(AssertUnwindSafe(|| callback())).is_err() {
        tracing::error!("a host callback panicked; the panic was contained");
    }
}

impl Backend for CudaBackend {
    type Stream = CudaStreamHandle;
    type Event = CudaEventHandle;
    type Buffer = CudaBuffer;
    type Graph = Graph<CudaGraphImpl>;

    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn instance_id(&self) -> u64 {
        self.shared.instance
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            device_name: self.shared.device_name.clone(),
            native_graphs: true,
            host_callbacks: true,
            multi_stream_capture: true,
            uncapturable_default_stream: true,
            capture_modes_enforced: true,
            graph_upload: true,
            native_work_capture: true,
        }
    }

    fn default_stream(&self) -> CudaStreamHandle {
        self.shared.current.default_stream().clone()
    }

    fn new_stream(&self) -> Result<CudaStreamHandle> {
        let stream = self
            .shared
            .ctx
            .new_stream()
            .map_err(|e| from_cudarc(e, "cuStreamCreate"))?;
        Ok(CudaStreamHandle {
            stream,
            instance: self.shared.instance,
        })
    }

    fn current_stream(&self) -> CudaStreamHandle {
        self.shared.current.get()
    }

    fn set_current_stream(&self, stream: &CudaStreamHandle) -> CudaStreamHandle {
        // The slot keeps the stream alive while it is current, so the raw copy stays valid.
        CURRENT_RAW.with(|c| c.set((self.shared.instance, stream.cu_stream() as usize)));
        self.shared.current.set(stream.clone())
    }

    fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: plain driver call.
        let rc = unsafe { sys::cuCtxSynchronize() };
        self.unsafe_result(rc, "cuCtxSynchronize", "synchronize")
    }

    fn stream_synchronize(&self, stream: &CudaStreamHandle) -> Result<()> {
        self.own_stream(stream)?;
        self.bind()?;
        // SAFETY: the stream is alive (the handle holds it).
        let rc = unsafe { sys::cuStreamSynchronize(stream.cu_stream()) };
        self.unsafe_result(rc, "cuStreamSynchronize", "stream_synchronize")
    }

    fn is_capturing(&self, stream: &CudaStreamHandle) -> Result<bool> {
        self.own_stream(stream)?;
        self.bind()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is alive; `status` is a local out-parameter.
        let rc = unsafe { sys::cuStreamIsCapturing(stream.cu_stream(), &mut status) };
        self.result(rc, "cuStreamIsCapturing", "is_capturing", 0)?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    fn new_event(&self) -> Result<CudaEventHandle> {
        let event = self
            .shared
            .ctx
            .new_event(None)
            .map_err(|e| from_cudarc(e, "cuEventCreate"))?;
        Ok(CudaEventHandle {
            event,
            instance: self.shared.instance,
        })
    }

    fn record_event(&self, event: &CudaEventHandle) -> Result<()> {
        self.own_event(event)?;
        let stream = self.op_stream()?;
        // SAFETY: event and stream are alive.
        let rc = unsafe { sys::cuEventRecord(event.cu_event(), stream) };
        self.result(rc, "cuEventRecord", "record_event", 0)
    }

    fn wait_event(&self, event: &CudaEventHandle) -> Result<()> {
        self.own_event(event)?;
        let stream = self.op_stream()?;
        // SAFETY: event and stream are alive.
        let rc = unsafe { sys::cuStreamWaitEvent(stream, event.cu_event(), 0) };
        self.result(rc, "cuStreamWaitEvent", "wait_event", 0)
    }

    fn event_synchronize(&self, event: &CudaEventHandle) -> Result<()> {
        self.own_event(event)?;
        self.bind()?;
        // SAFETY: the event is alive.
        let rc = unsafe { sys::cuEventSynchronize(event.cu_event()) };
        self.unsafe_result(rc, "cuEventSynchronize", "event_synchronize")
    }

    fn alloc(&self, len: usize) -> Result<CudaBuffer> {
        let stream = self.op_stream()?;
        let bytes = len
            .checked_mul(std::mem::size_of::<f32>())
            .ok_or(GraphError::OutOfMemory {
                backend: BACKEND,
                requested_bytes: usize::MAX,
            })?;
        let pools = &self.shared.pools;
        let pool = self
            .capture_id(stream)
            .and_then(|id| self.shared.captures.pool_of(id));
        let allocation = match pool {
            Some(pool) => with_relaxed_capture_mode(|| pools.alloc_in(pool, bytes))?,
            None => {
                set_mode_hint(self.shared.captures.governing_mode());
                pools.alloc_plain(bytes)?
            }
        };
        Ok(CudaBuffer::new(
            pools,
            allocation,
            len,
            self.shared.instance,
        ))
    }

    fn upload(&self, dst: &CudaBuffer, src: &[f32]) -> Result<()> {
        self.own_buffer(dst)?;
        if src.len() != dst.len {
            return Err(GraphError::LengthMismatch {
                op: "upload",
                expected: dst.len,
                got: src.len(),
            });
        }
        let stream = self.op_stream()?;
        let bytes = dst.num_bytes();
        // SAFETY: `src` holds `bytes` bytes and outlives the synchronisation below.
        let rc = unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst.device_ptr(), src.as_ptr().cast(), bytes, stream)
        };
        self.unsafe_result(rc, "cuMemcpyHtoDAsync", "upload")?;
        // SAFETY: plain driver call on a live stream.
        let rc = unsafe { sys::cuStreamSynchronize(stream) };
        self.unsafe_result(rc, "cuStreamSynchronize", "upload")
    }

    fn download(&self, src: &CudaBuffer) -> Result<Vec<f32>> {
        self.own_buffer(src)?;
        let stream = self.op_stream()?;
        let mut out = vec![0f32; src.len];
        // SAFETY: `out` holds `num_bytes` bytes and outlives the synchronisation below.
        let rc = unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                out.as_mut_ptr().cast(),
                src.device_ptr(),
                src.num_bytes(),
                stream,
            )
        };
        self.unsafe_result(rc, "cuMemcpyDtoHAsync", "download")?;
        // SAFETY: plain driver call on a live stream.
        let rc = unsafe { sys::cuStreamSynchronize(stream) };
        self.unsafe_result(rc, "cuStreamSynchronize", "download")?;
        Ok(out)
    }

    fn memory_stats(&self) -> MemoryStats {
        self.shared.pools.stats()
    }

    fn fill(&self, x: &CudaBuffer, value: f32) -> Result<()> {
        self.own_buffer(x)?;
        let stream = self.op_stream()?;
        // SAFETY: `x` holds `len` 32-bit elements.
        let rc = unsafe { sys::cuMemsetD32Async(x.device_ptr(), value.to_bits(), x.len, stream) };
        self.result(rc, "cuMemsetD32Async", "fill", 0)
    }

    fn copy(&self, dst: &CudaBuffer, src: &CudaBuffer) -> Result<()> {
        self.own_buffer(dst)?;
        self.own_buffer(src)?;
        if dst.len != src.len {
            return Err(GraphError::LengthMismatch {
                op: "copy",
                expected: dst.len,
                got: src.len,
            });
        }
        let stream = self.op_stream()?;
        // SAFETY: both buffers hold `num_bytes` bytes.
        let rc = unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst.device_ptr(), src.device_ptr(), dst.num_bytes(), stream)
        };
        self.result(rc, "cuMemcpyDtoDAsync", "copy", 0)
    }

    fn add_scalar(&self, x: &CudaBuffer, c: f32) -> Result<()> {
        self.launch_unary("add_scalar", self.shared.kernels.add_scalar, x, c)
    }

    fn scale(&self, x: &CudaBuffer, a: f32) -> Result<()> {
        self.launch_unary("scale", self.shared.kernels.scale, x, a)
    }

    fn axpy(&self, y: &CudaBuffer, a: f32, x: &CudaBuffer) -> Result<()> {
        self.own_buffer(y)?;
        self.own_buffer(x)?;
        if y.len != x.len {
            return Err(GraphError::LengthMismatch {
                op: "axpy",
                expected: y.len,
                got: x.len,
            });
        }
        let stream = self.op_stream()?;
        let mut yp = y.device_ptr();
        let mut a = a;
        let mut xp = x.device_ptr();
        let mut n = y.len as u64;
        let mut args = [
            (&mut yp as *mut u64).cast::<c_void>(),
            (&mut a as *mut f32).cast::<c_void>(),
            (&mut xp as *mut u64).cast::<c_void>(),
            (&mut n as *mut u64).cast::<c_void>(),
        ];
        // SAFETY: arguments match `(u64 y, f32 a, u64 x, u64 n)`; both buffers hold n elements.
        let rc = unsafe { kernels::launch(self.shared.kernels.axpy, y.len, stream, &mut args) };
        self.result(rc, "cuLaunchKernel", "axpy", 0)
    }

    fn host_callback(&self, f: HostCallback) -> Result<()> {
        let stream = self.op_stream()?;
        let boxed: Box<HostCallback> = Box::new(f);
        match self.capture_id(stream) {
            Some(id) => {
                let data = (&*boxed as *const HostCallback).cast_mut().cast::<c_void>();
                if !self.shared.captures.keep_callback(id, boxed) {
                    return Err(GraphError::Unsupported {
                        what: "host_callback on a stream captured by a capture not begun \
                               through accel-graph (nothing would own the callback)"
                            .to_owned(),
                    });
                }
                // SAFETY: `data` stays alive in the capture's entry, then in the graph, for as
                // long as the host node can run.
                let rc =
                    unsafe { sys::cuLaunchHostFunc(stream, Some(run_host_callback_kept), data) };
                self.result(rc, "cuLaunchHostFunc", "host_callback", 0)
            }
            None => {
                let data = Box::into_raw(boxed).cast::<c_void>();
                // SAFETY: ownership of `data` passes to the host function, which frees it.
                let rc =
                    unsafe { sys::cuLaunchHostFunc(stream, Some(run_host_callback_once), data) };
                if rc != sys::CUresult::CUDA_SUCCESS {
                    // SAFETY: the launch failed, so the host function never runs; free it here.
                    drop(unsafe { Box::from_raw(data.cast::<HostCallback>()) });
                }
                self.result(rc, "cuLaunchHostFunc", "host_callback", 0)
            }
        }
    }

    fn graph(&self, options: GraphOptions) -> Result<Graph<CudaGraphImpl>> {
        Graph::new(CudaGraphImpl::new(self.clone()), options)
    }

    fn graph_pool_handle(&self) -> PoolId {
        PoolId::new_user()
    }
}
