//! HIP graphs: the captured `hipGraph_t`, the executable `hipGraphExec_t`, and what is read
//! from them (node count, topology, DOT dump where the runtime has one).

use std::{ffi::CString, path::Path};

use accel_graph_api::{GraphError, GraphTopology};
use accel_graph_driver::{DriverError, DriverResult, api::DriverGraphs};

use crate::{
    HStream, HipDevice,
    capture::relaxed,
    error::{check, name_of},
    ffi,
    topology::read_topology,
};

/// A captured graph (what [`accel_graph_api::Graph::raw_graph`] returns on HIP): destroyed
/// on drop.
#[derive(Debug)]
pub struct HGraph {
    raw: ffi::hipGraph_t,
}

// SAFETY: a hipGraph_t is a runtime handle usable from any thread; the driver layer uses a
// graph from one thread at a time (`&mut` access through its graph object).
unsafe impl Send for HGraph {}

impl HGraph {
    pub(crate) fn from_raw(raw: ffi::hipGraph_t) -> Self {
        HGraph { raw }
    }

    /// The raw `hipGraph_t`, for inspection or edits before (re-)instantiation. Do not
    /// destroy it.
    pub fn raw(&self) -> ffi::hipGraph_t {
        self.raw
    }
}

impl Drop for HGraph {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let raw = self.raw;
        // SAFETY: the graph came from `hipStreamEndCapture` and is destroyed once.
        let err = relaxed(|| unsafe { ffi::hipGraphDestroy(raw) });
        if err != ffi::hipError_t::hipSuccess {
            tracing::warn!(error = %name_of(err), "hipGraphDestroy failed");
        }
    }
}

/// An executable graph (what [`accel_graph_api::Graph::executable`] returns on HIP):
/// destroyed on drop (the runtime defers the release past launches still running).
#[derive(Debug)]
pub struct HGraphExec {
    raw: ffi::hipGraphExec_t,
}

// SAFETY: as for `HGraph`.
unsafe impl Send for HGraphExec {}

impl HGraphExec {
    /// The raw `hipGraphExec_t`. Do not destroy it.
    pub fn raw(&self) -> ffi::hipGraphExec_t {
        self.raw
    }
}

impl Drop for HGraphExec {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: made by `instantiate` and destroyed once.
        let err = relaxed(|| unsafe { ffi::hipGraphExecDestroy(raw) });
        if err != ffi::hipError_t::hipSuccess {
            tracing::warn!(error = %name_of(err), "hipGraphExecDestroy failed");
        }
    }
}

impl DriverGraphs for HipDevice {
    type Exec = HGraphExec;

    fn instantiate(&self, graph: &HGraph) -> DriverResult<HGraphExec> {
        let mut raw = std::ptr::null_mut();
        // No flags: auto-free-on-launch would have nothing to free (the captured work
        // allocates nothing in stream order; its memory comes from the backend's pools).
        // SAFETY: the graph is alive; `raw` is a local out-parameter.
        let err = unsafe { ffi::hipGraphInstantiateWithFlags(&mut raw, graph.raw, 0) };
        check(err, "hipGraphInstantiateWithFlags")?;
        Ok(HGraphExec { raw })
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

    #[inline]
    unsafe fn launch_exec(&self, exec: &HGraphExec, stream: &HStream) -> DriverResult<()> {
        // SAFETY: live executable and stream.
        check(
            unsafe { ffi::hipGraphLaunch(exec.raw, stream.raw()) },
            "hipGraphLaunch",
        )
    }

    fn node_count(&self, graph: &HGraph) -> DriverResult<usize> {
        let mut count = 0usize;
        // SAFETY: counting query on a live graph (a null node array asks for the count only).
        let err = unsafe { ffi::hipGraphGetNodes(graph.raw, std::ptr::null_mut(), &mut count) };
        check(err, "hipGraphGetNodes")?;
        Ok(count)
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
