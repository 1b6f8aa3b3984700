//! `Graph<I>`: the front object. It owns PyTorch's state machine and checks; backends plug in
//! through [`GraphImpl`]. Every backend's graph type is a `Graph<_>`, so misuse gives the same
//! [`GraphError`] everywhere.

use std::path::Path;

use crate::{
    AcceleratorGraph, CaptureErrorMode, CapturedNode, GraphError, GraphOptions, GraphState,
    GraphTopology, PoolId, Result, backend_kit::GraphImpl, kernel::KernelArg,
};

/// A graph of backend `I`, with PyTorch's semantics. Made by a backend's
/// [`Backend::graph`](crate::Backend::graph); used through [`AcceleratorGraph`].
pub struct Graph<I: GraphImpl> {
    imp: I,
    options: GraphOptions,
    state: GraphState,
    debug_mode: bool,
    /// The raw graph survives `capture_end` (keep_graph or debug mode).
    raw_kept: bool,
    pool: Option<PoolId>,
}

impl<I: GraphImpl> Graph<I> {
    /// Wraps a backend implementation (see [`crate::backend_kit::new_graph`]). Fails on an
    /// invalid pool id.
    pub(crate) fn new(imp: I, options: GraphOptions) -> Result<Self> {
        Ok(Graph {
            imp,
            options: options.validate()?,
            state: GraphState::Empty,
            debug_mode: false,
            raw_kept: false,
            pool: None,
        })
    }

    /// The options the graph was built with (a `(0, 0)` pool given through the public field
    /// reads as `None`, as it means).
    pub fn options(&self) -> GraphOptions {
        self.options
    }

    /// The raw (captured, not instantiated) graph, for backend-specific inspection and
    /// editing before (re-)`instantiate` — CUDA's `CUgraph`, for example. Errors with
    /// [`GraphError::NotCaptured`] before a capture and [`GraphError::RawGraphUnavailable`]
    /// when it was dropped at `capture_end` (neither `keep_graph` nor debug mode).
    ///
    /// ```
    /// use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, PortableOps};
    /// use accel_graph_mock::MockBackend;
    /// let backend = MockBackend::new();
    /// let x = backend.alloc(4)?;
    /// let s = backend.new_stream()?;
    /// let mut kept = backend.graph(GraphOptions::new().keep_graph(true))?;
    /// backend.capture_on(&s, &mut kept, || backend.fill(&x, 1.0))?;
    /// assert_eq!(kept.raw_graph()?.len(), 1);
    /// let mut dropped = backend.graph(GraphOptions::new())?;
    /// backend.capture_on(&s, &mut dropped, || backend.fill(&x, 1.0))?;
    /// assert!(matches!(dropped.raw_graph(), Err(GraphError::RawGraphUnavailable)));
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn raw_graph(&self) -> Result<&I::RawGraph> {
        self.require_raw("raw_graph")?;
        self.imp.raw_graph().ok_or(GraphError::RawGraphUnavailable)
    }

    /// The executable graph — CUDA's `CUgraphExec`, for example. Errors with
    /// [`GraphError::NotCaptured`] before a capture and [`GraphError::NotInstantiated`]
    /// after a `keep_graph` capture that was neither instantiated nor replayed yet.
    ///
    /// ```
    /// use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, PortableOps};
    /// use accel_graph_mock::MockBackend;
    /// let backend = MockBackend::new();
    /// let x = backend.alloc(4)?;
    /// let s = backend.new_stream()?;
    /// let mut g = backend.graph(GraphOptions::new().keep_graph(true))?;
    /// assert!(matches!(g.executable(), Err(GraphError::NotCaptured { .. })));
    /// backend.capture_on(&s, &mut g, || backend.fill(&x, 1.0))?;
    /// assert!(matches!(g.executable(), Err(GraphError::NotInstantiated)));
    /// g.instantiate()?;
    /// assert!(g.executable().is_ok());
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn executable(&self) -> Result<&I::Executable> {
        self.require_captured("executable")?;
        if self.state != GraphState::Ready {
            return Err(GraphError::NotInstantiated);
        }
        self.imp.executable().ok_or(GraphError::NotInstantiated)
    }

