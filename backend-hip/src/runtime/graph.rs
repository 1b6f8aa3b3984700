//! `HipGraphImpl`: stream capture into a `hipGraph_t`, instantiation, launch, introspection.

use std::{
    collections::HashMap,
    ffi::{CString, c_int},
    path::Path,
    sync::{Arc, Mutex},
};

use accel_graph_api::{
    CaptureErrorMode, GraphError, GraphImpl, GraphTopology, PoolId, Result,
    pools::{MemoryPools, PoolHold},
};

use super::{
    captures::{ActiveCapture, KeepAlive},
    device::Device,
    error::{self, BACKEND},
    ffi::{self, Handle},
    memory::{HipAllocator, RelaxedCaptureMode},
    node_kind,
    stream::HipStream,
};

/// A capture this graph is running.
struct Session {
    stream: HipStream,
    capture: ActiveCapture,
}

/// The HIP half of a graph; use it through [`crate::HipGraph`] (`accel_graph_api::Graph<_>`).
pub struct HipGraphImpl {
    device: Arc<Device>,
    session: Option<Session>,
    raw: Option<Handle<ffi::ihipGraph>>,
    exec: Option<Handle<ffi::hipGraphExec>>,
    pool: Option<PoolHold<HipAllocator>>,
    keep_alive: KeepAlive,
}

fn hip_mode(mode: CaptureErrorMode) -> ffi::hipStreamCaptureMode {
    use ffi::hipStreamCaptureMode::*;
    match mode.resolved() {
        CaptureErrorMode::ThreadLocal => hipStreamCaptureModeThreadLocal,
        CaptureErrorMode::Relaxed => hipStreamCaptureModeRelaxed,
        CaptureErrorMode::Global | CaptureErrorMode::Default => hipStreamCaptureModeGlobal,
    }
}

