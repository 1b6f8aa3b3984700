//! `DriverEditing`: what graph editing needs from a driver — naming captured nodes, copying
//! graphs, updating executables (whole or node by node), child-graph nodes and conditional
//! nodes.

use std::fmt;

use accel_graph_api::{CaptureErrorMode, ConditionalKind, PortableOp, kernel::Kernel};

use super::{Bytes, DriverGraphs, DriverKernels, DriverResult, RawArg, Region};

/// Where a capturing stream stands: the graph it captures into (a top-level capture's graph,
/// or a conditional node's body), named by a number unique among the graphs capturing, and
/// the node its last work became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturePoint<K> {
    /// The graph the stream captures into.
    pub graph: u64,
    /// The node the stream's last work became: `None` before any work, or when the stream's
    /// frontier is not one node (after a join).
    pub last: Option<K>,
}

/// Graph editing of a driver.
///
/// The driver layer decides what may be edited (same topology, same launch shapes, same
/// element types, nodes the API issued) and keeps the memory alive; a driver only applies
/// edits its own graphs can take.
pub trait DriverEditing: DriverKernels + DriverGraphs {
    /// Names a node of a captured graph (CUDA's `CUgraphNode`, an index for software graphs).
    type NodeKey: Copy + Eq + Send + Sync + fmt::Debug + 'static;
    /// A conditional node whose bodies are being captured.
    type Conditional: Send;

    /// Where the capturing `stream` stands; `None` if it is not capturing.
    fn capture_point(
        &self,
        stream: &Self::Stream,
    ) -> DriverResult<Option<CapturePoint<Self::NodeKey>>>;

    /// A copy of `graph`, with every node's parameters.
    fn clone_graph(&self, graph: &Self::Graph) -> DriverResult<Self::Graph>;

    /// The node of `clone` (a [`clone_graph`](Self::clone_graph) copy of `original`) that
    /// copies `original`'s node `key`.
    fn find_in_clone(
        &self,
        key: Self::NodeKey,
        original: &Self::Graph,
        clone: &Self::Graph,
    ) -> DriverResult<Self::NodeKey>;

    /// Gives `exec` — instantiated from `source` — the parameters of `graph`, which has
    /// `source`'s topology (checked by the driver layer for what it issued; the driver refuses
    /// what its own graphs cannot take). On error `exec` is unchanged.
    fn update_exec(
        &self,
        exec: &mut Self::Exec,
        source: &Self::Graph,
        graph: &Self::Graph,
    ) -> DriverResult<()>;

    /// Sets the op node `key` of `graph` to `op` (the op it was captured as, with other
    /// operands or scalar, operands of the same lengths), and the same node of `exec` (`exec`'s
    /// own name for it, a node of the graph it was instantiated from) if given.
    ///
    /// # Safety
    /// As [`DriverOps::launch_op`](super::DriverOps::launch_op) for a capture: every region
    /// lies inside its live block, kept alive by the caller as long as the graph or the
    /// executable can launch.
    unsafe fn set_op(
        &self,
        graph: &mut Self::Graph,
        key: Self::NodeKey,
        exec: Option<(&mut Self::Exec, Self::NodeKey)>,
        op: PortableOp<Region<'_, Self::Block>>,
    ) -> DriverResult<()>;

    /// Sets the arguments of the kernel node `key` of `graph` (a launch of `module`, compiled
    /// from `kernel`, over `grid`) to `args`, and of the same node of `exec` if given.
    ///
    /// # Safety
    /// As [`DriverKernels::launch_kernel`]: every buffer argument's bytes lie inside its live
    /// block, kept alive by the caller as long as the graph or the executable can launch.
    // `launch_kernel`'s arguments, plus the node to set in the graph and in the executable.
    #[allow(clippy::too_many_arguments)]
    unsafe fn set_kernel(
        &self,
        graph: &mut Self::Graph,
        key: Self::NodeKey,
        exec: Option<(&mut Self::Exec, Self::NodeKey)>,
        module: &Self::Module,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, Self::Block>],
    ) -> DriverResult<()>;

    /// Adds `child` as one node of the capture `stream` takes part in, after the stream's
    /// last work; the stream's next work follows it.
    ///
    /// # Safety
    /// `stream` must be capturing through the driver layer, which keeps the memory and host
    /// callbacks of `child`'s work alive for the capturing graph.
    unsafe fn launch_child(&self, child: &Self::Graph, stream: &Self::Stream) -> DriverResult<()>;

    /// `Ok` when conditional nodes of `kind` can be captured; else why not (the driver version
    /// or the device that lacks them), for the `Unsupported` error.
    fn conditional_support(&self, kind: ConditionalKind) -> Result<(), String>;

    /// Begins a conditional node of `kind` on the capturing `stream`, deciding by the 32 bits
    /// at `cond` under `mask` ([`accel_graph_api::condition_holds`]). Its bodies are then
    /// captured one after the other ([`begin_branch`](Self::begin_branch) …
    /// [`end_branch`](Self::end_branch)), and [`end_conditional`](Self::end_conditional)
    /// puts the node in the stream's order. Dropping the value instead abandons the node; the
    /// driver layer then invalidates the capture.
    ///
    /// # Safety
    /// `stream` must be capturing through the driver layer, and `cond`'s block be kept alive
    /// by the capture's graph.
    unsafe fn begin_conditional(
        &self,
        stream: &Self::Stream,
        kind: ConditionalKind,
        cond: Bytes<'_, Self::Block>,
        mask: u32,
    ) -> DriverResult<Self::Conditional>;

    /// Begins capturing body `branch` of `conditional` on `body`, a stream of its own that
    /// takes part in no capture, in `mode`.
    ///
    /// # Safety
    /// The driver layer must count `body` as a member of the enclosing capture (so the work
    /// issued on it is kept alive by its graph) until [`end_branch`](Self::end_branch).
    unsafe fn begin_branch(
        &self,
        conditional: &mut Self::Conditional,
        branch: usize,
        body: &Self::Stream,
        mode: CaptureErrorMode,
    ) -> DriverResult<()>;

    /// Ends the capture of body `branch` on `body`; `body` captures no more, whatever the
    /// result.
    ///
    /// # Safety
    /// Only for a body begun with [`begin_branch`](Self::begin_branch).
    unsafe fn end_branch(
        &self,
        conditional: &mut Self::Conditional,
        branch: usize,
        body: &Self::Stream,
    ) -> DriverResult<()>;

    /// Puts the conditional node, every body captured, in `stream`'s capture.
    ///
    /// # Safety
    /// `stream` is the capturing stream the node was begun on.
    unsafe fn end_conditional(
        &self,
        conditional: Self::Conditional,
        stream: &Self::Stream,
    ) -> DriverResult<()>;
}
