//! Graph editing in the driver layer, written once for every driver: the record of the nodes
//! the API issued in a capture (what they are, the memory they bind), the rules an update
//! follows (same topology, same launch shapes, same element types), and conditional nodes
//! (their bodies captured from closures on streams of their own).
//!
//! ## Records
//!
//! Every op, kernel launch, product, host callback, child graph and conditional node issued
//! through the API on a capturing stream leaves a [`NodeRecord`] in its capture: the driver's
//! name of the node ([`DriverEditing::capture_point`] right after the issue) and, for ops and
//! kernels, the buffers and scalars it was issued with. A graph keeps the records of its
//! capture; [`accel_graph_api::CapturedNode`] is an index into them. Work of a conditional
//! node's body is recorded as [`Signature`]s of that body only (its nodes cannot be updated one
//! at a time), so that two graphs' bodies can still be compared.
//!
//! ## What an update may change
//!
//! Buffers (bound to views of the same length and element type) and scalars, on every
//! backend the same. [`update_from`](crate::DriverGraph) also lets kernel nodes take another
//! grid (a portable op of another length: CUDA updates a kernel node's grid in place) and
//! one-dimensional copies another size (`copy`), but not a memset's size (`fill`), which CUDA
//! documents it may refuse to update: refusing it everywhere keeps the backends' answers the
//! same.

use std::{
    collections::HashMap,
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use accel_graph_api::{
    CapturedNode, ConditionElement, ConditionalKind, DeviceBuffer, FloatType, Gemm, GraphError,
    PortableOp, Result, UpdateConflict, View, WHILE_ITERATION_LIMIT,
    backend_kit::pools::BlockId,
    condition_holds,
    kernel::{Access, ElementType, Kernel, Param, Scalar},
};

use crate::{
    Driver, DriverBackend, DriverBuffer, DriverStream,
    api::{Bytes, CapturePoint, RawArg, Region},
    buffer::BufferMemory,
    capture::CaptureEntry,
    errors::CallSite,
    shared::Shared,
};

/// Refuses instantiate flags the backend cannot honour: only device launch is not portable
/// (see [`accel_graph_api::InstantiateFlags`]).
pub(crate) fn check_flags<D: Driver>(
    shared: &Shared<D>,
    flags: accel_graph_api::InstantiateFlags,
) -> Result<()> {
    if flags.device_launch && !shared.capabilities.device_launch {
        return Err(GraphError::Unsupported {
            what: format!(
                "instantiating graphs for device launch on {} (capabilities().device_launch \
                 is false)",
                shared.capabilities.device_name
            ),
        });
    }
    Ok(())
}

/// Serial numbers of captures, for [`CapturedNode`].
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

/// A buffer operand of a recorded node: elements `offset .. offset + len` of a block.
pub(crate) struct Bound<D: Driver> {
    pub(crate) block: D::Block,
    pub(crate) id: BlockId,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) element: ElementType,
}

impl<D: Driver> Clone for Bound<D> {
    fn clone(&self) -> Self {
        Bound {
            block: self.block.clone(),
            id: self.id,
            offset: self.offset,
            len: self.len,
            element: self.element,
        }
    }
}

impl<D: Driver> Bound<D> {
    /// The bytes bound, in the block (checked against the memory when bound).
    fn byte_range(&self) -> std::ops::Range<usize> {
        let size = self.element.size();
        self.offset.saturating_mul(size)..self.offset.saturating_add(self.len).saturating_mul(size)
    }

    /// True when both bind at least one common byte of one block.
    fn shares_bytes_with(&self, other: &Self) -> bool {
        let (a, b) = (self.byte_range(), other.byte_range());
        self.id == other.id && !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
    }

    /// True when both bind the same elements of one block.
    fn is_same_view(&self, other: &Self) -> bool {
        self.id == other.id && self.byte_range() == other.byte_range()
    }

    /// The operand a view of a buffer of this instance is.
    pub(crate) fn of_memory(
        memory: &BufferMemory<D>,
        offset: usize,
        len: usize,
        element: ElementType,
    ) -> Self {
        Bound {
            block: memory.block().clone(),
            id: memory.allocation().get().id(),
            offset,
            len,
            element,
        }
    }

    /// The operand `view` is.
    pub(crate) fn of_view<T: accel_graph_api::Element>(
        view: &View<'_, DriverBuffer<D, T>>,
    ) -> Self {
        Self::of_memory(
            view.buffer().as_ref(),
            view.offset(),
            view.len(),
            ElementType::of::<T>(),
        )
    }

    fn region(&self) -> Region<'_, D::Block> {
        Region {
            block: &self.block,
            offset: self.offset,
            len: self.len,
        }
    }

    fn bytes(&self) -> Bytes<'_, D::Block> {
        Bytes {
            block: &self.block,
            offset: self.offset.saturating_mul(self.element.size()),
            len: self.len.saturating_mul(self.element.size()),
        }
    }
}

/// An argument of a recorded kernel launch.
pub(crate) enum BoundArg<D: Driver> {
    Buffer { bound: Bound<D>, access: Access },
    Scalar(Scalar),
}

impl<D: Driver> Clone for BoundArg<D> {
    fn clone(&self) -> Self {
        match self {
            BoundArg::Buffer { bound, access } => BoundArg::Buffer {
                bound: bound.clone(),
                access: *access,
            },
            BoundArg::Scalar(s) => BoundArg::Scalar(*s),
        }
    }
}

/// A recorded kernel launch.
pub(crate) struct KernelWork<D: Driver> {
    pub(crate) kernel: Kernel,
    pub(crate) module: Arc<D::Module>,
    pub(crate) grid: [u32; 3],
    pub(crate) args: Vec<BoundArg<D>>,
}

impl<D: Driver> Clone for KernelWork<D> {
    fn clone(&self) -> Self {
        KernelWork {
            kernel: self.kernel.clone(),
            module: Arc::clone(&self.module),
            grid: self.grid,
            args: self.args.clone(),
        }
    }
}

