//! `CudaGraphImpl`: the CUDA half of a graph — native stream capture, instantiate, launch.

use std::{
    ffi::CString,
    path::Path,
    ptr,
    thread::{self, ThreadId},
};

use accel_graph_api::{
    Backend, CaptureErrorMode, GraphError, GraphImpl, GraphTopology, HostCallback, PoolId, Result,
    pools::{MemoryPools, PoolHold},
};
use cudarc::driver::sys;

use crate::{
    CudaBackend,
    backend::with_relaxed_capture_mode,
    driver_error::{BACKEND, check_call},
    memory::CudaAllocator,
    stream::CudaStreamHandle,
    topology::read_topology,
};

/// Flags every executable graph is instantiated with, as PyTorch does: free graph-owned
/// allocations on relaunch, and honour per-node priorities.
pub const INSTANTIATE_FLAGS: u64 =
    sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64
        | sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0 as u64;

/// A capture in progress.
struct ActiveCapture {
    stream: CudaStreamHandle,
    id: u64,
    thread: ThreadId,
    mode: CaptureErrorMode,
}

/// Raw driver handles of one graph.
struct Handles {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: CUgraph / CUgraphExec are driver handles usable from any thread (the driver
// serialises access); the graph object is used by one thread at a time (`&mut self`).
unsafe impl Send for Handles {}

/// The CUDA implementation behind `accel_graph_api::Graph<CudaGraphImpl>`.
pub struct CudaGraphImpl {
    backend: CudaBackend,
    capture: Option<ActiveCapture>,
    handles: Handles,
    hold: Option<PoolHold<CudaAllocator>>,
    /// Host callbacks captured as host nodes, alive as long as the graph can launch them.
    /// Boxed: host nodes hold a thin pointer to each.
    #[allow(clippy::vec_box)]
    callbacks: Vec<Box<HostCallback>>,
}

impl CudaGraphImpl {
    pub(crate) fn new(backend: CudaBackend) -> Self {
        CudaGraphImpl {
            backend,
            capture: None,
            handles: Handles {
                graph: ptr::null_mut(),
                exec: ptr::null_mut(),
            },
            hold: None,
            callbacks: Vec::new(),
        }
    }

    /// The raw `CUgraph` (reach it through `Graph::raw_graph_impl()`, which checks that one
    /// exists: `keep_graph` or debug mode, after `capture_end`).
    pub fn raw_cuda_graph(&self) -> sys::CUgraph {
        self.handles.graph
    }

    /// The executable `CUgraphExec` (null before instantiation).
    pub fn raw_cuda_graph_exec(&self) -> sys::CUgraphExec {
        self.handles.exec
    }

    /// The backend this graph belongs to.
    pub fn backend(&self) -> &CudaBackend {
        &self.backend
    }

    fn destroy_exec(&mut self) {
        if !self.handles.exec.is_null() {
            let exec = self.handles.exec;
            // SAFETY: the exec was made by `instantiate` and is destroyed once; the driver
            // defers the destruction past launches still running. Relaxed so that it cannot
            // disturb another graph's capture.
            let _ = with_relaxed_capture_mode(|| unsafe { sys::cuGraphExecDestroy(exec) });
            self.handles.exec = ptr::null_mut();
        }
    }

    fn destroy_graph(&mut self) {
        if !self.handles.graph.is_null() {
            let graph = self.handles.graph;
            // SAFETY: the graph came from `cuStreamEndCapture` and is destroyed once.
            let _ = with_relaxed_capture_mode(|| unsafe { sys::cuGraphDestroy(graph) });
            self.handles.graph = ptr::null_mut();
        }
    }

    /// Ends the registry entry of the capture, handing its callbacks to the graph and
    /// letting deferred frees run once no capture remains.
    fn finish_capture(&mut self, id: u64) {
        if let Some(entry) = self.backend.shared.captures.end(id) {
            self.callbacks.extend(entry.callbacks);
        }
        self.backend.shared.pools.raw().flush_deferred();
    }

    fn pools(&self) -> &std::sync::Arc<MemoryPools<CudaAllocator>> {
        &self.backend.shared.pools
    }
}

fn capture_mode(mode: CaptureErrorMode) -> sys::CUstreamCaptureMode {
    use sys::CUstreamCaptureMode as M;
    match mode.resolved() {
        CaptureErrorMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CaptureErrorMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        CaptureErrorMode::Global | CaptureErrorMode::Default => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
    }
}

impl GraphImpl for CudaGraphImpl {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn capture_begin(&mut self, pool: PoolId, mode: CaptureErrorMode) -> Result<()> {
        let stream = self.backend.current_stream();
        if stream.is_legacy_default() {
            return Err(GraphError::StreamNotCapturable);
        }
        self.backend.bind()?;
        // SAFETY: the stream is alive (the handle holds it).
        let rc = unsafe { sys::cuStreamBeginCapture_v2(stream.cu_stream(), capture_mode(mode)) };
        self.backend
            .result(rc, "cuStreamBeginCapture", "capture_begin", 0)?;
        let Some(id) = self.backend.capture_id(stream.cu_stream()) else {
            // Begun but not reported active: end it again so nothing stays capturing.
            let mut graph = ptr::null_mut();
            // SAFETY: ends the capture just begun on this thread.
            unsafe {
                sys::cuStreamEndCapture(stream.cu_stream(), &mut graph);
                if !graph.is_null() {
                    sys::cuGraphDestroy(graph);
                }
            }
            return Err(GraphError::CaptureInvalidated {
                reason: "the driver reported no active capture right after cuStreamBeginCapture"
                    .to_owned(),
            });
        };
        self.hold = Some(MemoryPools::hold(self.pools(), pool));
        self.backend
            .shared
            .captures
            .begin(id, pool, mode.resolved());
        self.capture = Some(ActiveCapture {
            stream,
            id,
            thread: thread::current().id(),
            mode: mode.resolved(),
        });
        Ok(())
    }

    fn capture_end(&mut self) -> Result<usize> {
        let Some(capture) = self.capture.as_ref() else {
            return Err(GraphError::NotCapturing);
        };
        if self.backend.current_stream() != capture.stream {
            return Err(GraphError::CaptureStreamMismatch);
        }
        // Checked here, before the driver: `cuStreamEndCapture` from another thread returns
        // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD *and terminates the capture*, while the API
        // promises that the capture goes on and can still be ended on its own thread.
        if capture.mode != CaptureErrorMode::Relaxed && capture.thread != thread::current().id() {
            return Err(GraphError::WrongThread);
        }
        self.backend.bind()?;
        let (stream, id) = (capture.stream.cu_stream(), capture.id);
        let mut graph = ptr::null_mut();
        // SAFETY: ends the capture on its own stream; `graph` is a local out-parameter.
        let rc = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
        self.capture = None;
        self.finish_capture(id);
        if rc == sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD {
            // Only reachable if the driver's notion of the thread differs from ours; the
            // driver has ended the capture, so it is over here too.
            if !graph.is_null() {
                // SAFETY: a graph returned alongside an error is ours to destroy.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            return Err(GraphError::CaptureInvalidated {
                reason: "the driver ended the capture with CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"
                    .to_owned(),
            });
        }
        if rc != sys::CUresult::CUDA_SUCCESS {
            if !graph.is_null() {
                // SAFETY: a graph returned alongside an error is ours to destroy.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            let err = self
                .backend
                .result(rc, "cuStreamEndCapture", "capture_end", 0)
                .err()
                .unwrap_or_else(|| crate::driver_error::driver(rc, "cuStreamEndCapture"));
            return Err(match err {
                GraphError::UnsafeDuringCapture { operation, .. } => {
                    GraphError::CaptureInvalidated { reason: operation }
                }
                e => e,
            });
        }
        self.handles.graph = graph;
        let mut count = 0usize;
        // SAFETY: counting query on the graph just captured.
        let rc = unsafe { sys::cuGraphGetNodes(graph, ptr::null_mut(), &mut count) };
        check_call(rc, "cuGraphGetNodes")?;
        Ok(count)
    }

    fn instantiate(&mut self) -> Result<()> {
        self.backend.bind()?;
        self.destroy_exec();
        let mut exec = ptr::null_mut();
        let graph = self.handles.graph;
        // Relaxed, like pool allocations: instantiating this graph while another graph
        // captures (same thread, global mode) must not invalidate that capture.
        // SAFETY: the raw graph exists (the front object checks); `exec` is a local.
        let rc = with_relaxed_capture_mode(|| unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, INSTANTIATE_FLAGS)
        });
        self.backend
            .result(rc, "cuGraphInstantiateWithFlags", "instantiate", 0)?;
        self.handles.exec = exec;
        let stream = self.backend.current_cu_stream();
        if self.backend.capture_status(stream)
            != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        {
            // An upload on a capturing stream would join that capture; the first launch
            // uploads instead.
            return Ok(());
        }
        // SAFETY: uploads the executable graph just made, in the current stream's order.
        let rc = unsafe { sys::cuGraphUpload(exec, stream) };
        self.backend.result(rc, "cuGraphUpload", "instantiate", 0)
    }

