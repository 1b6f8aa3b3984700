//! Graph editing on HIP: executables updated in place (`hipGraphExecUpdate` for a whole graph,
//! `hipGraphExec{Kernel,Memset,Memcpy}NodeSetParams` per node, the raw graph's node set
//! alongside) and child-graph nodes added to a capturing graph (`hipStreamGetCaptureInfo_v2`,
//! `hipGraphAddChildGraphNode`, `hipStreamUpdateCaptureDependencies`), all in ROCm 5.2.
//!
//! HIP has no conditional graph nodes: `conditional_support` says so, and the driver layer
//! answers `if_then`, `if_else` and `while_loop` on a capturing stream with `Unsupported`
//! (eagerly they still run, the condition read back on the host).

use std::{
    ffi::{c_int, c_void},
    ptr,
};

use accel_graph_api::{
    CaptureErrorMode, ConditionalKind, GraphError, PortableOp, UpdateConflict, kernel::Kernel,
};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, CapturePoint, DriverEditing, RawArg, Region},
    native::ElementArgs,
};

use crate::{HBlock, HGraph, HGraphExec, HStream, HipDevice, error::check, ffi};

/// A node of a HIP graph (a `hipGraphNode_t`), as the driver layer names captured nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HNode(ffi::hipGraphNode_t);

// SAFETY: a node handle is an opaque name; the driver layer uses it only with `&mut` access
// to the graph it belongs to, from one thread at a time.
unsafe impl Send for HNode {}
// SAFETY: as above; never written through.
unsafe impl Sync for HNode {}

impl HNode {
    /// The raw handle.
    pub fn raw(self) -> ffi::hipGraphNode_t {
        self.0
    }
}

/// No conditional node is ever built on HIP (the type has no value).
#[derive(Debug)]
pub enum HNoConditional {}

/// Why conditional nodes are missing.
const NO_CONDITIONALS: &str =
    "HIP has no conditional graph nodes (ROCm graphs cannot branch or loop on the device)";

/// A capturing stream's graph and frontier.
struct CaptureInfo {
    graph: ffi::hipGraph_t,
    nodes: *const ffi::hipGraphNode_t,
    count: usize,
}

/// The capture `stream` takes part in: `None` when it does not capture.
fn capture_info(stream: ffi::hipStream_t) -> DriverResult<Option<CaptureInfo>> {
    let mut status: c_int = 0;
    let mut id = 0;
    let mut info = CaptureInfo {
        graph: ptr::null_mut(),
        nodes: ptr::null(),
        count: 0,
    };
    // SAFETY: every out-parameter is a local (the status read as a plain int).
    let err = unsafe {
        ffi::hipStreamGetCaptureInfoV2Raw(
            stream,
            &mut status,
            &mut id,
            &mut info.graph,
            &mut info.nodes,
            &mut info.count,
        )
    };
    check(err, "hipStreamGetCaptureInfo_v2")?;
    // hipStreamCaptureStatusActive is 1. Only an active capture's graph and dependencies may
    // be read: an invalidated capture's may already be released.
    Ok((status == 1 && !info.graph.is_null()).then_some(info))
}

fn kernel_params(node: ffi::hipGraphNode_t) -> DriverResult<ffi::hipKernelNodeParams> {
    // SAFETY: all-zero kernel node parameters are valid (null pointers, zero dimensions).
    let mut params: ffi::hipKernelNodeParams = unsafe { std::mem::zeroed() };
    check(
        // SAFETY: `node` is a kernel node of a live graph; `params` a local.
        unsafe { ffi::hipGraphKernelNodeGetParams(node, &mut params) },
        "hipGraphKernelNodeGetParams",
    )?;
    Ok(params)
}

/// Sets kernel node `key`, and `exec`'s node, to launch with `args`, keeping function, grid and
/// block.
///
/// # Safety
/// The arguments match the kernel's parameters; the memory they name outlives every launch.
unsafe fn set_kernel_args(
    key: ffi::hipGraphNode_t,
    exec: Option<(&mut HGraphExec, ffi::hipGraphNode_t)>,
    args: &mut [*mut c_void],
) -> DriverResult<()> {
    let mut params = kernel_params(key)?;
    params.kernelParams = args.as_mut_ptr();
    params.extra = ptr::null_mut();
    if let Some((exec, node)) = exec {
        // SAFETY: the executable's name for the node; the caller vouches for the arguments.
        let err = unsafe { ffi::hipGraphExecKernelNodeSetParams(exec.raw(), node, &params) };
        check(err, "hipGraphExecKernelNodeSetParams")?;
    }
    check(
        // SAFETY: as above, for the raw graph's node.
        unsafe { ffi::hipGraphKernelNodeSetParams(key, &params) },
        "hipGraphKernelNodeSetParams",
    )
}