/// What a recorded node does.
pub(crate) enum Work<D: Driver> {
    /// A portable op, with its operands: its buffers and scalar can be set.
    Op(PortableOp<Bound<D>>),
    /// A user kernel's launch: its arguments can be set.
    Kernel(KernelWork<D>),
    /// Work whose parameters are set only by an update of the whole graph.
    Fixed(Signature),
}

impl<D: Driver> Clone for Work<D> {
    fn clone(&self) -> Self {
        match self {
            Work::Op(op) => Work::Op(op.as_ref().map(Bound::clone)),
            Work::Kernel(k) => Work::Kernel(k.clone()),
            Work::Fixed(s) => Work::Fixed(s.clone()),
        }
    }
}

impl<D: Driver> Work<D> {
    /// What an update compares it by.
    pub(crate) fn signature(&self) -> Signature {
        match self {
            Work::Op(op) => Signature::Op {
                name: op.name(),
                len: op.as_ref().operands().0.len,
            },
            Work::Kernel(k) => Signature::Kernel {
                id: k.kernel.id(),
                name: k.kernel.name().to_owned(),
            },
            Work::Fixed(s) => s.clone(),
        }
    }
}

/// One node the API issued in a capture.
pub(crate) struct NodeRecord<D: Driver> {
    /// The driver's name of the node in the graph's raw graph.
    pub(crate) key: Option<D::NodeKey>,
    /// The driver's name of the node in the graph its executable was instantiated from.
    pub(crate) exec_key: Option<D::NodeKey>,
    pub(crate) work: Work<D>,
}

impl<D: Driver> Clone for NodeRecord<D> {
    fn clone(&self) -> Self {
        NodeRecord {
            key: self.key,
            exec_key: self.exec_key,
            work: self.work.clone(),
        }
    }
}

/// What an update compares a node by: its kind, its function, and what fixes its launch shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Signature {
    /// A portable op over operands of `len` elements.
    Op { name: &'static str, len: usize },
    /// A user kernel.
    Kernel { id: u64, name: String },
    /// A matrix product.
    Gemm { spec: Gemm, dtype: FloatType },
    /// A host callback.
    Host,
    /// A child graph and its nodes.
    Child(Vec<Signature>),
    /// A conditional node, the mask of its condition's type, and its bodies' nodes.
    Conditional {
        kind: ConditionalKind,
        mask: u32,
        bodies: Vec<Vec<Signature>>,
    },
}

impl Signature {
    fn describe(&self) -> String {
        match self {
            Signature::Op { name, len } => format!("{name} over {len} elements"),
            Signature::Kernel { name, .. } => format!("kernel {name}"),
            Signature::Gemm { spec, dtype } => {
                format!("{dtype} gemm {}x{}x{}", spec.m, spec.n, spec.k)
            }
            Signature::Host => "host callback".to_owned(),
            Signature::Child(nodes) => format!("child graph of {} node(s)", nodes.len()),
            Signature::Conditional { kind, .. } => format!("{kind} node"),
        }
    }

    fn kind_name(&self) -> &'static str {
        match self {
            Signature::Op { .. } => "portable op",
            Signature::Kernel { .. } => "user kernel",
            Signature::Gemm { .. } => "gemm",
            Signature::Host => "host callback",
            Signature::Child(_) => "child graph",
            Signature::Conditional { .. } => "conditional node",
        }
    }

    /// True if it is, or embeds, a conditional node.
    pub(crate) fn has_conditional(&self) -> bool {
        match self {
            Signature::Conditional { .. } => true,
            Signature::Child(nodes) => nodes.iter().any(Signature::has_conditional),
            _ => false,
        }
    }

    /// True if it or anything it embeds is a host callback.
    pub(crate) fn has_host(&self) -> bool {
        match self {
            Signature::Host => true,
            Signature::Child(nodes) => nodes.iter().any(Signature::has_host),
            Signature::Conditional { bodies, .. } => bodies.iter().flatten().any(Self::has_host),
            _ => false,
        }
    }
}

/// Why two graphs cannot update into each other.
pub(crate) struct Mismatch {
    pub(crate) conflict: UpdateConflict,
    pub(crate) node: Option<usize>,
    pub(crate) reason: String,
}

impl Mismatch {
    pub(crate) fn into_error(self) -> GraphError {
        GraphError::UpdateRefused {
            conflict: self.conflict,
            node: self.node,
            reason: self.reason,
        }
    }
}

/// Why a graph holding conditional nodes is not updated from another: CUDA cannot copy such a
/// graph (`cuGraphClone`), and an update copies the source's raw graph into the updated one
/// (so that a later instantiation has the new parameters). Refused on every backend alike.
pub(crate) const CONDITIONAL_UPDATE: &str = "graphs holding conditional nodes are not updated \
    from another capture (CUDA cannot copy a graph with conditional nodes, which the update \
    needs); update their nodes one at a time, or capture again";

/// Why a graph holding conditional nodes is not embedded as a child graph: CUDA's child-graph
/// nodes cannot hold conditional nodes. Refused on every backend alike.
pub(crate) const CONDITIONAL_CHILD: &str = "a graph holding conditional nodes as a child-graph \
    node (CUDA's child-graph nodes cannot hold conditional nodes); capture its work into the \
    parent instead";

