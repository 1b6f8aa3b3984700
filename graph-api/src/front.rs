//! `Graph<I>`: the front object. It owns PyTorch's state machine and checks; backends plug in
//! through [`GraphImpl`]. Every backend's graph type is a `Graph<_>`, so misuse gives the same
//! [`GraphError`] everywhere.

use std::path::Path;

use crate::{
    AcceleratorGraph, CaptureErrorMode, GraphError, GraphOptions, GraphState, GraphTopology,
    PoolId, Result, backend_kit::GraphImpl,
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