fn no_conditionals() -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: NO_CONDITIONALS.to_owned(),
    })
}

impl DriverEditing for HipDevice {
    type NodeKey = HNode;
    type Conditional = HNoConditional;

    fn capture_point(&self, stream: &HStream) -> DriverResult<Option<CapturePoint<HNode>>> {
        Ok(capture_info(stream.raw())?.map(|info| {
            let last = if info.count == 1 && !info.nodes.is_null() {
                // SAFETY: the runtime returned one node at `nodes`, valid until the stream's
                // next capture call.
                Some(HNode(unsafe { *info.nodes }))
            } else {
                None
            };
            CapturePoint {
                graph: info.graph as u64,
                last,
            }
        }))
    }

    fn clone_graph(&self, graph: &HGraph) -> DriverResult<HGraph> {
        let mut clone = ptr::null_mut();
        // SAFETY: clones a live graph into a local out-parameter.
        let err = unsafe { ffi::hipGraphClone(&mut clone, graph.raw()) };
        let clone = HGraph::from_raw(clone);
        check(err, "hipGraphClone")?;
        Ok(clone)
    }

    fn find_in_clone(&self, key: HNode, _original: &HGraph, clone: &HGraph) -> DriverResult<HNode> {
        let mut node = ptr::null_mut();
        // SAFETY: `key` is a node of the graph `clone` was cloned from (both alive).
        let err = unsafe { ffi::hipGraphNodeFindInClone(&mut node, key.0, clone.raw()) };
        check(err, "hipGraphNodeFindInClone")?;
        Ok(HNode(node))
    }

    fn update_exec(&self, exec: &mut HGraphExec, _source: &HGraph, graph: &HGraph) -> DriverResult<()> {
        let mut node = ptr::null_mut();
        let mut result: c_int = 0;
        // SAFETY: a live executable and graph; local out-parameters (the result as an int).
        let err = unsafe { ffi::hipGraphExecUpdateRaw(exec.raw(), graph.raw(), &mut node, &mut result) };
        if err == ffi::hipError_t::hipErrorGraphExecUpdateFailure {
            // hipGraphExecUpdateResult is numbered as CUDA's CUgraphExecUpdateResult.
            let (conflict, what) = match result {
                2 => (UpdateConflict::Edges, "the topology changed (nodes or edges)"),
                3 => (UpdateConflict::NodeKind, "a node's type changed"),
                4 | 7 => (
                    UpdateConflict::KernelFunction,
                    "a kernel node's function changed",
                ),
                5 => (
                    UpdateConflict::LaunchShape,
                    "a node's parameters changed in a way an update cannot take",
                ),
                _ => (UpdateConflict::Driver, "the runtime refused the update"),
            };
            return Err(DriverError::Api(GraphError::UpdateRefused {
                conflict,
                node: None,
                reason: format!("hipGraphExecUpdate answered {result}: {what}"),
            }));
        }
        check(err, "hipGraphExecUpdate")
    }

    unsafe fn set_op(
        &self,
        _graph: &mut HGraph,
        key: HNode,
        exec: Option<(&mut HGraphExec, HNode)>,
        op: PortableOp<Region<'_, HBlock>>,
    ) -> DriverResult<()> {
        let (key, exec) = (key.0, exec.map(|(e, n)| (e, n.0)));
        let scalar = op.scalar();
        let (out, input) = op.operands();
        let out_ptr = out.block.device_ptr().wrapping_byte_add(out.byte_offset());
        let input_ptr = input.map_or(ptr::null_mut(), |x| {
            x.block.device_ptr().wrapping_byte_add(x.byte_offset())
        });
        match op {
            PortableOp::Fill { .. } => {
                // SAFETY: all-zero memset parameters are valid.
                let mut params: ffi::hipMemsetParams = unsafe { std::mem::zeroed() };
                check(
                    // SAFETY: `key` is the memset node the op was captured as.
                    unsafe { ffi::hipGraphMemsetNodeGetParams(key, &mut params) },
                    "hipGraphMemsetNodeGetParams",
                )?;
                params.dst = out_ptr;
                params.value = scalar.to_bits();
                if let Some((exec, node)) = exec {
                    check(
                        // SAFETY: the executable's name for the node; the region is live memory
                        // (the caller's contract).
                        unsafe { ffi::hipGraphExecMemsetNodeSetParams(exec.raw(), node, &params) },
                        "hipGraphExecMemsetNodeSetParams",
                    )?;
                }
                check(
                    // SAFETY: as above, for the raw graph's node.
                    unsafe { ffi::hipGraphMemsetNodeSetParams(key, &params) },
                    "hipGraphMemsetNodeSetParams",
                )
            }
            PortableOp::Copy { .. } => {
                let kind = ffi::hipMemcpyKind::hipMemcpyDeviceToDevice;
                let bytes = out.num_bytes();
                if let Some((exec, node)) = exec {
                    check(
                        // SAFETY: as for the memset; a one-dimensional device copy of the node's
                        // size.
                        unsafe {
                            ffi::hipGraphExecMemcpyNodeSetParams1D(
                                exec.raw(),
                                node,
                                out_ptr,
                                input_ptr,
                                bytes,
                                kind,
                            )
                        },
                        "hipGraphExecMemcpyNodeSetParams1D",
                    )?;
                }
                check(
                    // SAFETY: as above, for the raw graph's node.
                    unsafe {
                        ffi::hipGraphMemcpyNodeSetParams1D(key, out_ptr, input_ptr, bytes, kind)
                    },
                    "hipGraphMemcpyNodeSetParams1D",
                )
            }
            _ => {
                let mut args = ElementArgs::new(out_ptr, scalar, input_ptr, out.len);
                // SAFETY: the element-wise kernels take `(y, a, x, n)`; the regions are live
                // (the caller's contract) and of the length the grid was made for.
                unsafe { set_kernel_args(key, exec, &mut args.pointers()) }
            }
        }
    }

