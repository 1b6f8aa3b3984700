//! `GraphImpl`: what a backend implements for graphs. The front object ([`crate::Graph`])
//! owns the state machine and dispatches here only when a call is legal.

use std::path::Path;

use crate::{
    CaptureErrorMode, CapturedNode, Graph, GraphError, GraphOptions, GraphTopology, PoolId, Result,
    kernel::KernelArg,
};

/// The backend half of a graph — PyTorch's `GraphImplInterface` — called by [`crate::Graph`]
/// only in legal states, so implementations need no state checks of their own.
pub trait GraphImpl: Send + 'static {
    /// The raw (captured, not instantiated) graph, as [`Graph::raw_graph`] hands it out.
    type RawGraph;
    /// The executable graph, as [`Graph::executable`] hands it out.
    type Executable;
    /// The memory under the backend's buffers, as kernel arguments carry it (the backend's
    /// [`PortableOps::Memory`](crate::PortableOps::Memory)).
    type Memory: 'static;

    /// Backend name for diagnostics.
    fn backend_name(&self) -> &'static str;

    /// Begins capture on the calling thread's current stream, allocating from `pool` (a
    /// private pool the backend issues when `None`) and enforcing `mode` (already resolved:
    /// never `Default`). Returns the pool used. On error nothing is capturing.
    fn capture_begin(&mut self, pool: Option<PoolId>, mode: CaptureErrorMode) -> Result<PoolId>;

    /// Ends the capture and keeps the raw graph; returns its node count.
    ///
    /// On error the capture is over and everything it held is released, except for errors with
    /// [`crate::GraphError::capture_still_active`], after which the capture goes on.
    fn capture_end(&mut self) -> Result<usize>;

    /// Builds the executable graph from the raw graph, replacing any earlier executable.
    fn instantiate(&mut self) -> Result<()>;

    /// Launches the executable graph on the calling thread's current stream.
    fn replay(&mut self) -> Result<()>;

    /// Drops the raw graph, keeping the executable one. An implementation may keep a copy for
    /// graph editing (updates, use as a child graph) while the front object refuses access to
    /// it ([`GraphError::RawGraphUnavailable`]).
    fn drop_raw_graph(&mut self);

    /// Drops everything (aborting a capture in progress) and releases the graph's holds on
    /// its pool and on the memory its work used.
    fn reset(&mut self);

    /// Writes the raw graph as DOT to `path`. The default renders [`GraphImpl::topology`]
    /// (graph named `accel_graph_<backend>`); backends with a native dump (CUDA's
    /// `cuGraphDebugDotPrint`) override it.
    fn debug_dump(&self, path: &Path) -> Result<()> {
        write_topology_dot(self, path)
    }

    /// Nodes and edges of the raw graph.
    fn topology(&self) -> Result<GraphTopology>;

    /// The raw graph, while one exists.
    fn raw_graph(&self) -> Option<&Self::RawGraph>;

    /// The executable graph, once instantiated.
    fn executable(&self) -> Option<&Self::Executable>;

    /// Takes the parameters of `other` (captured by the same backend instance, with the same
    /// topology), keeping the executable (see [`Graph::update_from`]). Called with both graphs
    /// captured. On error nothing changed.
    fn update_from(&mut self, other: &Self) -> Result<()> {
        let _ = other;
        Err(GraphError::Unsupported {
            what: format!("graph update on the {} backend", self.backend_name()),
        })
    }

    /// Sets arguments of one node (see [`Graph::update_node`]). Called with the graph
    /// captured. On error nothing changed.
    fn update_node(
        &mut self,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, Self::Memory>)],
    ) -> Result<()> {
        let _ = (node, args);
        Err(GraphError::Unsupported {
            what: format!("node update on the {} backend", self.backend_name()),
        })
    }
}

/// Wraps a backend's graph implementation in the front object (what a backend's
/// `Backend::graph` returns). Fails on an invalid pool id.
pub fn new_graph<I: GraphImpl>(imp: I, options: GraphOptions) -> Result<Graph<I>> {
    Graph::new(imp, options)
}

/// Writes `graph`'s topology as DOT to `path`: the default [`GraphImpl::debug_dump`], also the
/// fallback of backends whose native dump is missing at run time.
pub fn write_topology_dot<G: GraphImpl + ?Sized>(graph: &G, path: &Path) -> Result<()> {
    let name = format!("accel_graph_{}", graph.backend_name());
    std::fs::write(path, graph.topology()?.to_dot(&name)).map_err(|e| GraphError::io(path, e))
}