/// Compares the nodes of two graphs (`mine` updated from `theirs`); `path` names where they
/// sit (empty at the top).
pub(crate) fn compare(
    mine: &[Signature],
    theirs: &[Signature],
    path: &str,
) -> std::result::Result<(), Mismatch> {
    let top = path.is_empty();
    if mine.len() != theirs.len() {
        return Err(Mismatch {
            conflict: UpdateConflict::NodeCount,
            node: None,
            reason: format!(
                "{path}the graph has {} node(s) issued through the API, the other {}",
                mine.len(),
                theirs.len()
            ),
        });
    }
    for (i, (a, b)) in mine.iter().zip(theirs).enumerate() {
        let node = top.then_some(i);
        let refuse = |conflict, what: String| Mismatch {
            conflict,
            node,
            reason: format!("{path}node {i}: {what}"),
        };
        match (a, b) {
            (Signature::Op { name: n1, len: l1 }, Signature::Op { name: n2, len: l2 }) => {
                if n1 != n2 {
                    return Err(refuse(
                        UpdateConflict::KernelFunction,
                        format!("{n1} cannot become {n2}"),
                    ));
                }
                // Memsets keep their size (see the module documentation).
                if l1 != l2 && *n1 == "fill" {
                    return Err(refuse(
                        UpdateConflict::LaunchShape,
                        format!(
                            "{n1} over {l1} elements cannot become one over {l2} (a memset's \
                             size is fixed at instantiation)"
                        ),
                    ));
                }
            }
            (Signature::Kernel { id: i1, name: n1 }, Signature::Kernel { id: i2, name: n2 }) => {
                if i1 != i2 {
                    return Err(refuse(
                        UpdateConflict::KernelFunction,
                        format!("kernel {n1} cannot become kernel {n2} (another definition)"),
                    ));
                }
            }
            (
                Signature::Gemm {
                    spec: s1,
                    dtype: d1,
                },
                Signature::Gemm {
                    spec: s2,
                    dtype: d2,
                },
            ) => {
                let shape = |s: &Gemm| (s.m, s.n, s.k, s.transpose_a, s.transpose_b, s.batch);
                if d1 != d2 || shape(s1) != shape(s2) {
                    return Err(refuse(
                        UpdateConflict::KernelFunction,
                        format!("{} cannot become {}", a.describe(), b.describe()),
                    ));
                }
            }
            (Signature::Host, Signature::Host) => {}
            (Signature::Child(c1), Signature::Child(c2)) => {
                compare(c1, c2, &format!("{path}node {i} (child graph) > "))
                    .map_err(|m| Mismatch { node, ..m })?;
            }
            (
                Signature::Conditional {
                    kind: k1,
                    mask: m1,
                    bodies: b1,
                },
                Signature::Conditional {
                    kind: k2,
                    mask: m2,
                    bodies: b2,
                },
            ) => {
                if k1 != k2 {
                    return Err(refuse(
                        UpdateConflict::NodeKind,
                        format!("an {k1} node cannot become an {k2} node"),
                    ));
                }
                if m1 != m2 {
                    return Err(refuse(
                        UpdateConflict::ElementType,
                        "the condition's element type differs (f32 against an integer)".to_owned(),
                    ));
                }
                for (j, (x, y)) in b1.iter().zip(b2).enumerate() {
                    compare(x, y, &format!("{path}node {i} ({k1} body {j}) > "))
                        .map_err(|m| Mismatch { node, ..m })?;
                }
            }
            _ => {
                return Err(refuse(
                    UpdateConflict::NodeKind,
                    format!("a {} cannot become a {}", a.kind_name(), b.kind_name()),
                ));
            }
        }
    }
    Ok(())
}

/// The nodes the API issued in one capture, as its entry collects them.
pub(crate) struct Recorded<D: Driver> {
    /// The capture's serial number.
    pub(crate) capture: u64,
    /// The driver's number of the capture's own graph (not a conditional body's).
    pub(crate) top_graph: Option<u64>,
    /// The top-level nodes, in issue order.
    pub(crate) nodes: Vec<NodeRecord<D>>,
    /// The nodes of conditional bodies being captured, by the body's graph.
    scoped: HashMap<u64, Vec<Signature>>,
    /// Per stream: the top-level node its last work became (`None`: a body's node). A capture
    /// has a few streams: a list is cheaper per op than a map.
    last: Vec<(u64, Option<usize>)>,
    /// Streams capturing a conditional body now.
    bodies: Vec<u64>,
    /// Conditional nodes begun and not yet ended (their bodies included): the capture must not
    /// end under them.
    open_conditionals: usize,
    /// The capture's abort, when its graph was reset or dropped while conditional nodes were
    /// open: run as the last of them ends.
    abandoned: Option<Box<dyn FnOnce() + Send>>,
}

impl<D: Driver> Default for Recorded<D> {
    fn default() -> Self {
        Recorded {
            capture: NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed),
            top_graph: None,
            nodes: Vec::new(),
            scoped: HashMap::new(),
            last: Vec::new(),
            bodies: Vec::new(),
            open_conditionals: 0,
            abandoned: None,
        }
    }
}

impl<D: Driver> Recorded<D> {
    /// Records `work`, issued on the stream `stream` which now stands at `point`.
    fn push(&mut self, stream: u64, point: Option<CapturePoint<D::NodeKey>>, work: Work<D>) {
        let graph = point.map(|p| p.graph);
        let top = match (graph, self.top_graph) {
            (Some(g), Some(top)) => g == top,
            _ => !self.body_stream(stream),
        };
        if top {
            let key = point.and_then(|p| p.last);
            self.set_last(stream, Some(self.nodes.len()));
            self.nodes.push(NodeRecord {
                key,
                exec_key: key,
                work,
            });
        } else {
            self.set_last(stream, None);
            if let Some(g) = graph {
                self.scoped.entry(g).or_default().push(work.signature());
            }
        }
    }

    fn set_last(&mut self, stream: u64, node: Option<usize>) {
        match self.last.iter_mut().find(|(s, _)| *s == stream) {
            Some(entry) => entry.1 = node,
            None => self.last.push((stream, node)),
        }
    }

