//! Graph editing on CUDA: executables updated in place (`cuGraphExecUpdate_v2` for a whole
//! graph, `cuGraphExec{Kernel,Memset,Memcpy}NodeSetParams` per node, the raw graph's node set
//! alongside), child-graph nodes added to a capturing graph, and conditional nodes (CUDA 12.4:
//! `if` and `while`; 12.8: `if` with an `else` body) whose condition a small kernel of this
//! module copies from device memory into the node's handle.
//!
//! Nodes are added to a capturing graph the way CUDA documents for capture: the stream's
//! graph and frontier from `cuStreamGetCaptureInfo_v3`, the node added after that frontier
//! (`cuGraphAddNode_v2`, edge data kept), then the node made the stream's frontier
//! (`cuStreamUpdateCaptureDependencies_v2`). A conditional node's bodies are captured with
//! `cuStreamBeginCaptureToGraph` on streams of their own, as PyTorch does.

use std::{
    ffi::{CString, c_void},
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
use cudarc::driver::sys;

use crate::{
    CuBlock, CuGraph, CuGraphExec, CuStream, CudaDevice,
    capture::MODES,
    error::{check, describe},
};

/// A node of a CUDA graph (a `CUgraphNode`), as the driver layer names captured nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuNode(sys::CUgraphNode);

// SAFETY: a node handle is an opaque name; the driver layer uses it only with `&mut` access
// to the graph it belongs to, from one thread at a time.
unsafe impl Send for CuNode {}
// SAFETY: as above; the handle itself is never written through.
unsafe impl Sync for CuNode {}

impl CuNode {
    /// The raw handle.
    pub fn cu_graph_node(self) -> sys::CUgraphNode {
        self.0
    }
}

/// The driver version (`cuDriverGetVersion`, 12040 for 12.4) from which each feature exists.
pub(crate) mod since {
    /// `cuStreamGetCaptureInfo_v3`, `cuGraphAddNode_v2`, `cuStreamUpdateCaptureDependencies_v2`.
    pub(crate) const CAPTURE_INFO_V3: i32 = 12030;
    /// `if` and `while` conditional nodes.
    pub(crate) const CONDITIONAL: i32 = 12040;
    /// `if` nodes with two bodies.
    pub(crate) const IF_ELSE: i32 = 12080;
}

/// The kernel that copies a condition into a conditional node's handle: reads the 32-bit
/// element at `cond`, tests it under `mask` and calls `cudaGraphSetConditional`, a function of
/// the device runtime that the driver resolves when it loads the module (CUDA 12.4 and
/// later). Hand-written PTX, as the portable ops are: no toolkit is needed at run time.
const SET_CONDITION_PTX: &str = r#".version 6.0
.target sm_50
.address_size 64

.extern .func cudaGraphSetConditional
(
	.param .b64 cudaGraphSetConditional_param_0,
	.param .b32 cudaGraphSetConditional_param_1
)
;

.visible .entry accel_graph_set_condition(
	.param .u64 p_handle,
	.param .u64 p_cond,
	.param .u32 p_mask
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<5>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [p_handle];
	ld.param.u64 %rd2, [p_cond];
	ld.param.u32 %r1, [p_mask];
	cvta.to.global.u64 %rd3, %rd2;
	ld.global.u32 %r2, [%rd3];
	and.b32 %r3, %r2, %r1;
	setp.ne.u32 %p1, %r3, 0;
	selp.u32 %r4, 1, 0, %p1;
	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd1;
	.param .b32 param1;
	st.param.b32 [param1+0], %r4;
	call.uni cudaGraphSetConditional, (param0, param1);
	}
	ret;
}
"#;

