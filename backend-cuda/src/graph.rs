//! CUDA graphs: the captured `CUgraph`, the executable `CUgraphExec`, and what is read from
//! them (node count, topology, DOT dump).

use std::{ffi::CString, path::Path, ptr};

use accel_graph_api::{GraphError, GraphTopology};
use accel_graph_driver::{DriverError, DriverResult, api::DriverGraphs};
use cudarc::driver::sys;

use crate::{CuStream, CudaDevice, error::check, topology::read_topology};

/// Flags every executable graph is instantiated with, as PyTorch does: free graph-owned
/// allocations on relaunch, and honour per-node priorities.
pub const INSTANTIATE_FLAGS: u64 =
    sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64
        | sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0 as u64;

/// Runs `f` with this thread's capture mode relaxed: destroying one graph while another
/// captures (same thread, global mode) must not disturb that capture.
fn relaxed<T>(f: impl FnOnce() -> T) -> T {
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

/// A captured graph (what [`accel_graph_api::Graph::raw_graph`] returns on CUDA): destroyed
/// on drop.
pub struct CuGraph {
    graph: sys::CUgraph,
}

// SAFETY: a CUgraph is a driver handle usable from any thread; the driver layer uses a graph
// from one thread at a time (`&mut` access through its graph object).
unsafe impl Send for CuGraph {}

impl CuGraph {
    pub(crate) fn from_raw(graph: sys::CUgraph) -> Self {
        CuGraph { graph }
    }

    /// The raw `CUgraph`, for inspection or edits before (re-)instantiation. Do not destroy
    /// it.
    pub fn cu_graph(&self) -> sys::CUgraph {
        self.graph
    }
}

impl Drop for CuGraph {
    fn drop(&mut self) {
        if !self.graph.is_null() {
            let graph = self.graph;
            // SAFETY: the graph came from `cuStreamEndCapture` and is destroyed once.
            let _ = relaxed(|| unsafe { sys::cuGraphDestroy(graph) });
        }
    }
}

/// An executable graph (what [`accel_graph_api::Graph::executable`] returns on CUDA):
/// destroyed on drop (the driver defers the destruction past launches still running).
pub struct CuGraphExec {
    exec: sys::CUgraphExec,
}

// SAFETY: as for `CuGraph`.
unsafe impl Send for CuGraphExec {}

impl CuGraphExec {
    /// The raw `CUgraphExec`, e.g. for `cuGraphExecUpdate`. Do not destroy it.
    pub fn cu_graph_exec(&self) -> sys::CUgraphExec {
        self.exec
    }
}

impl Drop for CuGraphExec {
    fn drop(&mut self) {
        let exec = self.exec;
        // SAFETY: made by `instantiate` and destroyed once.
        let _ = relaxed(|| unsafe { sys::cuGraphExecDestroy(exec) });
    }
}

impl DriverGraphs for CudaDevice {
    type Exec = CuGraphExec;

    fn instantiate(&self, graph: &CuGraph) -> DriverResult<CuGraphExec> {
        let mut exec = ptr::null_mut();
        // SAFETY: the graph is alive; `exec` is a local out-parameter.
        let rc =
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph.graph, INSTANTIATE_FLAGS) };
        check(rc, "cuGraphInstantiateWithFlags")?;
        Ok(CuGraphExec { exec })
    }

    fn upload_exec(&self, exec: &CuGraphExec, stream: &CuStream) -> DriverResult<()> {
        // SAFETY: uploads a live executable in the stream's order.
        check(
            unsafe { sys::cuGraphUpload(exec.exec, stream.cu_stream()) },
            "cuGraphUpload",
        )
    }

    #[inline]
    unsafe fn launch_exec(&self, exec: &CuGraphExec, stream: &CuStream) -> DriverResult<()> {
        // SAFETY: live executable and stream.
        check(
            unsafe { sys::cuGraphLaunch(exec.exec, stream.cu_stream()) },
            "cuGraphLaunch",
        )
    }

    fn node_count(&self, graph: &CuGraph) -> DriverResult<usize> {
        let mut count = 0usize;
        // SAFETY: counting query on a live graph.
        let rc = unsafe { sys::cuGraphGetNodes(graph.graph, ptr::null_mut(), &mut count) };
        check(rc, "cuGraphGetNodes")?;
        Ok(count)
    }

    fn topology(&self, graph: &CuGraph) -> DriverResult<GraphTopology> {
        read_topology(graph.graph)
    }

    fn dot_dump(&self, graph: &CuGraph, path: &Path) -> Option<DriverResult<()>> {
        let cpath = path
            .to_str()
            .and_then(|text| CString::new(text).ok())
            .ok_or_else(|| {
                DriverError::Api(GraphError::io(
                    path,
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "debug_dump path is not valid UTF-8 or holds a NUL byte",
                    ),
                ))
            });
        Some(cpath.and_then(|cpath| {
            // SAFETY: live graph; `cpath` outlives the call.
            check(
                unsafe {
                    sys::cuGraphDebugDotPrint(
                        graph.graph,
                        cpath.as_ptr(),
                        sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32,
                    )
                },
                "cuGraphDebugDotPrint",
            )
        }))
    }
}