    fn replay(&mut self) -> Result<()> {
        self.backend.bind()?;
        let stream = self.backend.current_cu_stream();
        // SAFETY: the exec is instantiated (the front object checks) and the stream alive.
        let rc = unsafe { sys::cuGraphLaunch(self.handles.exec, stream) };
        self.backend.result(rc, "cuGraphLaunch", "replay", 0)
    }

    fn drop_raw_graph(&mut self) {
        let _ = self.backend.bind();
        self.destroy_graph();
    }

    fn reset(&mut self) {
        let _ = self.backend.bind();
        if let Some(capture) = self.capture.take() {
            let mut graph = ptr::null_mut();
            // SAFETY: ends (aborts) our capture. Errors are ignored: the capture is discarded
            // either way, and the driver terminates it even when it answers
            // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (reset from another thread).
            let _ = unsafe { sys::cuStreamEndCapture(capture.stream.cu_stream(), &mut graph) };
            if !graph.is_null() {
                // SAFETY: the aborted capture's graph is ours.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            self.finish_capture(capture.id);
        }
        self.destroy_exec();
        self.destroy_graph();
        if !self.callbacks.is_empty() {
            // Launched host nodes may still be queued and point at these callbacks: they are
            // dropped after a device synchronisation, which must wait while any capture runs.
            self.backend
                .shared
                .captures
                .retire_callbacks(std::mem::take(&mut self.callbacks));
        }
        self.hold = None;
        self.backend.shared.pools.raw().flush_deferred();
    }

    fn debug_dump(&self, path: &Path) -> Result<()> {
        let text = path.to_str().ok_or_else(|| {
            GraphError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "debug_dump path is not valid UTF-8",
            ))
        })?;
        let cpath = CString::new(text).map_err(|e| {
            GraphError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
        })?;
        self.backend.bind()?;
        // SAFETY: the raw graph exists (the front object checks); `cpath` outlives the call.
        let rc = unsafe {
            sys::cuGraphDebugDotPrint(
                self.handles.graph,
                cpath.as_ptr(),
                sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32,
            )
        };
        self.backend
            .result(rc, "cuGraphDebugDotPrint", "debug_dump", 0)
    }

    fn topology(&self) -> Result<GraphTopology> {
        self.backend.bind()?;
        read_topology(self.handles.graph)
    }
}

impl Drop for CudaGraphImpl {
    fn drop(&mut self) {
        // `Graph<_>` resets on drop already; this covers an impl dropped on its own.
        self.reset();
    }
}

impl std::fmt::Debug for CudaGraphImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraphImpl")
            .field("capturing", &self.capture.is_some())
            .field("graph", &self.handles.graph)
            .field("exec", &self.handles.exec)
            .finish()
    }
}
