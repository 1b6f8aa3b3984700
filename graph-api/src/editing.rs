//! Graph editing: what a captured graph can become without being captured and instantiated
//! again — its parameters updated (the whole graph from another capture, or one node at a
//! time), other graphs embedded as child nodes, and conditional nodes whose branches and loops
//! the device decides.
//!
//! * **Update.** [`Graph::update_from`](crate::Graph::update_from) (generic code:
//!   [`Backend::update_graph`](crate::Backend::update_graph)) takes the parameters of another
//!   capture with the same topology — node count, node kinds, edges, kernel functions — and
//!   keeps the executable; a mismatch is [`GraphError::UpdateRefused`](crate::GraphError)
//!   naming the [`UpdateConflict`], and leaves the graph as it was.
//!   [`Backend::captured_node`](crate::Backend::captured_node) names the node the last work
//!   issued on the capturing stream became ([`CapturedNode`]); [`Graph::update_node`](
//!   crate::Graph::update_node) (generic code: [`Backend::update_node`](
//!   crate::Backend::update_node)) rebinds one of its buffers or changes one of its scalars. The
//!   memory a graph keeps alive follows its bindings: the new buffer's block is held, the old
//!   one let go once no node of the graph uses it.
//! * **Child graphs.** [`AcceleratorGraph::replay`](crate::AcceleratorGraph::replay) of a
//!   graph while the current stream captures records the graph as one node of that capture (a
//!   `Graph` node); the capturing graph keeps the child's memory alive.
//! * **Conditional nodes.** [`Backend::if_then`](crate::Backend::if_then),
//!   [`Backend::if_else`](crate::Backend::if_else) and
//!   [`Backend::while_loop`](crate::Backend::while_loop) take a condition in device memory (one
//!   element of a `u32`, `i32` or `f32` buffer, written by captured work or uploaded between
//!   replays) and bodies captured from closures; each replay evaluates the condition where the
//!   work runs.
//!
//! ```
//! use accel_graph_api::prelude::*;
//! use accel_graph_mock::MockBackend;
//!
//! let b = MockBackend::new();
//! let s = b.new_stream()?;
//! let (x, y) = (b.alloc_from(&[1.0f32; 4])?, b.alloc_from(&[10.0f32; 4])?);
//! let mut g = b.graph(GraphOptions::new())?;
//! let node = b.capture_on(&s, &mut g, || {
//!     b.add_scalar(&x, 1.0)?;
//!     b.captured_node()
//! })?;
//! g.replay()?; // x = 2
//! // The node now adds 5 to y instead: one buffer rebound, one scalar changed.
//! g.update_node(node, &[(0, KernelArg::buffer(&y)), (1, KernelArg::scalar(5.0f32))])?;
//! g.replay()?;
//! assert_eq!((b.download(&x)?[0], b.download(&y)?[0]), (2.0, 15.0));
//! # Ok::<(), GraphError>(())
//! ```

use std::fmt;

/// A node of a captured graph, named when it was captured
/// ([`Backend::captured_node`](crate::Backend::captured_node)): what
/// [`Graph::update_node`](crate::Graph::update_node) takes. It names a node of the capture it
/// came from only: after a `reset` and a new capture, or given to another graph, it is refused
/// ([`UpdateConflict::UnknownNode`]). An update of the whole graph keeps it valid (the
/// topology is the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapturedNode {
    graph: u64,
    capture: u64,
    index: usize,
}

impl CapturedNode {
    /// The node `index` of capture `capture` of graph `graph` (both numbers the backend's own):
    /// for backend implementors.
    pub fn new(graph: u64, capture: u64, index: usize) -> Self {
        CapturedNode {
            graph,
            capture,
            index,
        }
    }

    /// The graph that captured it (the backend's serial number of the graph).
    pub fn graph(&self) -> u64 {
        self.graph
    }

    /// The capture it came from (the backend's serial number of the capture).
    pub fn capture(&self) -> u64 {
        self.capture
    }

    /// Its place among the nodes the API issued in that capture (ops, kernels, products, host
    /// callbacks, child graphs and conditional nodes, in issue order).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl fmt::Display for CapturedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} of graph {}", self.index, self.graph)
    }
}

/// Why an update was refused ([`GraphError::UpdateRefused`](crate::GraphError)). In every case
/// the graph is left as it was: its executable, its raw graph and the memory it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UpdateConflict {
    /// The two graphs have different numbers of nodes.
    NodeCount,
    /// A node is of another kind (a kernel where a copy was, a child graph where a host
    /// callback was...).
    NodeKind,
    /// The dependency edges differ.
    Edges,
    /// A kernel node runs another function (another portable op, another user kernel, a
    /// product of another shape or type).
    KernelFunction,
    /// The update would change a node's launch shape: the length of a node's operands in a
    /// node update (its grid), or a memset's size (`fill`) in an update of the whole graph.
    LaunchShape,
    /// A buffer of another element type than the node's parameter takes.
    ElementType,
    /// An argument the node cannot take: an index past its parameters, a buffer where a scalar
    /// goes (or the reverse), a scalar of another type, a buffer too short for the kernel.
    Argument,
    /// A node whose parameters cannot be changed one at a time (a host callback, a child graph,
    /// a conditional node, a matrix product): update the whole graph instead. Also a graph
    /// holding conditional nodes given to `update_from` (CUDA cannot copy such a graph): update
    /// its nodes one at a time.
    NotUpdatable,
    /// The [`CapturedNode`] names no node of this graph's capture.
    UnknownNode,
    /// The device's runtime refused the update (its reason is in the message).
    Driver,
}