/// The loaded set-condition kernel (valid while the device's context lives).
pub(crate) struct ConditionKernel {
    module: sys::CUmodule,
    function: sys::CUfunction,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread whose
// current context is the one they were loaded in (every call binds it first).
unsafe impl Send for ConditionKernel {}
// SAFETY: as above; never mutated after loading.
unsafe impl Sync for ConditionKernel {}

impl ConditionKernel {
    /// Loads the kernel into the current context, in relaxed capture mode (another instance
    /// may be capturing), and loads its code now: a lazy load at its first launch, inside a
    /// capture, would be an implicit synchronization.
    pub(crate) fn load() -> Result<Self, String> {
        MODES.relaxed(|| {
            let image = CString::new(SET_CONDITION_PTX).map_err(|e| e.to_string())?;
            let mut module = ptr::null_mut();
            // SAFETY: `image` is NUL-terminated PTX that outlives the call.
            let rc = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(format!(
                    "loading the set-condition kernel failed: {}",
                    describe(rc).0
                ));
            }
            // Unloads the module again on the error returns below.
            let mut kernel = ConditionKernel {
                module,
                function: ptr::null_mut(),
            };
            let mut function = ptr::null_mut();
            let name = c"accel_graph_set_condition";
            // SAFETY: the module is loaded; `name` is a static C string.
            let rc = unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuModuleGetFunction: {}", describe(rc).0));
            }
            // SAFETY: a function of the module just loaded.
            let rc = unsafe { sys::cuFuncLoad(function) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuFuncLoad: {}", describe(rc).0));
            }
            // Not `ConditionKernel { function, ..kernel }`: that copies the handles out and
            // drops `kernel`, whose drop unloads the module the function belongs to.
            kernel.function = function;
            Ok(kernel)
        })
    }

    /// Launches it on `stream` (captured: the stream captures into the handle's graph).
    ///
    /// # Safety
    /// `cond` is device memory holding at least 4 bytes, alive while the graph can launch.
    unsafe fn launch(
        &self,
        handle: sys::CUgraphConditionalHandle,
        cond: sys::CUdeviceptr,
        mask: u32,
        stream: sys::CUstream,
    ) -> DriverResult<()> {
        let (mut handle, mut cond, mut mask) = (handle, cond, mask);
        let mut args: [*mut c_void; 3] = [
            (&raw mut handle).cast(),
            (&raw mut cond).cast(),
            (&raw mut mask).cast(),
        ];
        // SAFETY: the arguments match `(u64 handle, u64 cond, u32 mask)` and outlive the call;
        // one thread reads 4 bytes at `cond` (the caller's contract).
        let rc = unsafe {
            sys::cuLaunchKernel(
                self.function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        check(rc, "cuLaunchKernel (set condition)")
    }
}

impl Drop for ConditionKernel {
    fn drop(&mut self) {
        // SAFETY: loaded by `load`, unloaded once; a failure (context gone at exit) leaves
        // nothing to clean up.
        let _ = unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// The driver's version (`12080` for 12.8), 0 when it cannot tell.
pub(crate) fn driver_version() -> i32 {
    let mut version = 0;
    // SAFETY: writes the version into a local.
    let rc = unsafe { sys::cuDriverGetVersion(&mut version) };
    if rc == sys::CUresult::CUDA_SUCCESS {
        version
    } else {
        0
    }
}

/// A capturing stream's graph and frontier (nodes and edge data, owned by the driver until
/// the stream's next capture call).
struct CaptureInfo {
    graph: sys::CUgraph,
    nodes: *const sys::CUgraphNode,
    edges: *const sys::CUgraphEdgeData,
    count: usize,
}

impl CaptureInfo {
    /// The frontier's nodes.
    fn frontier(&self) -> &[sys::CUgraphNode] {
        if self.nodes.is_null() || self.count == 0 {
            &[]
        } else {
            // SAFETY: the driver returned `count` nodes at `nodes`, valid until the stream's
            // next capture call (this value is used before that).
            unsafe { std::slice::from_raw_parts(self.nodes, self.count) }
        }
    }
}

/// The capture `stream` takes part in: `None` when it does not capture.
fn capture_info(stream: sys::CUstream) -> DriverResult<Option<CaptureInfo>> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0;
    let mut info = CaptureInfo {
        graph: ptr::null_mut(),
        nodes: ptr::null(),
        edges: ptr::null(),
        count: 0,
    };
    // SAFETY: every out-parameter is a local.
    let rc = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            &mut id,
            &mut info.graph,
            &mut info.nodes,
            &mut info.edges,
            &mut info.count,
        )
    };
    check(rc, "cuStreamGetCaptureInfo_v3")?;
    // Only an active capture's graph and dependencies may be read: once the capture is
    // invalidated the driver may already have released them (its documentation: the graph
    // handle "may be invalidated before end of capture for certain errors").
    Ok(
        (status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
            && !info.graph.is_null())
        .then_some(info),
    )
}

