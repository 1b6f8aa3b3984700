//! The driver as built without the `runtime` feature: the same public types as with it, none
//! of which can have a value, and an `open` that says why.
//!
//! Every type here holds an uninhabited [`Never`], so the driver's methods are statically
//! unreachable: `match self.never {}` proves it to the compiler. The backend itself
//! (`backend.rs`) is the same file in both builds, and each type here has the auto traits
//! (`Send`, `Sync`) of its namesake with the feature, so enabling it removes nothing.

use std::{ffi::c_void, marker::PhantomData, path::Path};

use accel_graph_api::{
    BackendKind, Capabilities, CaptureErrorMode, ConditionalKind, EventOptions, FloatType, Gemm,
    GraphError, GraphTopology, InstantiateFlags, PortableOp, Result, kernel::Kernel,
};
use accel_graph_driver::{
    Driver, DriverResult,
    api::{
        Bytes, CapturePoint, DriverCapture, DriverEditing, DriverEvents, DriverGraphs,
        DriverKernels, DriverMemory, DriverOps, DriverStreams, HostFn, RawArg, Region,
    },
};

/// No value: what this build's driver objects hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Never {}

/// Why the backend is unavailable in this build.
const REASON: &str = "built without the `runtime` feature (enable `accel-graph-hip/runtime`, or \
    the facade's `hip` feature, with HIP headers and libamdhip64 installed: HIP_PATH)";

/// The HIP driver (none in this build: it has no HIP runtime linked).
#[derive(Debug)]
pub struct HipDevice {
    never: Never,
}

/// A HIP stream (none in this build).
#[derive(Debug)]
pub struct HStream {
    never: Never,
}

/// A HIP event (none in this build).
#[derive(Debug)]
pub struct HEvent {
    never: Never,
}

/// A device allocation (none in this build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HBlock {
    never: Never,
}

/// A user kernel loaded on a device (none in this build).
#[derive(Debug)]
pub struct HipKernelModule {
    never: Never,
}

/// A captured graph (none in this build).
#[derive(Debug)]
pub struct HGraph {
    never: Never,
    /// `Send` but not `Sync`, as with the feature (a graph is not thread-safe).
    _handle: PhantomData<*mut c_void>,
}

/// An executable graph (none in this build).
#[derive(Debug)]
pub struct HGraphExec {
    never: Never,
    /// As for [`HGraph`].
    _handle: PhantomData<*mut c_void>,
}

/// A node of a HIP graph (none in this build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HNode {
    never: Never,
}

/// No conditional node is ever built on HIP (the type has no value).
#[derive(Debug)]
pub enum HNoConditional {}

// SAFETY: there is no value of the type.
unsafe impl Send for HGraph {}
// SAFETY: there is no value of the type.
unsafe impl Send for HGraphExec {}