    /// What the last work issued on `stream` became: `None` if it issued none.
    fn last_on(&self, stream: u64) -> Option<Option<usize>> {
        self.last
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|(_, n)| *n)
    }

    /// The signatures recorded into body graph `graph`.
    fn take_scope(&mut self, graph: u64) -> Vec<Signature> {
        self.scoped.remove(&graph).unwrap_or_default()
    }

    /// True while a conditional node is being built: from its begin in the driver, through
    /// its bodies, to its end.
    pub(crate) fn conditional_open(&self) -> bool {
        self.open_conditionals > 0
    }

    /// Keeps `abort` for the thread that ends the last open conditional node, if one is open;
    /// else gives it back, to run now (without this record's lock).
    pub(crate) fn abandon(
        &mut self,
        abort: Box<dyn FnOnce() + Send>,
    ) -> Option<Box<dyn FnOnce() + Send>> {
        if self.conditional_open() {
            self.abandoned = Some(abort);
            None
        } else {
            Some(abort)
        }
    }

    /// True while `stream` captures a conditional body.
    fn body_stream(&self, stream: u64) -> bool {
        self.bodies.contains(&stream)
    }

    /// Whether `graph` (a driver's graph number) is one of a conditional body's: any graph of
    /// the capture but its own.
    pub(crate) fn is_body_graph(&self, graph: Option<u64>) -> bool {
        matches!((graph, self.top_graph), (Some(g), Some(top)) if g != top)
    }
}

/// Whether `stream` captures into a conditional node's body of `entry`'s capture: a body's own
/// stream, or a stream forked from one (it captures into the body's graph).
pub(crate) fn in_body<D: Driver>(
    shared: &Shared<D>,
    entry: &CaptureEntry<D>,
    stream: &DriverStream<D>,
) -> bool {
    in_body_at(entry, stream, capture_graph(shared, stream))
}

/// [`in_body`] for a stream the driver said captures into `graph` now.
pub(crate) fn in_body_at<D: Driver>(
    entry: &CaptureEntry<D>,
    stream: &DriverStream<D>,
    graph: Option<u64>,
) -> bool {
    let recorded = entry.recorded();
    recorded.body_stream(stream.inner.key) || recorded.is_body_graph(graph)
}

/// The driver's number of the graph `stream` captures into now (a capture's own or a
/// conditional body's), if it captures and the driver can tell.
pub(crate) fn capture_graph<D: Driver>(
    shared: &Shared<D>,
    stream: &DriverStream<D>,
) -> Option<u64> {
    shared
        .driver
        .capture_point(&stream.inner.raw)
        .ok()
        .flatten()
        .map(|p| p.graph)
}

/// The refusal of host work (a host callback, an external event) inside a conditional body.
pub(crate) fn not_in_body(what: &str) -> GraphError {
    GraphError::Unsupported {
        what: format!(
            "{what} inside a conditional node's body (conditional bodies hold device work \
             only: kernels, copies, memsets, child graphs and conditional nodes)"
        ),
    }
}

/// Records `work` (made only if the stream captures) for the capture `entry` that `stream`
/// takes part in, right after the driver issued it.
pub(crate) fn record<D: Driver>(
    shared: &Shared<D>,
    entry: &CaptureEntry<D>,
    stream: &DriverStream<D>,
    work: impl FnOnce() -> Work<D>,
) {
    // A driver that cannot tell where the stream stands leaves the node unnamed: it is still
    // compared by updates of the whole graph, but cannot be updated alone.
    let point = shared
        .driver
        .capture_point(&stream.inner.raw)
        .ok()
        .flatten();
    let work = work();
    entry.recorded().push(stream.inner.key, point, work);
}

/// Notes the capture's own graph, right after the driver began it on `stream`.
pub(crate) fn note_top_graph<D: Driver>(
    shared: &Shared<D>,
    entry: &CaptureEntry<D>,
    stream: &DriverStream<D>,
) {
    if let Ok(Some(point)) = shared.driver.capture_point(&stream.inner.raw) {
        entry.recorded().top_graph = Some(point.graph);
    }
}

/// A portable op's parameters in declaration order.
enum OpParam<D: Driver> {
    Buffer(Bound<D>),
    Scalar(f32),
}

fn op_params<D: Driver>(op: &PortableOp<Bound<D>>) -> Vec<OpParam<D>> {
    let b = |x: &Bound<D>| OpParam::Buffer(x.clone());
    match op {
        PortableOp::Fill { x, value } => vec![b(x), OpParam::Scalar(*value)],
        PortableOp::Copy { dst, src } => vec![b(dst), b(src)],
        PortableOp::AddScalar { x, c } => vec![b(x), OpParam::Scalar(*c)],
        PortableOp::Scale { x, a } => vec![b(x), OpParam::Scalar(*a)],
        PortableOp::Axpy { y, a, x } => vec![b(y), OpParam::Scalar(*a), b(x)],
        PortableOp::Mul { y, x } => vec![b(y), b(x)],
    }
}

/// `op` with the parameters `params` (of the shape [`op_params`] gave).
fn op_with<D: Driver>(
    op: &PortableOp<Bound<D>>,
    params: Vec<OpParam<D>>,
) -> Option<PortableOp<Bound<D>>> {
    let mut buffers = Vec::new();
    let mut scalar = 0.0;
    for p in params {
        match p {
            OpParam::Buffer(b) => buffers.push(b),
            OpParam::Scalar(s) => scalar = s,
        }
    }
    let mut buffers = buffers.into_iter();
    let mut next = || buffers.next();
    Some(match op {
        PortableOp::Fill { .. } => PortableOp::Fill {
            x: next()?,
            value: scalar,
        },
        PortableOp::Copy { .. } => PortableOp::Copy {
            dst: next()?,
            src: next()?,
        },
        PortableOp::AddScalar { .. } => PortableOp::AddScalar {
            x: next()?,
            c: scalar,
        },
        PortableOp::Scale { .. } => PortableOp::Scale {
            x: next()?,
            a: scalar,
        },
        PortableOp::Axpy { .. } => PortableOp::Axpy {
            y: next()?,
            a: scalar,
            x: next()?,
        },
        PortableOp::Mul { .. } => PortableOp::Mul {
            y: next()?,
            x: next()?,
        },
    })
}