/// Adds the node `params` describes after `stream`'s frontier and makes it the frontier.
///
/// # Safety
/// `stream` captures; `params` describes a node valid in its graph.
unsafe fn add_to_capture(
    stream: sys::CUstream,
    params: &mut sys::CUgraphNodeParams,
    call: &str,
) -> DriverResult<sys::CUgraphNode> {
    let info = capture_info(stream)?.ok_or_else(|| {
        DriverError::Api(GraphError::CaptureInvalidated {
            reason: format!("{call}: the stream is not capturing, or its capture was invalidated"),
        })
    })?;
    let mut node = ptr::null_mut();
    // SAFETY: the graph and frontier come from the driver for this capture; `params` is the
    // caller's.
    let rc = unsafe {
        sys::cuGraphAddNode_v2(
            &mut node, info.graph, info.nodes, info.edges, info.count, params,
        )
    };
    check(rc, call)?;
    let mut frontier = node;
    // SAFETY: `frontier` names the node just added to this capture's graph.
    let rc = unsafe {
        sys::cuStreamUpdateCaptureDependencies_v2(
            stream,
            &mut frontier,
            ptr::null(),
            1,
            sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32,
        )
    };
    check(rc, "cuStreamUpdateCaptureDependencies_v2")?;
    Ok(node)
}

/// A node's `CUgraphNodeParams` with every field zero but its type.
fn node_params(kind: sys::CUgraphNodeType) -> sys::CUgraphNodeParams {
    // SAFETY: the struct is plain data (handles, numbers, a union of such): all zeros is a
    // valid value of every field.
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = kind;
    params
}

/// The refusal of an update the driver reported.
fn update_refused(info: &sys::CUgraphExecUpdateResultInfo) -> DriverError {
    use sys::CUgraphExecUpdateResult as R;
    let (conflict, what) = match info.result {
        R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => (
            UpdateConflict::Edges,
            "the topology changed (nodes or edges)",
        ),
        R::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => {
            (UpdateConflict::NodeKind, "a node's type changed")
        }
        R::CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED
        | R::CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => (
            UpdateConflict::KernelFunction,
            "a kernel node's function changed in a way an update cannot take",
        ),
        R::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => (
            UpdateConflict::LaunchShape,
            "a node's parameters changed in a way an update cannot take",
        ),
        R::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => {
            (UpdateConflict::Driver, "a node's launch attributes changed")
        }
        R::CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => (
            UpdateConflict::Driver,
            "the update is not supported for a node",
        ),
        _ => (UpdateConflict::Driver, "the driver refused the update"),
    };
    let node = if info.errorNode.is_null() {
        String::new()
    } else {
        let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: the error node belongs to the graph given to the update, which is alive.
        let rc = unsafe { sys::cuGraphNodeGetType(info.errorNode, &mut kind) };
        if rc == sys::CUresult::CUDA_SUCCESS {
            format!(" (at a {kind:?} node)")
        } else {
            String::new()
        }
    };
    DriverError::Api(GraphError::UpdateRefused {
        conflict,
        node: None,
        reason: format!(
            "cuGraphExecUpdate_v2 answered {:?}: {what}{node}",
            info.result
        ),
    })
}

/// The kernel node parameters of `node` (its function, grid and block).
fn kernel_params(node: sys::CUgraphNode) -> DriverResult<sys::CUDA_KERNEL_NODE_PARAMS> {
    // SAFETY: all-zero kernel node parameters are valid (null handles and pointers).
    let mut params: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: `node` is a kernel node of a live graph; `params` a local.
    let rc = unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut params) };
    check(rc, "cuGraphKernelNodeGetParams_v2")?;
    Ok(params)
}

/// Sets kernel node `key` of the raw graph, and `exec`'s node, to launch with `args`
/// (pointers to each argument's value, valid during the call), keeping function, grid and
/// block.
///
/// # Safety
/// The arguments match the kernel's parameters; the memory they name outlives every launch.
unsafe fn set_kernel_args(
    key: sys::CUgraphNode,
    exec: Option<(&mut CuGraphExec, sys::CUgraphNode)>,
    args: &mut [*mut c_void],
) -> DriverResult<()> {
    let mut params = kernel_params(key)?;
    params.kernelParams = args.as_mut_ptr();
    params.extra = ptr::null_mut();
    if let Some((exec, node)) = exec {
        // SAFETY: `node` is the executable's name for this kernel node; the caller vouches for
        // the arguments.
        let rc =
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec.cu_graph_exec(), node, &params) };
        check(rc, "cuGraphExecKernelNodeSetParams_v2")?;
    }
    // SAFETY: as above, for the raw graph's node.
    let rc = unsafe { sys::cuGraphKernelNodeSetParams_v2(key, &params) };
    check(rc, "cuGraphKernelNodeSetParams_v2")
}