    /// Takes the parameters of `other` — a graph of the same backend instance captured with
    /// the same topology (node count, node kinds, edges, kernel functions, memset sizes) —
    /// without instantiating again: replays then compute exactly what `other`'s replays
    /// compute. Kernel nodes may change their buffers, scalars and grids (portable ops over
    /// other lengths), copies their buffers and sizes, memsets (`fill`) their buffers and
    /// values.
    ///
    /// Both graphs must be captured (`keep_graph=false` graphs qualify: the backend keeps what
    /// an update needs). A `Ready` graph keeps its executable, updated in place; a `Captured`
    /// one is instantiated later from the new parameters. The memory `self` keeps alive becomes
    /// what `other`'s work uses. `other` is not changed. Graphs holding conditional nodes are
    /// refused ([`UpdateConflict::NotUpdatable`](crate::UpdateConflict)): CUDA cannot copy
    /// them, which an update needs; use [`Graph::update_node`] for them.
    ///
    /// Errors: [`GraphError::UpdateRefused`] naming what differs (the graph is then left as it
    /// was: its executable, its raw graph and its memory), [`GraphError::NotCaptured`] for a
    /// graph not captured, [`GraphError::ForeignObject`] for a graph of another instance.
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_api::UpdateConflict;
    /// use accel_graph_mock::MockBackend;
    /// let b = MockBackend::new();
    /// let s = b.new_stream()?;
    /// let (x, y) = (b.alloc_from(&[0.0f32; 4])?, b.alloc_from(&[0.0f32; 4])?);
    /// let mut g = b.graph(GraphOptions::new())?;
    /// b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))?;
    /// let mut h = b.graph(GraphOptions::new())?;
    /// b.capture_on(&s, &mut h, || b.add_scalar(&y, 2.0))?;
    /// g.update_from(&h)?;
    /// g.replay()?;
    /// assert_eq!((b.download(&x)?[0], b.download(&y)?[0]), (0.0, 2.0));
    /// let mut other = b.graph(GraphOptions::new())?;
    /// b.capture_on(&s, &mut other, || b.scale(&y, 2.0))?;
    /// let refused = g.update_from(&other); // scale is another kernel than add_scalar
    /// assert!(matches!(refused, Err(GraphError::UpdateRefused { conflict: UpdateConflict::KernelFunction, .. })));
    /// g.replay()?; // still adds 2 to y
    /// assert_eq!(b.download(&y)?[0], 4.0);
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn update_from(&mut self, other: &Self) -> Result<()> {
        self.require_captured("update_from")?;
        other.require_captured("update_from (of the graph to take parameters from)")?;
        self.imp.update_from(&other.imp)
    }

    /// Sets arguments of one captured node without instantiating again: each `(index, arg)`
    /// gives the parameter `index` a new buffer (a view of the same length and element type)
    /// or a new scalar (of the same type). Replays then compute what a capture of the node
    /// with those arguments computes. The graph holds the new buffers' memory from now on and
    /// lets the old go once no node of it uses them.
    ///
    /// Parameters are numbered in declaration order: a user kernel's as declared; a portable
    /// op's as it is written — `fill(x, value)`, `copy(dst, src)`, `add_scalar(x, c)`,
    /// `scale(x, a)`, `axpy(y, a, x)`, `mul(y, x)`. `node` comes from
    /// [`Backend::captured_node`](crate::Backend::captured_node) during this graph's capture.
    ///
    /// Errors: [`GraphError::UpdateRefused`] — an unknown node, an argument the node cannot
    /// take (another length: that would change the launch shape; another element or scalar
    /// type; an index past its parameters), a node that cannot be updated alone — leaving the
    /// graph as it was; [`GraphError::ForeignObject`] for a buffer of another instance.
    ///
    /// ```
    /// use accel_graph_api::{prelude::*, UpdateConflict};
    /// use accel_graph_mock::MockBackend;
    /// let b = MockBackend::new();
    /// let s = b.new_stream()?;
    /// let (y, x1, x2) = (b.alloc_from(&[0.0f32; 2])?, b.alloc_from(&[1.0f32; 2])?, b.alloc_from(&[5.0f32; 2])?);
    /// let mut g = b.graph(GraphOptions::new())?;
    /// let axpy = b.capture_on(&s, &mut g, || { b.axpy(&y, 2.0, &x1)?; b.captured_node() })?;
    /// g.update_node(axpy, &[(2, KernelArg::buffer(&x2))])?; // y += 2 * x2
    /// drop(x2); // the graph holds its memory now
    /// g.replay()?;
    /// assert_eq!(b.download(&y)?, vec![10.0, 10.0]);
    /// let short = b.alloc_from(&[1.0f32])?;
    /// assert!(matches!(
    ///     g.update_node(axpy, &[(2, KernelArg::buffer(&short))]),
    ///     Err(GraphError::UpdateRefused { conflict: UpdateConflict::LaunchShape, .. })
    /// ));
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn update_node(
        &mut self,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, I::Memory>)],
    ) -> Result<()> {
        self.require_captured("update_node")?;
        self.imp.update_node(node, args)
    }

    fn require_captured(&self, operation: &'static str) -> Result<()> {
        match self.state {
            GraphState::Captured | GraphState::Ready => Ok(()),
            GraphState::Empty | GraphState::Capturing => Err(GraphError::NotCaptured { operation }),
        }
    }

    fn require_raw(&self, operation: &'static str) -> Result<()> {
        self.require_captured(operation)?;
        if self.raw_kept {
            Ok(())
        } else {
            Err(GraphError::RawGraphUnavailable)
        }
    }

    fn discard(&mut self) {
        self.imp.reset();
        self.state = GraphState::Empty;
        self.raw_kept = false;
        self.pool = None;
    }
}