/// A node update resolved and checked: the new work, and the blocks it binds that the old
/// did not (with the memory to hold them) and the other way round.
pub(crate) struct Rebinding<'a, D: Driver> {
    pub(crate) work: Work<D>,
    pub(crate) added: Vec<&'a BufferMemory<D>>,
    pub(crate) removed: Vec<BlockId>,
}

fn refused(node: usize, conflict: UpdateConflict, reason: String) -> GraphError {
    GraphError::UpdateRefused {
        conflict,
        node: Some(node),
        reason,
    }
}

/// The buffer a new argument binds, checked to be of this instance.
fn new_buffer<'a, D: Driver>(
    instance: u64,
    arg: &accel_graph_api::kernel::KernelArg<'a, BufferMemory<D>>,
) -> Result<Option<(&'a BufferMemory<D>, Bound<D>)>> {
    match *arg {
        accel_graph_api::kernel::KernelArg::Buffer(view) => {
            // Checked against the live memory, as a launch's arguments are.
            view.memory().checked_bytes(instance, &view)?;
            let memory = view.memory();
            Ok(Some((
                memory,
                Bound::of_memory(memory, view.offset(), view.len(), view.element()),
            )))
        }
        accel_graph_api::kernel::KernelArg::Scalar(_) => Ok(None),
    }
}

/// Resolves `args` against the recorded `work` of node `node`: checks every argument and
/// returns the new work.
pub(crate) fn rebind<'a, D: Driver>(
    instance: u64,
    node: usize,
    work: &Work<D>,
    args: &[(
        usize,
        accel_graph_api::kernel::KernelArg<'a, BufferMemory<D>>,
    )],
) -> Result<Rebinding<'a, D>> {
    let mut added = Vec::new();
    let mut removed = Vec::new();
    match work {
        Work::Op(op) => {
            let mut params = op_params(op);
            for (index, arg) in args {
                let Some(param) = params.get_mut(*index) else {
                    return Err(refused(
                        node,
                        UpdateConflict::Argument,
                        format!(
                            "{} has {} parameters, there is no parameter {index}",
                            op.name(),
                            op_params(op).len()
                        ),
                    ));
                };
                match (param, new_buffer(instance, arg)?, arg) {
                    (OpParam::Buffer(old), Some((memory, new)), _) => {
                        if !new.element.is::<f32>() {
                            return Err(refused(
                                node,
                                UpdateConflict::ElementType,
                                format!(
                                    "parameter {index} of {} takes an f32 buffer, got one of {}",
                                    op.name(),
                                    new.element.name()
                                ),
                            ));
                        }
                        if new.len != old.len {
                            return Err(refused(
                                node,
                                UpdateConflict::LaunchShape,
                                format!(
                                    "parameter {index} of {} was bound to {} elements, got {} \
                                     (another length would change the launch shape)",
                                    op.name(),
                                    old.len,
                                    new.len
                                ),
                            ));
                        }
                        removed.push(old.id);
                        added.push(memory);
                        *old = new;
                    }
                    (OpParam::Scalar(old), None, accel_graph_api::kernel::KernelArg::Scalar(s)) => {
                        let Scalar::F32(v) = s else {
                            return Err(refused(
                                node,
                                UpdateConflict::Argument,
                                format!(
                                    "parameter {index} of {} is an f32 scalar, got {s:?}",
                                    op.name()
                                ),
                            ));
                        };
                        *old = *v;
                    }
                    (param, _, arg) => {
                        let wanted = match param {
                            OpParam::Buffer(_) => "a buffer",
                            OpParam::Scalar(_) => "a scalar",
                        };
                        return Err(refused(
                            node,
                            UpdateConflict::Argument,
                            format!(
                                "parameter {index} of {} is {wanted}, got {arg:?}",
                                op.name()
                            ),
                        ));
                    }
                }
            }
            let op = op_with(op, params).ok_or_else(|| {
                refused(
                    node,
                    UpdateConflict::Argument,
                    "the op's operands could not be rebuilt".to_owned(),
                )
            })?;
            if let (out, Some(input)) = op.as_ref().operands()
                && out.shares_bytes_with(input)
                && !out.is_same_view(input)
            {
                return Err(refused(
                    node,
                    UpdateConflict::Argument,
                    format!(
                        "the operands of {} would overlap in part (elements {}..{} and {}..{} of \
                         one buffer), which no op accepts",
                        op.name(),
                        out.offset,
                        out.offset + out.len,
                        input.offset,
                        input.offset + input.len
                    ),
                ));
            }
            Ok(Rebinding {
                work: Work::Op(op),
                added,
                removed,
            })
        }
        Work::Kernel(k) => {
            let mut new_args = k.args.clone();
            let params = k.kernel.params();
            for (index, arg) in args {
                let (Some(slot), Some(param)) = (new_args.get_mut(*index), params.get(*index))
                else {
                    return Err(refused(
                        node,
                        UpdateConflict::Argument,
                        format!(
                            "kernel {} has {} parameters, there is no parameter {index}",
                            k.kernel.name(),
                            params.len()
                        ),
                    ));
                };
                match (param, slot, new_buffer(instance, arg)?, arg) {
                    (
                        Param::Buffer { name, element, .. },
                        BoundArg::Buffer { bound, .. },
                        Some((memory, new)),
                        _,
                    ) => {
                        if new.element != *element {
                            return Err(refused(
                                node,
                                UpdateConflict::ElementType,
                                format!(
                                    "parameter {index} ({name}) of kernel {} takes a buffer of \
                                     {}, got one of {}",
                                    k.kernel.name(),
                                    element.name(),
                                    new.element.name()
                                ),
                            ));
                        }
                        removed.push(bound.id);
                        added.push(memory);
                        *bound = new;
                    }
                    (
                        Param::Scalar { ty, name },
                        BoundArg::Scalar(old),
                        None,
                        accel_graph_api::kernel::KernelArg::Scalar(s),
                    ) => {
                        if s.ty() != *ty {
                            return Err(refused(
                                node,
                                UpdateConflict::Argument,
                                format!(
                                    "parameter {index} ({name}) of kernel {} is a {} scalar, \
                                     got {s:?}",
                                    k.kernel.name(),
                                    ty.name()
                                ),
                            ));
                        }
                        *old = *s;
                    }
                    (param, _, _, arg) => {
                        return Err(refused(
                            node,
                            UpdateConflict::Argument,
                            format!(
                                "parameter {index} ({}) of kernel {} cannot take {arg:?}",
                                param.name(),
                                k.kernel.name()
                            ),
                        ));
                    }
                }
            }
            check_extents(node, &k.kernel, &new_args)?;
            check_aliasing(node, &k.kernel, &new_args)?;
            Ok(Rebinding {
                work: Work::Kernel(KernelWork {
                    args: new_args,
                    ..k.clone()
                }),
                added,
                removed,
            })
        }
        Work::Fixed(signature) => Err(refused(
            node,
            UpdateConflict::NotUpdatable,
            format!(
                "node {node} is a {}, whose parameters change only with the whole graph \
                 (update_from)",
                signature.kind_name()
            ),
        )),
    }
}

