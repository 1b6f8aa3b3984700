//! `AnyGraph`: a graph of whichever backend, dispatched statically over the enabled backends.

use std::path::Path;

use accel_graph_api::{
    AcceleratorGraph, BackendKind, CaptureErrorMode, Graph, GraphImpl, GraphState, GraphTopology,
    PoolId, Result,
};
use enum_dispatch::enum_dispatch;

/// The graph operations `AnyGraph` dispatches, declared in this crate because `enum_dispatch`
/// can only generate forwarding code for a trait whose definition it sees in the same crate.
/// It mirrors [`AcceleratorGraph`] method for method; every backend graph is a `Graph<I>`.
#[enum_dispatch]
trait GraphDispatch {
    fn capture_begin(&mut self) -> Result<()>;
    fn capture_end(&mut self) -> Result<()>;
    fn instantiate(&mut self) -> Result<()>;
    fn replay(&mut self) -> Result<()>;
    fn reset(&mut self);
    fn pool(&self) -> Result<PoolId>;
    fn enable_debug_mode(&mut self);
    fn debug_dump(&self, path: &Path) -> Result<()>;
    fn keep_graph(&self) -> bool;
    fn capture_error_mode(&self) -> CaptureErrorMode;
    fn state(&self) -> GraphState;
    fn nodes(&self) -> Result<GraphTopology>;
    fn backend_name(&self) -> &'static str;
}

impl<I: GraphImpl> GraphDispatch for Graph<I> {
    fn capture_begin(&mut self) -> Result<()> {
        AcceleratorGraph::capture_begin(self)
    }
    fn capture_end(&mut self) -> Result<()> {
        AcceleratorGraph::capture_end(self)
    }
    fn instantiate(&mut self) -> Result<()> {
        AcceleratorGraph::instantiate(self)
    }
    fn replay(&mut self) -> Result<()> {
        AcceleratorGraph::replay(self)
    }
    fn reset(&mut self) {
        AcceleratorGraph::reset(self)
    }
    fn pool(&self) -> Result<PoolId> {
        AcceleratorGraph::pool(self)
    }
    fn enable_debug_mode(&mut self) {
        AcceleratorGraph::enable_debug_mode(self)
    }
    fn debug_dump(&self, path: &Path) -> Result<()> {
        AcceleratorGraph::debug_dump(self, path)
    }
    fn keep_graph(&self) -> bool {
        AcceleratorGraph::keep_graph(self)
    }
    fn capture_error_mode(&self) -> CaptureErrorMode {
        AcceleratorGraph::capture_error_mode(self)
    }
    fn state(&self) -> GraphState {
        AcceleratorGraph::state(self)
    }
    fn nodes(&self) -> Result<GraphTopology> {
        AcceleratorGraph::nodes(self)
    }
    fn backend_name(&self) -> &'static str {
        AcceleratorGraph::backend_name(self)
    }
}

/// A graph of any enabled backend. Calls dispatch through a `match` (no vtable), and every
/// backend's graph converts into it with `From`/`into()`.
///
/// Variants name the concrete `Graph<…Impl>` types: coherence cannot see through an associated
/// type projection such as `<MockBackend as Backend>::Graph` when checking `From` impls.
///
/// ```
/// use accel_graph::{AcceleratorGraph, AnyGraph, Backend, BackendKind, GraphOptions};
/// let backend = accel_graph::mock::MockBackend::new();
/// let graphs: Vec<AnyGraph> = vec![backend.graph(GraphOptions::new())?.into()];
/// assert_eq!(graphs[0].kind(), BackendKind::Mock);
/// assert_eq!(graphs[0].backend_name(), "mock");
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
#[enum_dispatch(GraphDispatch)]
#[derive(Debug)]
pub enum AnyGraph {
    /// A mock graph.
    #[cfg(feature = "mock")]
    Mock(Graph<accel_graph_mock::MockGraphImpl>),
    /// A CUDA graph.
    #[cfg(feature = "cuda")]
    Cuda(Graph<accel_graph_cuda::CudaGraphImpl>),
    /// A HIP graph.
    #[cfg(feature = "hip")]
    Hip(Graph<accel_graph_hip::HipGraphImpl>),
    /// A wgpu graph.
    #[cfg(feature = "wgpu")]
    Wgpu(Graph<accel_graph_wgpu::WgpuGraphImpl>),
}

impl AnyGraph {
    /// Which backend the graph belongs to.
    pub fn kind(&self) -> BackendKind {
        match self {
            #[cfg(feature = "mock")]
            AnyGraph::Mock(_) => BackendKind::Mock,
            #[cfg(feature = "cuda")]
            AnyGraph::Cuda(_) => BackendKind::Cuda,
            #[cfg(feature = "hip")]
            AnyGraph::Hip(_) => BackendKind::Hip,
            #[cfg(feature = "wgpu")]
            AnyGraph::Wgpu(_) => BackendKind::Wgpu,
        }
    }
}

impl AcceleratorGraph for AnyGraph {
    fn capture_begin(&mut self) -> Result<()> {
        GraphDispatch::capture_begin(self)
    }
    fn capture_end(&mut self) -> Result<()> {
        GraphDispatch::capture_end(self)
    }
    fn instantiate(&mut self) -> Result<()> {
        GraphDispatch::instantiate(self)
    }
    fn replay(&mut self) -> Result<()> {
        GraphDispatch::replay(self)
    }
    fn reset(&mut self) {
        GraphDispatch::reset(self)
    }
    fn pool(&self) -> Result<PoolId> {
        GraphDispatch::pool(self)
    }
    fn enable_debug_mode(&mut self) {
        GraphDispatch::enable_debug_mode(self)
    }
    fn debug_dump(&self, path: &Path) -> Result<()> {
        GraphDispatch::debug_dump(self, path)
    }
    fn keep_graph(&self) -> bool {
        GraphDispatch::keep_graph(self)
    }
    fn capture_error_mode(&self) -> CaptureErrorMode {
        GraphDispatch::capture_error_mode(self)
    }
    fn state(&self) -> GraphState {
        GraphDispatch::state(self)
    }
    fn nodes(&self) -> Result<GraphTopology> {
        GraphDispatch::nodes(self)
    }
    fn backend_name(&self) -> &'static str {
        GraphDispatch::backend_name(self)
    }
}
