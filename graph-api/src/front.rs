//! `Graph<I>`: the front object. It owns PyTorch's state machine and checks; backends plug in
//! through [`GraphImpl`]. Every backend's graph type is a `Graph<_>`, so misuse gives the same
//! [`GraphError`] everywhere.

use std::path::Path;

use crate::{
    AcceleratorGraph, CaptureErrorMode, GraphError, GraphImpl, GraphOptions, GraphState,
    GraphTopology, PoolId, Result,
};

/// A graph of backend `I`, with PyTorch's semantics.
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
    /// Wraps a backend implementation. Fails on an invalid pool id.
    pub fn new(imp: I, options: GraphOptions) -> Result<Self> {
        Ok(Graph {
            imp,
            options: options.validate()?,
            state: GraphState::Empty,
            debug_mode: false,
            raw_kept: false,
            pool: None,
        })
    }

    /// The options the graph was built with.
    pub fn options(&self) -> GraphOptions {
        self.options
    }

    /// The backend implementation, for backend-specific extras that need no raw graph.
    pub fn backend_impl(&self) -> &I {
        &self.imp
    }

    /// The backend implementation, only while a raw graph exists (`keep_graph`, or debug mode,
    /// after `capture_end`): the gate for raw-graph accessors such as CUDA's `raw_cuda_graph`.
    pub fn raw_graph_impl(&self) -> Result<&I> {
        self.require_raw("raw_graph")?;
        Ok(&self.imp)
    }

    /// Mutable access to the implementation while a raw graph exists, for edits of the raw
    /// graph before (re-)`instantiate`.
    pub fn raw_graph_impl_mut(&mut self) -> Result<&mut I> {
        self.require_raw("raw_graph")?;
        Ok(&mut self.imp)
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
        let pool = self.options.pool.unwrap_or_else(PoolId::new_private);
        self.imp
            .capture_begin(pool, self.options.capture_error_mode.resolved())?;
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
        Ok(self.pool.expect("a captured graph always has a pool"))
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