/// No buffer the kernel writes shares bytes with another of its buffer arguments (as
/// [`accel_graph_api::kernel::check_arguments`] checks them at launch).
fn check_aliasing<D: Driver>(node: usize, kernel: &Kernel, args: &[BoundArg<D>]) -> Result<()> {
    let buffers: Vec<(usize, &Bound<D>, bool)> = args
        .iter()
        .enumerate()
        .filter_map(|(i, arg)| match arg {
            BoundArg::Buffer { bound, access } => Some((i, bound, access.writes())),
            BoundArg::Scalar(_) => None,
        })
        .collect();
    for (n, (i, bound, writes)) in buffers.iter().enumerate() {
        for (j, other, other_writes) in &buffers[n + 1..] {
            if (*writes || *other_writes) && bound.shares_bytes_with(other) {
                return Err(refused(
                    node,
                    UpdateConflict::Argument,
                    format!(
                        "parameters {i} and {j} of kernel {} would share bytes of one buffer, \
                         and one of them is written: a buffer a kernel writes may not alias \
                         another of its buffer parameters",
                        kernel.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The kernel's extents hold for the arguments (as [`accel_graph_api::kernel::check_arguments`]
/// checks them at launch).
fn check_extents<D: Driver>(node: usize, kernel: &Kernel, args: &[BoundArg<D>]) -> Result<()> {
    let count = |param: usize| match args.get(param) {
        Some(BoundArg::Scalar(Scalar::U32(v))) => Some(*v as usize),
        Some(BoundArg::Scalar(Scalar::I32(v))) if *v >= 0 => Some(*v as usize),
        _ => None,
    };
    for (i, (param, arg)) in kernel.params().iter().zip(args).enumerate() {
        let (Param::Buffer { name, extent, .. }, BoundArg::Buffer { bound, .. }) = (param, arg)
        else {
            continue;
        };
        // A count that is not a scalar here (refused elsewhere) leaves the extent unchecked.
        let needed = extent.required(|p| count(p).ok_or(())).ok().flatten();
        if let Some(needed) = needed.filter(|&n| bound.len < n) {
            return Err(refused(
                node,
                UpdateConflict::Argument,
                format!(
                    "parameter {i} ({name}) of kernel {} needs at least {needed} elements, \
                     is bound to {}",
                    kernel.name(),
                    bound.len
                ),
            ));
        }
    }
    Ok(())
}

/// Sets recorded node `record` of a graph to `work` through the driver: in the raw graph, and
/// in the executable when there is one.
///
/// # Safety
/// Every buffer `work` binds is kept alive by the graph (the caller swaps the holds right
/// after).
pub(crate) unsafe fn apply<D: Driver>(
    driver: &D,
    raw: &mut D::Graph,
    exec: Option<&mut D::Exec>,
    record: &NodeRecord<D>,
    work: &Work<D>,
    node: usize,
) -> crate::DriverResult<()> {
    let unnamed = || {
        crate::DriverError::Api(refused(
            node,
            UpdateConflict::UnknownNode,
            "the driver could not name this node when it was captured".to_owned(),
        ))
    };
    let key = record.key.ok_or_else(unnamed)?;
    let exec = match exec {
        Some(exec) => Some((exec, record.exec_key.ok_or_else(unnamed)?)),
        None => None,
    };
    match work {
        // SAFETY: the caller keeps every bound block alive for the graph.
        Work::Op(op) => unsafe { driver.set_op(raw, key, exec, op.as_ref().map(Bound::region)) },
        Work::Kernel(k) => {
            let args: Vec<RawArg<'_, D::Block>> = k
                .args
                .iter()
                .map(|a| match a {
                    BoundArg::Buffer { bound, access } => RawArg::Buffer {
                        bytes: bound.bytes(),
                        element: bound.element,
                        access: *access,
                    },
                    BoundArg::Scalar(s) => RawArg::Scalar(*s),
                })
                .collect();
            // SAFETY: as above.
            unsafe { driver.set_kernel(raw, key, exec, &k.module, &k.kernel, k.grid, &args) }
        }
        Work::Fixed(_) => Err(crate::DriverError::Api(refused(
            node,
            UpdateConflict::NotUpdatable,
            "this node's parameters change only with the whole graph".to_owned(),
        ))),
    }
}

impl<D: Driver> DriverBackend<D> {
    /// [`accel_graph_api::Backend::captured_node`].
    pub(crate) fn captured_node_impl(&self) -> Result<CapturedNode> {
        let shared = self.shared();
        let stream = shared.current.get();
        let Some(entry) = stream.inner.capture() else {
            return Err(GraphError::NodeUnavailable {
                reason: "the current stream is not capturing".to_owned(),
            });
        };
        let recorded = entry.recorded();
        match recorded.last_on(stream.inner.key) {
            Some(Some(index)) => match recorded.nodes.get(index) {
                Some(node) if node.key.is_some() => {
                    Ok(CapturedNode::new(entry.graph, recorded.capture, index))
                }
                _ => Err(GraphError::NodeUnavailable {
                    reason: "the driver could not name the node the last work became".to_owned(),
                }),
            },
            Some(None) => Err(GraphError::NodeUnavailable {
                reason: "the last work of the current stream is in a conditional node's body, \
                         whose nodes cannot be updated one at a time"
                    .to_owned(),
            }),
            None => Err(GraphError::NodeUnavailable {
                reason: "the current stream has issued no work in its capture yet".to_owned(),
            }),
        }
    }

    /// A conditional node of `kind` on the current stream, with `bodies` (one per branch), or
    /// their eager equivalent when the stream does not capture.
    pub(crate) fn conditional<T: ConditionElement>(
        &self,
        cond: View<'_, DriverBuffer<D, T>>,
        kind: ConditionalKind,
        bodies: &mut [&mut dyn FnMut() -> Result<()>],
    ) -> Result<()> {
        let shared = self.shared();
        if cond.buffer().instance_id() != shared.id {
            return Err(GraphError::ForeignObject { what: "buffer" });
        }
        if cond.len() != 1 {
            return Err(GraphError::LengthMismatch {
                op: "condition of a conditional node",
                expected: 1,
                got: cond.len(),
            });
        }
        let stream = shared.current.get();
        let Some(entry) = stream.inner.capture() else {
            return self.eager_conditional(cond, kind, bodies);
        };
        entry.record.ensure_valid()?;
        let supported = if kind == ConditionalKind::IfElse {
            shared.capabilities.conditional_if_else
        } else {
            shared.capabilities.conditional_nodes
        };
        if !supported {
            let why = shared
                .driver
                .conditional_support(kind)
                .err()
                .unwrap_or_default();
            return Err(GraphError::Unsupported {
                what: format!(
                    "{kind} conditional nodes on {} ({}){}",
                    shared.capabilities.device_name,
                    if kind == ConditionalKind::IfElse {
                        "capabilities().conditional_if_else is false"
                    } else {
                        "capabilities().conditional_nodes is false"
                    },
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(": {why}")
                    }
                ),
            });
        }
        shared.bind()?;
        entry.keep_block_used_on(cond.buffer().memory(), &stream.inner.clock);
        let built = self.build_conditional(&entry, &stream, &cond, kind, bodies);
        if let Err(failure) = &built {
            // The node is half built (or built around a body that failed): the capture cannot
            // be ended into a graph that means anything.
            let reason = match failure {
                Failure::Error(e) => format!("a {kind} conditional node failed: {e}"),
                Failure::Panic(_) => format!("a {kind} conditional node's body panicked"),
            };
            entry.record.invalidate(reason);
        }
        match built {
            Ok(signature) => {
                record(shared, &entry, &stream, || Work::Fixed(signature));
                Ok(())
            }
            Err(Failure::Error(e)) => Err(e),
            Err(Failure::Panic(payload)) => panic::resume_unwind(payload),
        }
    }

    fn build_conditional<T: ConditionElement>(
        &self,
        entry: &Arc<CaptureEntry<D>>,
        stream: &DriverStream<D>,
        cond: &View<'_, DriverBuffer<D, T>>,
        kind: ConditionalKind,
        bodies: &mut [&mut dyn FnMut() -> Result<()>],
    ) -> std::result::Result<Signature, Failure> {
        let shared = self.shared();
        let site = CallSite::op(kind.name());
        let bound = Bound::of_view(cond);
        // The node is begun with the stream's membership settled and in the turn (see
        // `crate::stream`), and so is its end; not the bodies: they are the caller's code, each
        // call of which settles its stream itself. The node counts as open from its begin to
        // its end, and the capture's end, which takes the write side of every member's lock,
        // refuses to end the capture under an open node: another thread cannot end it between
        // a body's end and the node's.
        let settled = stream.inner.settled().map_err(Failure::Error)?;
        if !settled.capture().is_some_and(|c| Arc::ptr_eq(c, entry)) {
            return Err(Failure::Error(GraphError::CaptureInvalidated {
                reason: "the capture ended before the conditional node was begun".to_owned(),
            }));
        }
        let open = OpenConditional::new(entry);
        let begun = shared.check(
            // SAFETY: the stream captures through this layer (its entry), which keeps the
            // condition's block alive (above).
            unsafe {
                shared
                    .driver
                    .begin_conditional(&stream.inner.raw, kind, bound.bytes(), T::MASK)
            },
            site,
        );
        // The stream's lock goes before the node stops counting as open (see
        // `OpenConditional`'s drop).
        drop(settled);
        let mut node = begun.map_err(Failure::Error)?;
        let mut signatures = Vec::with_capacity(bodies.len());
        for (branch, body) in bodies.iter_mut().enumerate() {
            signatures.push(self.capture_body(entry, &mut node, branch, &mut **body)?);
        }
        let settled = stream.inner.settled().map_err(Failure::Error)?;
        let ended = shared.check(
            // SAFETY: the node was begun on this capturing stream above.
            unsafe { shared.driver.end_conditional(node, &stream.inner.raw) },
            site,
        );
        drop(settled);
        drop(open);
        ended.map_err(Failure::Error)?;
        Ok(Signature::Conditional {
            kind,
            mask: T::MASK,
            bodies: signatures,
        })
    }

    /// Captures one body on a stream of its own, made current while the body runs.
    fn capture_body(
        &self,
        entry: &Arc<CaptureEntry<D>>,
        node: &mut D::Conditional,
        branch: usize,
        body: &mut dyn FnMut() -> Result<()>,
    ) -> std::result::Result<Vec<Signature>, Failure> {
        let shared = self.shared();
        let site = CallSite::op("conditional body");
        // Made in relaxed mode: making a stream is no stream work, and must neither be refused
        // by the capture nor break it.
        let raw = shared
            .check(shared.relaxed(|| shared.driver.create_stream()), site)
            .map_err(Failure::Error)?;
        let body_stream = DriverStream::new(
            &*shared.driver,
            raw,
            shared.id,
            shared.pools.order().new_stream(),
        );
        let key = body_stream.inner.key;
        if !entry.join(&body_stream.inner) {
            return Err(Failure::Error(GraphError::CaptureInvalidated {
                reason: "the capture ended while a conditional node was built".to_owned(),
            }));
        }
        entry.recorded().bodies.push(key);
        let finish = |body_stream: DriverStream<D>| {
            entry.leave(&body_stream.inner);
            entry.recorded().bodies.retain(|&k| k != key);
            shared.relaxed(|| drop(body_stream));
        };
        let turn = match entry.issuing() {
            Ok(turn) => turn,
            Err(e) => {
                finish(body_stream);
                return Err(Failure::Error(e));
            }
        };
        let begun = shared.check(
            // SAFETY: the body stream joined the capture's entry above, so the work issued on
            // it is kept alive by the capture's graph; it leaves at `finish`.
            unsafe {
                shared.driver.begin_branch(
                    node,
                    branch,
                    &body_stream.inner.raw,
                    entry.record.mode(),
                )
            },
            site,
        );
        if let Err(e) = begun {
            finish(body_stream);
            return Err(Failure::Error(e));
        }
        let graph = shared
            .driver
            .capture_point(&body_stream.inner.raw)
            .ok()
            .flatten()
            .map(|p| p.graph);
        drop(turn);
        let previous = shared.current.set(body_stream.clone());
        let ran = panic::catch_unwind(AssertUnwindSafe(&mut *body));
        shared.current.set(previous);
        // The branch must end whatever happens: refused the turn (only inside a host
        // callback, while another thread issues), it ends without it.
        let _turn = entry.issuing().ok();
        let ended = shared.check(
            // SAFETY: ends the body begun above on this stream.
            unsafe {
                shared
                    .driver
                    .end_branch(node, branch, &body_stream.inner.raw)
            },
            site,
        );
        let signatures = graph
            .map(|g| entry.recorded().take_scope(g))
            .unwrap_or_default();
        finish(body_stream);
        match (ran, ended) {
            (Err(payload), _) => Err(Failure::Panic(payload)),
            (Ok(Err(e)), _) | (Ok(Ok(())), Err(e)) => Err(Failure::Error(e)),
            (Ok(Ok(())), Ok(())) => Ok(signatures),
        }
    }

    /// The condition read back and the bodies run now: what a stream that does not capture
    /// does.
    fn eager_conditional<T: ConditionElement>(
        &self,
        cond: View<'_, DriverBuffer<D, T>>,
        kind: ConditionalKind,
        bodies: &mut [&mut dyn FnMut() -> Result<()>],
    ) -> Result<()> {
        let holds = || -> Result<bool> {
            let mut value = [<T as bytemuck::Zeroable>::zeroed()];
            accel_graph_api::Backend::download_into(self, cond, &mut value)?;
            let bits: u32 = bytemuck::cast_slice::<T, u32>(&value)
                .first()
                .copied()
                .unwrap_or(0);
            Ok(condition_holds(bits, T::MASK))
        };
        match (kind, bodies) {
            (ConditionalKind::If, [then]) => {
                if holds()? {
                    then()?;
                }
                Ok(())
            }
            (ConditionalKind::IfElse, [then, otherwise]) => {
                if holds()? {
                    then()
                } else {
                    otherwise()
                }
            }
            (ConditionalKind::While, [body]) => {
                let mut iterations = 0u64;
                while holds()? {
                    if iterations == WHILE_ITERATION_LIMIT {
                        return Err(GraphError::WhileLoopLimit {
                            iterations,
                            where_: " (run eagerly)".to_owned(),
                        });
                    }
                    iterations = iterations.saturating_add(1);
                    body()?;
                }
                Ok(())
            }
            _ => Err(GraphError::Unsupported {
                what: format!("a {kind} node with another number of bodies"),
            }),
        }
    }
}

/// A conditional node counted open in its capture's records until this drops (at its end, or
/// on any way out of building it).
struct OpenConditional<'a, D: Driver> {
    entry: &'a CaptureEntry<D>,
}

impl<'a, D: Driver> OpenConditional<'a, D> {
    fn new(entry: &'a CaptureEntry<D>) -> Self {
        let mut recorded = entry.recorded();
        recorded.open_conditionals = recorded.open_conditionals.saturating_add(1);
        OpenConditional { entry }
    }
}

impl<D: Driver> Drop for OpenConditional<'_, D> {
    /// Dropped with no stream lock of the capture held (the end of the capture it may run
    /// takes their write sides).
    fn drop(&mut self) {
        let abandoned = {
            let mut recorded = self.entry.recorded();
            recorded.open_conditionals = recorded.open_conditionals.saturating_sub(1);
            if recorded.open_conditionals == 0 {
                recorded.abandoned.take()
            } else {
                None
            }
        };
        if let Some(abort) = abandoned {
            abort();
        }
    }
}

/// How building a conditional node failed.
enum Failure {
    Error(GraphError),
    Panic(Box<dyn std::any::Any + Send>),
}