    unsafe fn set_kernel(
        &self,
        _graph: &mut HGraph,
        key: HNode,
        exec: Option<(&mut HGraphExec, HNode)>,
        _module: &crate::HipKernelModule,
        _kernel: &Kernel,
        _grid: [u32; 3],
        args: &[RawArg<'_, HBlock>],
    ) -> DriverResult<()> {
        // Each argument as the kernel takes it: a buffer as the device pointer to its view's
        // first element, a scalar as its 4 bytes (the first of its 8-byte slot on a
        // little-endian host, which is what the runtime reads for a 4-byte parameter).
        let mut values: Vec<u64> = args
            .iter()
            .map(|a| match a {
                RawArg::Buffer { bytes, .. } => {
                    bytes.block.device_ptr().wrapping_byte_add(bytes.offset) as u64
                }
                RawArg::Scalar(s) => u64::from(s.bits()),
            })
            .collect();
        let mut pointers: Vec<*mut c_void> =
            values.iter_mut().map(|v| (v as *mut u64).cast()).collect();
        // SAFETY: the arguments match the kernel's parameters (checked by the driver layer);
        // their memory is kept alive by the graph (the caller's contract).
        unsafe { set_kernel_args(key.0, exec.map(|(e, n)| (e, n.0)), &mut pointers) }
    }

    unsafe fn launch_child(&self, child: &HGraph, stream: &HStream) -> DriverResult<()> {
        let raw = stream.raw();
        let info = capture_info(raw)?.ok_or_else(|| {
            DriverError::Api(GraphError::CaptureInvalidated {
                reason: "a child graph on a stream that is not capturing (or whose capture was \
                         invalidated)"
                    .to_owned(),
            })
        })?;
        let mut node = ptr::null_mut();
        check(
            // SAFETY: the graph and frontier come from the runtime for this capture; the child is
            // alive and copied into the node.
            unsafe {
                ffi::hipGraphAddChildGraphNode(
                    &mut node,
                    info.graph,
                    info.nodes,
                    info.count,
                    child.raw(),
                )
            },
            "hipGraphAddChildGraphNode",
        )?;
        check(
            // SAFETY: `node` was just added to this capture's graph.
            unsafe {
                ffi::hipStreamUpdateCaptureDependencies(
                    raw,
                    &mut node,
                    1,
                    ffi::hipStreamUpdateCaptureDependenciesFlags::hipStreamSetCaptureDependencies
                        as u32,
                )
            },
            "hipStreamUpdateCaptureDependencies",
        )
    }

    fn conditional_support(&self, _kind: ConditionalKind) -> Result<(), String> {
        Err(NO_CONDITIONALS.to_owned())
    }

    unsafe fn begin_conditional(
        &self,
        _stream: &HStream,
        _kind: ConditionalKind,
        _cond: Bytes<'_, HBlock>,
        _mask: u32,
    ) -> DriverResult<HNoConditional> {
        Err(no_conditionals())
    }

    unsafe fn begin_branch(
        &self,
        conditional: &mut HNoConditional,
        _branch: usize,
        _body: &HStream,
        _mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        match *conditional {}
    }

    unsafe fn end_branch(
        &self,
        conditional: &mut HNoConditional,
        _branch: usize,
        _body: &HStream,
    ) -> DriverResult<()> {
        match *conditional {}
    }

    unsafe fn end_conditional(
        &self,
        conditional: HNoConditional,
        _stream: &HStream,
    ) -> DriverResult<()> {
        match conditional {}
    }
}
