//! HIP graphs: the captured `hipGraph_t`, the executable `hipGraphExec_t`, and what is read
//! from them (node count, topology, DOT dump where the runtime has one).

use std::{ffi::CString, path::Path};

use accel_graph_api::{GraphError, GraphTopology, InstantiateFlags};
use accel_graph_driver::{DriverError, DriverResult, api::DriverGraphs};

use crate::{HStream, HipDevice, capture::MODES, error::check, ffi, topology::read_topology};

accel_graph_driver::native_graph_types! {
    runtime: "HIP", succeeded: |err| err == ffi::hipError_t::hipSuccess, modes: MODES,
    graph: HGraph(ffi::hipGraph_t), raw, ffi::hipGraphDestroy;
    exec: HGraphExec(ffi::hipGraphExec_t), raw, ffi::hipGraphExecDestroy;
}

impl DriverGraphs for HipDevice {
    type Exec = HGraphExec;

    /// Auto-free-on-launch is passed: graph allocations (a user's `hipMallocAsync` on a
    /// capturing stream; the backend's own come from its pools) left unfreed by the last
    /// launch are freed by the next, as on CUDA. Node priorities hold without being passed
    /// (HIP 5.2 has none); device launch is refused by the driver layer.
    fn instantiate(&self, graph: &HGraph, flags: InstantiateFlags) -> DriverResult<HGraphExec> {
        let mut raw = std::ptr::null_mut();
        let native = if flags.auto_free_on_launch {
            ffi::GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH
        } else {
            0
        };
        // SAFETY: the graph is alive; `raw` is a local out-parameter.
        let err = unsafe { ffi::hipGraphInstantiateWithFlags(&mut raw, graph.raw, native) };
        check(err, "hipGraphInstantiateWithFlags")?;
        Ok(HGraphExec::from_raw(raw))
    }

    fn upload_exec(&self, exec: &HGraphExec, stream: &HStream) -> DriverResult<()> {
        // Without hipGraphUpload (ROCm 5.2) the first launch uploads.
        let Some(upload) = ffi::optional().graph_upload else {
            return Ok(());
        };
        // SAFETY: uploads a live executable in the stream's order; the signature was checked
        // at lookup.
        check(unsafe { upload(exec.raw, stream.raw()) }, "hipGraphUpload")
    }

    accel_graph_driver::native_launch_and_count! {
        HStream => raw, check; launch: ffi::hipGraphLaunch, nodes: ffi::hipGraphGetNodes;
    }

    fn topology(&self, graph: &HGraph) -> DriverResult<GraphTopology> {
        read_topology(graph.raw, self.runtime_version())
    }

    fn dot_dump(&self, graph: &HGraph, path: &Path) -> Option<DriverResult<()>> {
        // Without hipGraphDebugDotPrint (ROCm 5.2) the driver layer renders the topology.
        let dot_print = ffi::optional().graph_debug_dot_print?;
        let cpath = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            DriverError::Api(GraphError::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "debug_dump path holds a NUL byte",
                ),
            ))
        });
        Some(cpath.and_then(|cpath| {
            // SAFETY: live graph; `cpath` outlives the call; flag 1 is "verbose" (as in CUDA).
            check(
                unsafe { dot_print(graph.raw, cpath.as_ptr(), 1) },
                "hipGraphDebugDotPrint",
            )
        }))
    }
}
