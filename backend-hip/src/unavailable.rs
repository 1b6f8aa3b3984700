//! The backend as built without the `runtime` feature: the same public types, none of which
//! can be constructed, and a constructor that says why.
//!
//! Every value type here is uninhabited (it holds [`Never`]), so the trait methods below are
//! statically unreachable: `match self.never {}` proves it to the compiler.

use std::path::Path;

use accel_graph_api::{
    Backend, BackendKind, Capabilities, CaptureErrorMode, DeviceBuffer, GraphError, GraphImpl,
    GraphOptions, GraphTopology, HostCallback, MemoryStats, PoolId, Result,
};

/// A type with no value: what this build's backend objects hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Never {}

/// Why the backend is unavailable in this build.
pub const REASON: &str = "built without the `runtime` feature (enable \
    `accel-graph-hip/runtime`, or the facade's `hip` feature, with HIP headers and libamdhip64 \
    installed: HIP_PATH)";

/// The HIP backend (unavailable: this build has no HIP runtime linked).
#[derive(Debug, Clone)]
pub struct HipBackend {
    never: Never,
}

impl HipBackend {
    /// Always [`GraphError::BackendUnavailable`] in this build.
    pub fn new(device: i32) -> Result<Self> {
        let _ = device;
        Err(GraphError::BackendUnavailable {
            backend: "hip",
            reason: REASON.to_owned(),
        })
    }
}

/// A HIP stream (cannot exist in this build).
#[derive(Debug, Clone, PartialEq)]
pub struct HipStream {
    never: Never,
}

/// A HIP event (cannot exist in this build).
#[derive(Debug)]
pub struct HipEvent {
    // No method reads it: it only makes the type uninhabited.
    #[allow(dead_code)]
    never: Never,
}

/// A HIP device buffer (cannot exist in this build).
#[derive(Debug)]
pub struct HipBuffer {
    never: Never,
}

/// The HIP half of a graph (cannot exist in this build).
#[derive(Debug)]
pub struct HipGraphImpl {
    never: Never,
}

/// The HIP backend's graph type.
pub type HipGraph = accel_graph_api::Graph<HipGraphImpl>;

impl DeviceBuffer for HipBuffer {
    fn len(&self) -> usize {
        match self.never {}
    }
    fn device_address(&self) -> u64 {
        match self.never {}
    }
}

impl GraphImpl for HipGraphImpl {
    fn backend_name(&self) -> &'static str {
        "hip"
    }
    fn capture_begin(&mut self, _pool: PoolId, _mode: CaptureErrorMode) -> Result<()> {
        match self.never {}
    }
    fn capture_end(&mut self) -> Result<usize> {
        match self.never {}
    }
    fn instantiate(&mut self) -> Result<()> {
        match self.never {}
    }
    fn replay(&mut self) -> Result<()> {
        match self.never {}
    }
    fn drop_raw_graph(&mut self) {
        match self.never {}
    }
    fn reset(&mut self) {
        match self.never {}
    }
    fn debug_dump(&self, _path: &Path) -> Result<()> {
        match self.never {}
    }
    fn topology(&self) -> Result<GraphTopology> {
        match self.never {}
    }
}

impl Backend for HipBackend {
    type Stream = HipStream;
    type Event = HipEvent;
    type Buffer = HipBuffer;
    type Graph = HipGraph;

    fn kind(&self) -> BackendKind {
        BackendKind::Hip
    }
    fn instance_id(&self) -> u64 {
        match self.never {}
    }
    fn capabilities(&self) -> Capabilities {
        match self.never {}
    }
    fn default_stream(&self) -> HipStream {
        match self.never {}
    }
    fn new_stream(&self) -> Result<HipStream> {
        match self.never {}
    }
    fn current_stream(&self) -> HipStream {
        match self.never {}
    }
    fn set_current_stream(&self, _stream: &HipStream) -> HipStream {
        match self.never {}
    }
    fn synchronize(&self) -> Result<()> {
        match self.never {}
    }
    fn stream_synchronize(&self, _stream: &HipStream) -> Result<()> {
        match self.never {}
    }
    fn is_capturing(&self, _stream: &HipStream) -> Result<bool> {
        match self.never {}
    }
    fn new_event(&self) -> Result<HipEvent> {
        match self.never {}
    }
    fn record_event(&self, _event: &HipEvent) -> Result<()> {
        match self.never {}
    }
    fn wait_event(&self, _event: &HipEvent) -> Result<()> {
        match self.never {}
    }
    fn event_synchronize(&self, _event: &HipEvent) -> Result<()> {
        match self.never {}
    }
    fn alloc(&self, _len: usize) -> Result<HipBuffer> {
        match self.never {}
    }
    fn upload(&self, _dst: &HipBuffer, _src: &[f32]) -> Result<()> {
        match self.never {}
    }
    fn download(&self, _src: &HipBuffer) -> Result<Vec<f32>> {
        match self.never {}
    }
    fn memory_stats(&self) -> MemoryStats {
        match self.never {}
    }
    fn fill(&self, _x: &HipBuffer, _value: f32) -> Result<()> {
        match self.never {}
    }
    fn copy(&self, _dst: &HipBuffer, _src: &HipBuffer) -> Result<()> {
        match self.never {}
    }
    fn add_scalar(&self, _x: &HipBuffer, _c: f32) -> Result<()> {
        match self.never {}
    }
    fn scale(&self, _x: &HipBuffer, _a: f32) -> Result<()> {
        match self.never {}
    }
    fn axpy(&self, _y: &HipBuffer, _a: f32, _x: &HipBuffer) -> Result<()> {
        match self.never {}
    }
    fn host_callback(&self, _f: HostCallback) -> Result<()> {
        match self.never {}
    }
    fn graph(&self, _options: GraphOptions) -> Result<HipGraph> {
        match self.never {}
    }
}