/// A conditional node being built: its handle, its bodies (owned by the node) and what its
/// `while` body re-evaluates.
pub struct CuConditional {
    kind: ConditionalKind,
    handle: sys::CUgraphConditionalHandle,
    bodies: Vec<sys::CUgraph>,
    cond: sys::CUdeviceptr,
    mask: u32,
}

// SAFETY: plain driver handles, used from the thread that builds the node.
unsafe impl Send for CuConditional {}

impl CudaDevice {
    fn condition_kernel(&self) -> DriverResult<&ConditionKernel> {
        self.condition.as_ref().map_err(|why| {
            DriverError::Api(GraphError::Unsupported {
                what: format!("conditional nodes on {}: {why}", self.ordinal),
            })
        })
    }
}

impl DriverEditing for CudaDevice {
    type NodeKey = CuNode;
    type Conditional = CuConditional;

    fn capture_point(&self, stream: &CuStream) -> DriverResult<Option<CapturePoint<CuNode>>> {
        if self.driver_version < since::CAPTURE_INFO_V3 {
            return Ok(None);
        }
        Ok(capture_info(stream.cu_stream())?.map(|info| CapturePoint {
            graph: info.graph as u64,
            last: match info.frontier() {
                [node] => Some(CuNode(*node)),
                _ => None,
            },
        }))
    }

    fn clone_graph(&self, graph: &CuGraph) -> DriverResult<CuGraph> {
        let mut clone = ptr::null_mut();
        // SAFETY: clones a live graph into a local out-parameter.
        let rc = unsafe { sys::cuGraphClone(&mut clone, graph.cu_graph()) };
        let clone = CuGraph::from_raw(clone);
        check(rc, "cuGraphClone")?;
        Ok(clone)
    }

    fn find_in_clone(
        &self,
        key: CuNode,
        _original: &CuGraph,
        clone: &CuGraph,
    ) -> DriverResult<CuNode> {
        let mut node = ptr::null_mut();
        // SAFETY: `key` is a node of the graph `clone` was cloned from (both alive).
        let rc = unsafe { sys::cuGraphNodeFindInClone(&mut node, key.0, clone.cu_graph()) };
        check(rc, "cuGraphNodeFindInClone")?;
        Ok(CuNode(node))
    }

    fn update_exec(
        &self,
        exec: &mut CuGraphExec,
        _source: &CuGraph,
        graph: &CuGraph,
    ) -> DriverResult<()> {
        // SAFETY: all-zero result info is valid (a result code and null nodes).
        let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: a live executable and graph; `info` a local out-parameter.
        let rc =
            unsafe { sys::cuGraphExecUpdate_v2(exec.cu_graph_exec(), graph.cu_graph(), &mut info) };
        if rc == sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE {
            return Err(update_refused(&info));
        }
        check(rc, "cuGraphExecUpdate_v2")
    }

