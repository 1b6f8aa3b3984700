//! CUDA graphs: the captured `CUgraph`, the executable `CUgraphExec`, and what is read from
//! them (node count, topology, DOT dump).

use std::{ffi::CString, path::Path, ptr};

use accel_graph_api::{GraphError, GraphTopology, InstantiateFlags};
use accel_graph_driver::{DriverError, DriverResult, api::DriverGraphs};
use cudarc::driver::sys;

use crate::{CuStream, CudaDevice, capture::MODES, error::check, topology::read_topology};

/// The flags executable graphs are instantiated with by default, as PyTorch does: free
/// graph-owned allocations on relaunch, and honour per-node priorities
/// (`instantiate_flags(InstantiateFlags::default())`).
pub const INSTANTIATE_FLAGS: u64 =
    sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64
        | sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0 as u64;

/// CUDA's instantiate flags for `flags`.
///
/// ```
/// use accel_graph_api::InstantiateFlags;
/// use accel_graph_cuda::{INSTANTIATE_FLAGS, instantiate_flags};
/// assert_eq!(instantiate_flags(InstantiateFlags::default()), INSTANTIATE_FLAGS);
/// ```
pub fn instantiate_flags(flags: InstantiateFlags) -> u64 {
    use sys::CUgraphInstantiate_flags as F;
    let mut out = 0;
    if flags.auto_free_on_launch {
        out |= F::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64;
    }
    if flags.use_node_priority {
        out |= F::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0 as u64;
    }
    if flags.device_launch {
        out |= F::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64;
    }
    out
}

accel_graph_driver::native_graph_types! {
    runtime: "CUDA", succeeded: |rc| rc == sys::CUresult::CUDA_SUCCESS, modes: MODES,
    graph: CuGraph(sys::CUgraph), cu_graph, sys::cuGraphDestroy;
    exec: CuGraphExec(sys::CUgraphExec), cu_graph_exec, sys::cuGraphExecDestroy;
}

impl DriverGraphs for CudaDevice {
    type Exec = CuGraphExec;

    fn instantiate(&self, graph: &CuGraph, flags: InstantiateFlags) -> DriverResult<CuGraphExec> {
        let mut exec = ptr::null_mut();
        // SAFETY: the graph is alive; `exec` is a local out-parameter.
        let rc = unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph.raw, instantiate_flags(flags))
        };
        check(rc, "cuGraphInstantiateWithFlags")?;
        Ok(CuGraphExec::from_raw(exec))
    }

    fn upload_exec(&self, exec: &CuGraphExec, stream: &CuStream) -> DriverResult<()> {
        self.check_joined(stream)?;
        // SAFETY: uploads a live executable in the stream's order.
        check(
            unsafe { sys::cuGraphUpload(exec.raw, stream.cu_stream()) },
            "cuGraphUpload",
        )
    }

    // Written out rather than with `native_launch_and_count!` for the check of adopted
    // streams: a launch recorded into a capture the backend did not begin would put this
    // graph's memory into a graph that does not keep it alive.
    #[inline]
    unsafe fn launch_exec(&self, exec: &CuGraphExec, stream: &CuStream) -> DriverResult<()> {
        self.check_joined(stream)?;
        // SAFETY: live executable and stream (this method's contract: its captured memory is
        // alive).
        let status = unsafe { sys::cuGraphLaunch(exec.raw, stream.cu_stream()) };
        check(status, "cuGraphLaunch")
    }

    fn node_count(&self, graph: &CuGraph) -> DriverResult<usize> {
        let mut count = 0usize;
        // SAFETY: counting query on a live graph (a null node array asks for the count).
        let status = unsafe { sys::cuGraphGetNodes(graph.raw, ptr::null_mut(), &mut count) };
        check(status, "cuGraphGetNodes")?;
        Ok(count)
    }

    fn topology(&self, graph: &CuGraph) -> DriverResult<GraphTopology> {
        read_topology(graph.raw)
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
                        graph.raw,
                        cpath.as_ptr(),
                        sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32,
                    )
                },
                "cuGraphDebugDotPrint",
            )
        }))
    }
}
