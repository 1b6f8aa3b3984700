//! `DriverGraphs`: instantiating, launching and reading captured graphs.

use std::path::Path;

use accel_graph_api::{GraphTopology, InstantiateFlags};

use super::{DriverCapture, DriverResult};

/// Graphs of a driver.
pub trait DriverGraphs: DriverCapture {
    /// An executable graph (dropping it releases it; a launch in flight finishes first).
    type Exec: Send + 'static;

    /// Builds the executable graph with `flags` (which the driver layer checked against
    /// `capabilities().device_launch`).
    fn instantiate(&self, graph: &Self::Graph, flags: InstantiateFlags)
    -> DriverResult<Self::Exec>;

    /// Uploads the executable ahead of its first launch, in `stream`'s order (a no-op where
    /// `capabilities().graph_upload` is false).
    fn upload_exec(&self, exec: &Self::Exec, stream: &Self::Stream) -> DriverResult<()>;

    /// Launches the executable graph on `stream`.
    ///
    /// # Safety
    /// The memory the executable's capture touches and the data of its host callbacks must be
    /// alive (the graph that owns the executable holds them), and `stream` must not be
    /// capturing.
    unsafe fn launch_exec(&self, exec: &Self::Exec, stream: &Self::Stream) -> DriverResult<()>;

    /// Number of nodes of a captured graph.
    fn node_count(&self, graph: &Self::Graph) -> DriverResult<usize>;

    /// Nodes and edges of a captured graph.
    fn topology(&self, graph: &Self::Graph) -> DriverResult<GraphTopology>;

    /// Writes the driver's own DOT dump of `graph` to `path`; `None` where the driver has none
    /// (the topology is rendered instead).
    fn dot_dump(&self, graph: &Self::Graph, path: &Path) -> Option<DriverResult<()>> {
        let _ = (graph, path);
        None
    }
}