impl fmt::Display for UpdateConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UpdateConflict::NodeCount => "node count",
            UpdateConflict::NodeKind => "node kind",
            UpdateConflict::Edges => "edges",
            UpdateConflict::KernelFunction => "kernel function",
            UpdateConflict::LaunchShape => "launch shape",
            UpdateConflict::ElementType => "element type",
            UpdateConflict::Argument => "argument",
            UpdateConflict::NotUpdatable => "node not updatable",
            UpdateConflict::UnknownNode => "unknown node",
            UpdateConflict::Driver => "refused by the driver",
        })
    }
}

/// Iterations after which a `while` loop run by the host is taken to loop forever and stops
/// with [`GraphError::WhileLoopLimit`](crate::GraphError::WhileLoopLimit) (a GPU would hang):
/// an eager [`Backend::while_loop`](crate::Backend::while_loop), which reads the condition
/// back before each run, and the replay of a captured loop on the backends that emulate
/// conditional nodes (the mock, wgpu). CUDA's WHILE nodes run on the device, with no limit.
pub const WHILE_ITERATION_LIMIT: u64 = 1 << 20;

/// The kinds of conditional node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionalKind {
    /// One body, run when the condition is true.
    If,
    /// Two bodies: the first when the condition is true, the second when it is false.
    IfElse,
    /// One body, run again and again while the condition is true (checked before each run,
    /// so a false condition runs it not at all).
    While,
}

impl ConditionalKind {
    /// Number of bodies.
    pub fn bodies(self) -> usize {
        match self {
            ConditionalKind::IfElse => 2,
            ConditionalKind::If | ConditionalKind::While => 1,
        }
    }

    /// The name (`"if"`, `"if_else"`, `"while"`).
    pub fn name(self) -> &'static str {
        match self {
            ConditionalKind::If => "if",
            ConditionalKind::IfElse => "if_else",
            ConditionalKind::While => "while",
        }
    }
}

impl fmt::Display for ConditionalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An element type a condition can have: `u32` and `i32` (true when not zero) and `f32`
/// (true when not `0.0`: `-0.0` is false, NaN true). Every backend tests the element's 32 bits
/// against [`ConditionElement::MASK`], which is what makes the three agree bit for bit.
pub trait ConditionElement: crate::Element + sealed::Sealed {
    /// The bits that decide: all of them for the integers; all but the sign for `f32`, so
    /// that both zeros are false.
    const MASK: u32;
}

impl ConditionElement for u32 {
    const MASK: u32 = u32::MAX;
}

impl ConditionElement for i32 {
    const MASK: u32 = u32::MAX;
}

impl ConditionElement for f32 {
    const MASK: u32 = 0x7fff_ffff;
}

/// Whether a condition element's bits `bits` mean true, under `mask`
/// ([`ConditionElement::MASK`]): the one definition every backend follows.
///
/// ```
/// use accel_graph_api::{ConditionElement, condition_holds};
/// assert!(!condition_holds((-0.0f32).to_bits(), f32::MASK));
/// assert!(condition_holds(0.5f32.to_bits(), f32::MASK));
/// assert!(condition_holds(0x8000_0000, u32::MASK));
/// ```
pub fn condition_holds(bits: u32, mask: u32) -> bool {
    bits & mask != 0
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
    impl Sealed for f32 {}
}

/// How an executable graph is instantiated: CUDA's instantiate flags, part of
/// [`GraphOptions`](crate::GraphOptions).
///
/// The default is PyTorch's choice: free graph-owned allocations at each launch and honour
/// per-node priorities. Both hold on every backend. The backend's own allocations inside a
/// capture come from its pools; graph-owned allocations are those the user's own code makes
/// through the driver's stream-ordered allocator on a capturing stream (cudarc's
/// `cuMemAllocAsync`, HIP's `hipMallocAsync`), freed on relaunch on CUDA and HIP. The software
/// backends own none, and HIP and the software backends run nodes without priorities. `device_launch` (a graph
/// that kernels can launch) exists on CUDA only; elsewhere a graph asking for it is refused
/// with [`GraphError::Unsupported`](crate::GraphError) when it is made.
///
/// ```
/// use accel_graph_api::{GraphOptions, InstantiateFlags};
/// let flags = InstantiateFlags::default();
/// assert!(flags.auto_free_on_launch && flags.use_node_priority && !flags.device_launch);
/// let opts = GraphOptions::new().instantiate_flags(InstantiateFlags { device_launch: true, ..flags });
/// assert!(opts.instantiate.device_launch);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InstantiateFlags {
    /// Free memory the graph allocated and did not free before each launch
    /// (`CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`).
    pub auto_free_on_launch: bool,
    /// Run nodes by their priority attributes (`CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY`).
    pub use_node_priority: bool,
    /// Instantiate for launch from device code (`CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`):
    /// the graph may then hold kernels, copies and memsets only, and is refused at
    /// instantiation otherwise.
    pub device_launch: bool,
}

impl Default for InstantiateFlags {
    fn default() -> Self {
        InstantiateFlags {
            auto_free_on_launch: true,
            use_node_priority: true,
            device_launch: false,
        }
    }
}