    unsafe fn set_op(
        &self,
        _graph: &mut CuGraph,
        key: CuNode,
        exec: Option<(&mut CuGraphExec, CuNode)>,
        op: PortableOp<Region<'_, CuBlock>>,
    ) -> DriverResult<()> {
        let ctx = self.ctx.cu_ctx();
        let (key, exec) = (key.0, exec.map(|(e, n)| (e, n.0)));
        let scalar = op.scalar();
        let (out, input) = op.operands();
        let out_ptr = out.block.device_ptr() + out.byte_offset() as u64;
        let input_ptr = input.map_or(0, |x| x.block.device_ptr() + x.byte_offset() as u64);
        match op {
            PortableOp::Fill { .. } => {
                // SAFETY: all-zero memset parameters are valid.
                let mut params: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
                // SAFETY: `key` is the memset node the op was captured as.
                let rc = unsafe { sys::cuGraphMemsetNodeGetParams(key, &mut params) };
                check(rc, "cuGraphMemsetNodeGetParams")?;
                params.dst = out_ptr;
                params.value = scalar.to_bits();
                if let Some((exec, node)) = exec {
                    // SAFETY: the executable's name for the node; the region is live memory
                    // of this context (the caller's contract).
                    let rc = unsafe {
                        sys::cuGraphExecMemsetNodeSetParams(
                            exec.cu_graph_exec(),
                            node,
                            &params,
                            ctx,
                        )
                    };
                    check(rc, "cuGraphExecMemsetNodeSetParams")?;
                }
                check(
                    // SAFETY: as above, for the raw graph's node.
                    unsafe { sys::cuGraphMemsetNodeSetParams(key, &params) },
                    "cuGraphMemsetNodeSetParams",
                )
            }
            PortableOp::Copy { .. } => {
                // Not `mem::zeroed`: the memory-type fields are enums without a zero value.
                // The driver fills every field.
                let mut params = std::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
                // SAFETY: `key` is the memcpy node the op was captured as; the out-parameter
                // is writable memory of the struct's size.
                let rc = unsafe { sys::cuGraphMemcpyNodeGetParams(key, params.as_mut_ptr()) };
                check(rc, "cuGraphMemcpyNodeGetParams")?;
                // SAFETY: written in full by the successful call above.
                let mut params = unsafe { params.assume_init() };
                params.dstDevice = out_ptr;
                params.srcDevice = input_ptr;
                if let Some((exec, node)) = exec {
                    // SAFETY: as for the memset.
                    let rc = unsafe {
                        sys::cuGraphExecMemcpyNodeSetParams(
                            exec.cu_graph_exec(),
                            node,
                            &params,
                            ctx,
                        )
                    };
                    check(rc, "cuGraphExecMemcpyNodeSetParams")?;
                }
                check(
                    // SAFETY: as above, for the raw graph's node.
                    unsafe { sys::cuGraphMemcpyNodeSetParams(key, &params) },
                    "cuGraphMemcpyNodeSetParams",
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
        _graph: &mut CuGraph,
        key: CuNode,
        exec: Option<(&mut CuGraphExec, CuNode)>,
        _module: &crate::kernels::CuModule,
        _kernel: &Kernel,
        _grid: [u32; 3],
        args: &[RawArg<'_, CuBlock>],
    ) -> DriverResult<()> {
        // Each argument as the kernel takes it (see `accel_graph_api::kernel`): a buffer as the
        // device pointer to its view's first element, a scalar as its 4 bytes.
        let mut values: Vec<u64> = args
            .iter()
            .map(|a| match a {
                RawArg::Buffer { bytes, .. } => bytes.block.device_ptr() + bytes.offset as u64,
                RawArg::Scalar(s) => u64::from(s.bits()),
            })
            .collect();
        // A scalar's 4 bytes are the first 4 of its `u64` slot on a little-endian host, as a
        // pointer to it is read by the driver for a 4-byte parameter.
        let mut pointers: Vec<*mut c_void> =
            values.iter_mut().map(|v| (v as *mut u64).cast()).collect();
        // SAFETY: the arguments match the kernel's parameters (checked by the driver layer);
        // their memory is kept alive by the graph (the caller's contract).
        unsafe { set_kernel_args(key.0, exec.map(|(e, n)| (e, n.0)), &mut pointers) }
    }

    unsafe fn launch_child(&self, child: &CuGraph, stream: &CuStream) -> DriverResult<()> {
        let mut params = node_params(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_GRAPH);
        params.__bindgen_anon_1.graph = sys::CUDA_CHILD_GRAPH_NODE_PARAMS {
            graph: child.cu_graph(),
        };
        // SAFETY: the stream captures (the caller's contract); the child graph is alive and
        // cloned into the node by the driver.
        unsafe {
            add_to_capture(
                stream.cu_stream(),
                &mut params,
                "cuGraphAddNode_v2 (child graph)",
            )
        }
        .map(drop)
    }

    fn conditional_support(&self, kind: ConditionalKind) -> Result<(), String> {
        let need = match kind {
            ConditionalKind::IfElse => since::IF_ELSE,
            ConditionalKind::If | ConditionalKind::While => since::CONDITIONAL,
        };
        if self.driver_version < need {
            return Err(format!(
                "{kind} nodes need a CUDA {}.{} driver, this one is {}.{}",
                need / 1000,
                need % 1000 / 10,
                self.driver_version / 1000,
                self.driver_version % 1000 / 10
            ));
        }
        self.condition.as_ref().map(drop).map_err(Clone::clone)
    }

    unsafe fn begin_conditional(
        &self,
        stream: &CuStream,
        kind: ConditionalKind,
        cond: Bytes<'_, CuBlock>,
        mask: u32,
    ) -> DriverResult<CuConditional> {
        let setter = self.condition_kernel()?;
        let raw = stream.cu_stream();
        let info = capture_info(raw)?.ok_or_else(|| {
            DriverError::Api(GraphError::CaptureInvalidated {
                reason: "a conditional node on a stream that is not capturing (or whose capture \
                         was invalidated)"
                    .to_owned(),
            })
        })?;
        let mut handle = 0;
        // SAFETY: a handle of the capturing graph, in this context, reset to 0 at each launch
        // (the set-condition kernel writes it before the node reads it).
        let rc = unsafe {
            sys::cuGraphConditionalHandleCreate(
                &mut handle,
                info.graph,
                self.ctx.cu_ctx(),
                0,
                sys::CU_GRAPH_COND_ASSIGN_DEFAULT,
            )
        };
        check(rc, "cuGraphConditionalHandleCreate")?;
        let cond_ptr = cond.block.device_ptr() + cond.offset as u64;
        // SAFETY: the condition's block is kept alive by the capture (the caller's contract).
        unsafe { setter.launch(handle, cond_ptr, mask, raw) }?;
        let mut params = node_params(sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL);
        let size = kind.bodies();
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle,
            type_: match kind {
                ConditionalKind::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
                ConditionalKind::If | ConditionalKind::IfElse => {
                    sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF
                }
            },
            size: size as u32,
            phGraph_out: ptr::null_mut(),
            ctx: self.ctx.cu_ctx(),
        };
        // SAFETY: the stream captures; the handle belongs to its graph.
        unsafe { add_to_capture(raw, &mut params, "cuGraphAddNode_v2 (conditional node)") }?;
        // SAFETY: the driver filled the union's conditional member, whose `phGraph_out` holds
        // `size` body graphs owned by the node.
        let out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
        if out.is_null() {
            return Err(DriverError::Api(GraphError::Unsupported {
                what: "the driver returned no body graphs for a conditional node".to_owned(),
            }));
        }
        // SAFETY: `size` graphs at `out`, as just said.
        let bodies = unsafe { std::slice::from_raw_parts(out, size) }.to_vec();
        Ok(CuConditional {
            kind,
            handle,
            bodies,
            cond: cond_ptr,
            mask,
        })
    }

    unsafe fn begin_branch(
        &self,
        conditional: &mut CuConditional,
        branch: usize,
        body: &CuStream,
        mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        let graph = *conditional.bodies.get(branch).ok_or_else(|| {
            DriverError::Api(GraphError::Unsupported {
                what: format!("body {branch} of a {} node", conditional.kind),
            })
        })?;
        // SAFETY: the body graph is owned by the conditional node of the capture; the body
        // stream captures nothing yet.
        let rc = unsafe {
            sys::cuStreamBeginCaptureToGraph(
                body.cu_stream(),
                graph,
                ptr::null(),
                ptr::null(),
                0,
                MODES.native(mode),
            )
        };
        check(rc, "cuStreamBeginCaptureToGraph")
    }

    unsafe fn end_branch(
        &self,
        conditional: &mut CuConditional,
        _branch: usize,
        body: &CuStream,
    ) -> DriverResult<()> {
        let raw = body.cu_stream();
        // A `while` body ends by evaluating the condition for the next iteration.
        let reevaluated = if conditional.kind == ConditionalKind::While {
            self.condition_kernel().and_then(|setter| {
                // SAFETY: the condition's block is kept alive by the capture.
                unsafe {
                    setter.launch(conditional.handle, conditional.cond, conditional.mask, raw)
                }
            })
        } else {
            Ok(())
        };
        let mut graph = ptr::null_mut();
        // SAFETY: ends the body's capture on its stream; the graph returned is the body graph,
        // owned by the conditional node (never destroyed here).
        let rc = unsafe { sys::cuStreamEndCapture(raw, &mut graph) };
        reevaluated?;
        check(rc, "cuStreamEndCapture (conditional body)")
    }

    unsafe fn end_conditional(
        &self,
        _conditional: CuConditional,
        _stream: &CuStream,
    ) -> DriverResult<()> {
        // The node joined the stream's order when it was added.
        Ok(())
    }
}