impl HipDevice {
    /// Always [`GraphError::BackendUnavailable`] in this build.
    pub(crate) fn open(ordinal: usize, opening: crate::backend::Opening) -> Result<Self> {
        let _ = (ordinal, opening);
        Err(GraphError::BackendUnavailable {
            backend: "hip",
            reason: REASON.to_owned(),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        match self.never {}
    }

    /// `hipRuntimeGetVersion` of the loaded runtime.
    pub fn runtime_version(&self) -> i32 {
        match self.never {}
    }

    /// Whether the runtime itself refuses `hipMalloc` during a capture.
    pub fn runtime_refuses_capture_alloc(&self) -> Option<bool> {
        match self.never {}
    }

    /// The device's architecture as code is compiled for it.
    pub fn arch(&self) -> &str {
        match self.never {}
    }
}

impl HBlock {
    /// The raw device pointer.
    pub fn device_ptr(&self) -> *mut c_void {
        match self.never {}
    }
}

impl Driver for HipDevice {
    const KIND: BackendKind = BackendKind::Hip;
    fn capabilities(&self) -> Capabilities {
        match self.never {}
    }
    fn capture_domain(&self) -> u64 {
        match self.never {}
    }
    fn bind(&self) -> DriverResult<()> {
        match self.never {}
    }
    fn synchronize(&self) -> DriverResult<()> {
        match self.never {}
    }
}

impl DriverStreams for HipDevice {
    type Stream = HStream;
    fn default_stream(&self) -> HStream {
        match self.never {}
    }
    fn create_stream(&self) -> DriverResult<HStream> {
        match self.never {}
    }
    fn stream_key(&self, stream: &HStream) -> u64 {
        match stream.never {}
    }
    fn is_default_stream(&self, _: &HStream) -> bool {
        match self.never {}
    }
    fn stream_synchronize(&self, _: &HStream) -> DriverResult<()> {
        match self.never {}
    }
    fn capture_id(&self, _: &HStream) -> DriverResult<Option<u64>> {
        match self.never {}
    }
}

impl DriverEvents for HipDevice {
    type Event = HEvent;
    fn create_event(&self, _: EventOptions) -> DriverResult<HEvent> {
        match self.never {}
    }
    unsafe fn record_event(&self, event: &HEvent, _: &HStream) -> DriverResult<()> {
        match event.never {}
    }
    unsafe fn wait_event(&self, _: &HStream, _: &HEvent) -> DriverResult<()> {
        match self.never {}
    }
    fn event_synchronize(&self, _: &HEvent) -> DriverResult<()> {
        match self.never {}
    }
    fn event_query(&self, _: &HEvent) -> DriverResult<bool> {
        match self.never {}
    }
    fn elapsed_ms(&self, _: &HEvent, _: &HEvent) -> DriverResult<f32> {
        match self.never {}
    }
}

impl DriverMemory for HipDevice {
    type Block = HBlock;
    fn malloc(&self, _: usize) -> DriverResult<HBlock> {
        match self.never {}
    }
    unsafe fn free(&self, _: HBlock) -> DriverResult<()> {
        match self.never {}
    }
    fn block_address(&self, block: &HBlock) -> u64 {
        match block.never {}
    }
    unsafe fn upload(&self, _: &HBlock, _: usize, _: &[u8], _: &HStream) -> DriverResult<()> {
        match self.never {}
    }
    unsafe fn download(&self, _: &HBlock, _: usize, _: &mut [u8], _: &HStream) -> DriverResult<()> {
        match self.never {}
    }
}

impl DriverCapture for HipDevice {
    type Graph = HGraph;
    unsafe fn begin_capture(&self, _: &HStream, _: CaptureErrorMode) -> DriverResult<()> {
        match self.never {}
    }
    unsafe fn end_capture(&self, _: &HStream) -> DriverResult<HGraph> {
        match self.never {}
    }
    fn exchange_capture_mode(&self, _: CaptureErrorMode) -> DriverResult<CaptureErrorMode> {
        match self.never {}
    }
}

impl DriverGraphs for HipDevice {
    type Exec = HGraphExec;
    fn instantiate(&self, graph: &HGraph, _: InstantiateFlags) -> DriverResult<HGraphExec> {
        match graph.never {}
    }
    fn upload_exec(&self, exec: &HGraphExec, _: &HStream) -> DriverResult<()> {
        match exec.never {}
    }
    unsafe fn launch_exec(&self, _: &HGraphExec, _: &HStream) -> DriverResult<()> {
        match self.never {}
    }
    fn node_count(&self, _: &HGraph) -> DriverResult<usize> {
        match self.never {}
    }
    fn topology(&self, _: &HGraph) -> DriverResult<GraphTopology> {
        match self.never {}
    }
    fn dot_dump(&self, _: &HGraph, _: &Path) -> Option<DriverResult<()>> {
        match self.never {}
    }
}

impl DriverOps for HipDevice {
    unsafe fn launch_op(&self, _: PortableOp<Region<'_, HBlock>>, _: &HStream) -> DriverResult<()> {
        match self.never {}
    }
    unsafe fn launch_host(&self, _: &HStream, _: HostFn, _: *mut c_void) -> DriverResult<()> {
        match self.never {}
    }
}

impl DriverKernels for HipDevice {
    type Module = HipKernelModule;
    fn load_kernel(&self, _: &Kernel) -> DriverResult<HipKernelModule> {
        match self.never {}
    }
    unsafe fn launch_kernel(
        &self,
        module: &HipKernelModule,
        _: &Kernel,
        _: [u32; 3],
        _: &[RawArg<'_, HBlock>],
        _: &HStream,
    ) -> DriverResult<()> {
        match module.never {}
    }
    unsafe fn gemm(
        &self,
        _: &Gemm,
        _: FloatType,
        _: Bytes<'_, HBlock>,
        _: Bytes<'_, HBlock>,
        _: Bytes<'_, HBlock>,
        _: &HStream,
    ) -> DriverResult<()> {
        match self.never {}
    }
}

impl DriverEditing for HipDevice {
    type NodeKey = HNode;
    type Conditional = HNoConditional;
    fn capture_point(&self, _: &HStream) -> DriverResult<Option<CapturePoint<HNode>>> {
        match self.never {}
    }
    fn clone_graph(&self, graph: &HGraph) -> DriverResult<HGraph> {
        match graph.never {}
    }
    fn find_in_clone(&self, key: HNode, _: &HGraph, _: &HGraph) -> DriverResult<HNode> {
        match key.never {}
    }
    fn update_exec(&self, exec: &mut HGraphExec, _: &HGraph, _: &HGraph) -> DriverResult<()> {
        match exec.never {}
    }
    unsafe fn set_op(
        &self,
        _: &mut HGraph,
        key: HNode,
        _: Option<(&mut HGraphExec, HNode)>,
        _: PortableOp<Region<'_, HBlock>>,
    ) -> DriverResult<()> {
        match key.never {}
    }
    unsafe fn set_kernel(
        &self,
        _: &mut HGraph,
        key: HNode,
        _: Option<(&mut HGraphExec, HNode)>,
        _: &HipKernelModule,
        _: &Kernel,
        _: [u32; 3],
        _: &[RawArg<'_, HBlock>],
    ) -> DriverResult<()> {
        match key.never {}
    }
    unsafe fn launch_child(&self, child: &HGraph, _: &HStream) -> DriverResult<()> {
        match child.never {}
    }
    fn conditional_support(&self, _: ConditionalKind) -> std::result::Result<(), String> {
        match self.never {}
    }
    unsafe fn begin_conditional(
        &self,
        _: &HStream,
        _: ConditionalKind,
        _: Bytes<'_, HBlock>,
        _: u32,
    ) -> DriverResult<HNoConditional> {
        match self.never {}
    }
    unsafe fn begin_branch(
        &self,
        conditional: &mut HNoConditional,
        _: usize,
        _: &HStream,
        _: CaptureErrorMode,
    ) -> DriverResult<()> {
        match *conditional {}
    }
    unsafe fn end_branch(
        &self,
        conditional: &mut HNoConditional,
        _: usize,
        _: &HStream,
    ) -> DriverResult<()> {
        match *conditional {}
    }
    unsafe fn end_conditional(&self, conditional: HNoConditional, _: &HStream) -> DriverResult<()> {
        match conditional {}
    }
}