impl HipGraphImpl {
    pub(crate) fn new(device: Arc<Device>) -> Self {
        HipGraphImpl {
            device,
            session: None,
            raw: None,
            exec: None,
            pool: None,
            keep_alive: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The raw `hipGraph_t`, while one exists (use through `Graph::raw_graph_impl`).
    pub fn raw_hip_graph(&self) -> Option<ffi::hipGraph_t> {
        self.raw.map(|h| h.0)
    }

    /// The executable `hipGraphExec_t`, once instantiated.
    pub fn raw_hip_graph_exec(&self) -> Option<ffi::hipGraphExec_t> {
        self.exec.map(|h| h.0)
    }

    fn destroy_graph(graph: ffi::hipGraph_t) {
        if graph.is_null() {
            return;
        }
        // SAFETY: the graph came from hipStreamEndCapture and is destroyed once.
        let err = unsafe { ffi::hipGraphDestroy(graph) };
        if !error::is_success(err) {
            tracing::warn!(error = %error::name_of(err), "hipGraphDestroy failed");
        }
    }

    /// Ends the runtime capture of `session`, whatever the outcome, and unregisters it.
    /// Returns the runtime's result, the graph (if any) and the backend's invalidation reason.
    fn finish(&self, session: &Session) -> (ffi::hipError_t, ffi::hipGraph_t, Option<String>) {
        let mut graph = std::ptr::null_mut();
        // SAFETY: the stream is ours and capturing.
        let err = unsafe { ffi::hipStreamEndCapture(session.stream.raw(), &mut graph) };
        let invalidated = self.device.captures.end(session.capture.runtime_id);
        self.device.pools.raw().flush_deferred();
        (err, graph, invalidated)
    }

    /// Ends a capture in progress and drops what it produced (reset, drop).
    fn abort_capture(&mut self) {
        if let Some(session) = self.session.take() {
            let (err, graph, _) = self.finish(&session);
            if !error::is_success(err)
                && error::code_of(err)
                    == error::code_of(ffi::hipError_t::hipErrorStreamCaptureWrongThread)
            {
                tracing::warn!(
                    "a capture was dropped from another thread than the one that began it; its \
                     stream stays capturing until that thread ends it"
                );
            }
            Self::destroy_graph(graph);
            // SAFETY: clears the calling thread's last error left by the aborted capture.
            unsafe { ffi::hipGetLastError() };
        }
    }

    fn check(&self, err: ffi::hipError_t, operation: &str) -> Result<()> {
        self.device.check(err, operation)
    }
}

impl GraphImpl for HipGraphImpl {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn capture_begin(&mut self, pool: PoolId, mode: CaptureErrorMode) -> Result<()> {
        self.device.bind()?;
        let stream = self.device.current_stream()?;
        if stream.is_default() {
            return Err(GraphError::StreamNotCapturable);
        }
        let hold = MemoryPools::hold(&self.device.pools, pool);
        // SAFETY: valid, non-null stream of ours.
        let err = unsafe { ffi::hipStreamBeginCapture(stream.raw(), hip_mode(mode)) };
        self.check(err, "capture_begin (hipStreamBeginCapture)")?;
        let runtime_id = match self.device.capture_id(&stream) {
            Ok(Some(id)) => id,
            other => {
                let mut graph = std::ptr::null_mut();
                // SAFETY: undoes the capture begun above.
                unsafe { ffi::hipStreamEndCapture(stream.raw(), &mut graph) };
                Self::destroy_graph(graph);
                return Err(other.err().unwrap_or_else(|| GraphError::Driver {
                    backend: BACKEND,
                    code: 0,
                    name: "hipStreamGetCaptureInfo".to_owned(),
                    message: "the stream reports no capture right after hipStreamBeginCapture"
                        .to_owned(),
                }));
            }
        };
        self.keep_alive = Arc::new(Mutex::new(Vec::new()));
        let capture =
            self.device
                .captures
                .begin(runtime_id, pool, mode, Arc::clone(&self.keep_alive));
        self.session = Some(Session { stream, capture });
        self.pool = Some(hold);
        Ok(())
    }

    fn capture_end(&mut self) -> Result<usize> {
        let Some(session) = self.session.as_ref() else {
            return Err(GraphError::NotCapturing);
        };
        if self.device.current_stream()? != session.stream {
            return Err(GraphError::CaptureStreamMismatch);
        }
        self.device.captures.check_end(&session.capture)?;
        // Refuse here as the runtime would: a wrong thread keeps the capture going.
        let session = self.session.take().expect("checked above");
        let (err, graph, invalidated) = self.finish(&session);
        if error::code_of(err) == error::code_of(ffi::hipError_t::hipErrorStreamCaptureWrongThread)
        {
            // The runtime kept the capture: register it again and let the caller retry.
            let capture = self.device.captures.begin(
                session.capture.runtime_id,
                session.capture.pool,
                session.capture.mode,
                Arc::clone(&session.capture.keep_alive),
            );
            self.session = Some(Session {
                stream: session.stream,
                capture,
            });
            return Err(GraphError::WrongThread);
        }
        if let Some(reason) = invalidated {
            Self::destroy_graph(graph);
            return Err(GraphError::CaptureInvalidated { reason });
        }
        if !error::is_success(err) {
            Self::destroy_graph(graph);
            return Err(self
                .device
                .error(err, "capture_end (hipStreamEndCapture)", 0));
        }
        self.raw = Some(Handle(graph));
        let mut count = 0usize;
        // SAFETY: valid graph; a null node array asks for the count only.
        let err = unsafe { ffi::hipGraphGetNodes(graph, std::ptr::null_mut(), &mut count) };
        self.check(err, "hipGraphGetNodes")?;
        Ok(count)
    }

    fn instantiate(&mut self) -> Result<()> {
        self.device.bind()?;
        let raw = self.raw.ok_or(GraphError::RawGraphUnavailable)?;
        let mut exec = std::ptr::null_mut();
        {
            // Instantiation is no stream work: another graph's capture in progress must neither
            // forbid it nor be disturbed by it.
            let _relaxed = RelaxedCaptureMode::enter()?;
            // SAFETY: valid graph, valid out-pointer; flags 0.
            let err = unsafe { ffi::hipGraphInstantiateWithFlags(&mut exec, raw.0, 0) };
            self.check(err, "instantiate (hipGraphInstantiateWithFlags)")?;
        }
        if let Some(old) = self.exec.replace(Handle(exec)) {
            // SAFETY: the previous executable is replaced and destroyed once.
            unsafe { ffi::hipGraphExecDestroy(old.0) };
        }
        // Upload ahead of the first launch, on the current stream, while no capture runs (an
        // upload is stream work a capture could take for its own; the first launch uploads
        // otherwise).
        if let Some(upload) = ffi::optional().graph_upload
            && !self.device.captures.any_active()
        {
            let stream = self.device.current_stream()?;
            // SAFETY: valid executable graph and stream; the signature was checked at lookup.
            let err = unsafe { upload(exec, stream.raw()) };
            self.check(err, "instantiate (hipGraphUpload)")?;
        }
        Ok(())
    }

    fn replay(&mut self) -> Result<()> {
        self.device.bind()?;
        let exec = self.exec.ok_or(GraphError::NotCaptured {
            operation: "replay",
        })?;
        let stream = self.device.current_stream()?;
        // SAFETY: valid executable graph and stream.
        let err = unsafe { ffi::hipGraphLaunch(exec.0, stream.raw()) };
        self.check(err, "replay (hipGraphLaunch)")
    }

    fn drop_raw_graph(&mut self) {
        if let Some(raw) = self.raw.take() {
            Self::destroy_graph(raw.0);
        }
    }

    fn reset(&mut self) {
        self.abort_capture();
        self.drop_raw_graph();
        if let Some(exec) = self.exec.take() {
            // SAFETY: the executable graph is destroyed once; the runtime defers the release
            // of a launch still in flight.
            unsafe { ffi::hipGraphExecDestroy(exec.0) };
        }
        // A launch in flight may still call the host callbacks: they go when the device is
        // next synchronized.
        let callbacks = std::mem::replace(&mut self.keep_alive, Arc::new(Mutex::new(Vec::new())));
        if !callbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            self.device
                .retired_callbacks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(callbacks);
        }
        self.pool = None;
    }

    fn debug_dump(&self, path: &Path) -> Result<()> {
        let raw = self.raw.ok_or(GraphError::RawGraphUnavailable)?;
        if let Some(dot_print) = ffi::optional().graph_debug_dot_print {
            let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
                GraphError::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "debug_dump path contains a NUL byte",
                ))
            })?;
            // SAFETY: valid graph and NUL-terminated path; flag 1 = verbose (same in HIP and CUDA).
            let err = unsafe { dot_print(raw.0, c_path.as_ptr(), 1) };
            return self.check(err, "debug_dump (hipGraphDebugDotPrint)");
        }
        accel_graph_api::write_topology_dot(self, path)
    }

    fn topology(&self) -> Result<GraphTopology> {
        let raw = self.raw.ok_or(GraphError::RawGraphUnavailable)?;
        let mut count = 0usize;
        // SAFETY: valid graph; count query.
        let err = unsafe { ffi::hipGraphGetNodes(raw.0, std::ptr::null_mut(), &mut count) };
        self.check(err, "hipGraphGetNodes")?;
        let mut nodes = vec![std::ptr::null_mut(); count];
        // A second call with zero slots is refused by some runtimes (CUDA: invalid value).
        if count > 0 {
            // SAFETY: `nodes` holds `count` slots.
            let err = unsafe { ffi::hipGraphGetNodes(raw.0, nodes.as_mut_ptr(), &mut count) };
            self.check(err, "hipGraphGetNodes")?;
            nodes.truncate(count);
        }
        let mut topology = GraphTopology::default();
        let mut index = HashMap::new();
        for (i, &node) in nodes.iter().enumerate() {
            let mut kind: c_int = -1;
            // SAFETY: valid node of the graph, valid out-pointer.
            let err = unsafe { ffi::hipGraphNodeGetTypeRaw(node, &mut kind) };
            self.check(err, "hipGraphNodeGetType")?;
            let kind = node_kind::decode(kind, self.device.runtime_version);
            topology.add_node(
                kind,
                format!("{} node {i}", kind.to_string().to_lowercase()),
            );
            index.insert(node as usize, i);
        }
        let mut edges = 0usize;
        // SAFETY: valid graph; count query.
        let err = unsafe {
            ffi::hipGraphGetEdges(
                raw.0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut edges,
            )
        };
        self.check(err, "hipGraphGetEdges")?;
        if edges == 0 {
            return Ok(topology);
        }
        let mut from = vec![std::ptr::null_mut(); edges];
        let mut to = vec![std::ptr::null_mut(); edges];
        // SAFETY: both arrays hold `edges` slots.
        let err =
            unsafe { ffi::hipGraphGetEdges(raw.0, from.as_mut_ptr(), to.as_mut_ptr(), &mut edges) };
        self.check(err, "hipGraphGetEdges")?;
        for (a, b) in from.iter().zip(&to).take(edges) {
            if let (Some(&a), Some(&b)) = (index.get(&(*a as usize)), index.get(&(*b as usize))) {
                topology.add_edge(a, b);
            }
        }
        Ok(topology)
    }
}

impl Drop for HipGraphImpl {
    fn drop(&mut self) {
        self.reset();
    }
}

impl std::fmt::Debug for HipGraphImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipGraphImpl")
            .field("capturing", &self.session.is_some())
            .field("raw", &self.raw.map(|h| h.0))
            .field("exec", &self.exec.map(|h| h.0))
            .finish()
    }
}