impl<I: GraphImpl> AcceleratorGraph for Graph<I> {
    fn capture_begin(&mut self) -> Result<()> {
        match self.state {
            GraphState::Empty => {}
            GraphState::Capturing => return Err(GraphError::AlreadyCapturing),
            GraphState::Captured | GraphState::Ready => return Err(GraphError::AlreadyCaptured),
        }
        let pool = self.imp.capture_begin(
            self.options.pool,
            self.options.capture_error_mode.resolved(),
        )?;
        self.pool = Some(pool);
        self.state = GraphState::Capturing;
        Ok(())
    }

    fn capture_end(&mut self) -> Result<()> {
        if self.state != GraphState::Capturing {
            return Err(GraphError::NotCapturing);
        }
        let node_count = match self.imp.capture_end() {
            Ok(n) => n,
            Err(e) if e.capture_still_active() => return Err(e),
            Err(e) => {
                self.discard();
                return Err(e);
            }
        };
        if node_count == 0 {
            tracing::warn!(
                backend = self.imp.backend_name(),
                "The graph is empty. This usually means that the graph was attempted to be \
                 captured on wrong device or stream."
            );
        }
        self.state = GraphState::Captured;
        self.raw_kept = true;
        if !self.options.keep_graph {
            if let Err(e) = self.imp.instantiate() {
                self.discard();
                return Err(e);
            }
            self.state = GraphState::Ready;
            if !self.debug_mode {
                self.imp.drop_raw_graph();
                self.raw_kept = false;
            }
        }
        Ok(())
    }

    fn instantiate(&mut self) -> Result<()> {
        self.require_captured("instantiate")?;
        if !self.options.keep_graph {
            return Err(GraphError::InstantiateRequiresKeepGraph);
        }
        self.imp.instantiate()?;
        self.state = GraphState::Ready;
        Ok(())
    }

    fn replay(&mut self) -> Result<()> {
        self.require_captured("replay")?;
        if self.state == GraphState::Captured {
            self.imp.instantiate()?;
            self.state = GraphState::Ready;
        }
        self.imp.replay()
    }

    fn reset(&mut self) {
        self.discard();
    }

    fn pool(&self) -> Result<PoolId> {
        self.require_captured("pool()")?;
        self.pool.ok_or(GraphError::NotCaptured {
            operation: "pool()",
        })
    }

    fn enable_debug_mode(&mut self) {
        self.debug_mode = true;
    }

    fn debug_dump(&self, path: &Path) -> Result<()> {
        if !(self.debug_mode || self.options.keep_graph) {
            return Err(GraphError::DebugModeNotEnabled);
        }
        self.require_raw("debug_dump")?;
        self.imp.debug_dump(path)
    }

    fn keep_graph(&self) -> bool {
        self.options.keep_graph
    }

    fn capture_error_mode(&self) -> CaptureErrorMode {
        self.options.capture_error_mode
    }

    fn state(&self) -> GraphState {
        self.state
    }

    fn nodes(&self) -> Result<GraphTopology> {
        self.require_raw("nodes()")?;
        self.imp.topology()
    }

    fn backend_name(&self) -> &'static str {
        self.imp.backend_name()
    }
}

impl<I: GraphImpl> Drop for Graph<I> {
    fn drop(&mut self) {
        self.imp.reset();
    }
}

impl<I: GraphImpl> std::fmt::Debug for Graph<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("backend", &self.imp.backend_name())
            .field("state", &self.state)
            .field("options", &self.options)
            .field("debug_mode", &self.debug_mode)
            .field("pool", &self.pool)
            .finish()
    }
}
