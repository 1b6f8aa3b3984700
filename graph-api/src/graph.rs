//! `AcceleratorGraph`: the object-safe graph contract, one method per `torch.accelerator.Graph`
//! method, plus the panic-safe capture helpers.

use std::{
    panic::{self, AssertUnwindSafe},
    path::Path,
};

use crate::{CaptureErrorMode, GraphState, GraphTopology, PoolId, Result};

/// A graph: capture a stream's work once, replay it with one launch.
///
/// Object-safe and free of associated types, so `dyn AcceleratorGraph` and enum dispatch over
/// backends both work. Every backend's graph type implements it; the state checks live in one
/// place ([`crate::Graph`]) so misuse is reported identically everywhere.
///
/// ```
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState};
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let x = backend.alloc_from(&[0.0; 4])?;
/// let stream = backend.new_stream()?;
/// let _current = backend.use_stream(&stream); // like `with stream:`
/// let mut g = backend.graph(GraphOptions::new())?;
/// assert!(matches!(g.replay(), Err(GraphError::NotCaptured { .. })));
/// g.capture_begin()?;
/// backend.add_scalar(&x, 1.0)?; // recorded, not run
/// g.capture_end()?;
/// assert_eq!(g.state(), GraphState::Ready);
/// assert_eq!(backend.download(&x)?, vec![0.0; 4]);
/// g.replay()?;
/// g.replay()?;
/// assert_eq!(backend.download(&x)?, vec![2.0; 4]);
/// # Ok::<(), GraphError>(())
/// ```
pub trait AcceleratorGraph: Send {
    /// Begins capture on the calling thread's current stream of the graph's backend.
    /// Allocations made on that stream during the capture come from the graph's pool.
    fn capture_begin(&mut self) -> Result<()>;
    /// Ends the capture. With `keep_graph == false` the graph is instantiated now and the raw
    /// graph dropped (kept if debug mode is on).
    fn capture_end(&mut self) -> Result<()>;
    /// Instantiates the raw graph (only with `keep_graph == true`); may be called again after
    /// the raw graph changed.
    fn instantiate(&mut self) -> Result<()>;
    /// Launches the graph on the current stream (instantiating first if `keep_graph` and not yet
    /// instantiated).
    fn replay(&mut self) -> Result<()>;
    /// Drops the raw and executable graph and this graph's hold on its pool; the object can
    /// capture again. Never fails; aborts a capture in progress.
    fn reset(&mut self);
    /// The pool this graph allocates from (after a successful capture).
    fn pool(&self) -> Result<PoolId>;
    /// Keeps the raw graph after `capture_end` so that [`AcceleratorGraph::debug_dump`] works.
    fn enable_debug_mode(&mut self);
    /// Writes the raw graph as a DOT file.
    fn debug_dump(&self, path: &Path) -> Result<()>;
    /// `keep_graph` as constructed.
    fn keep_graph(&self) -> bool;
    /// `capture_error_mode` as constructed.
    fn capture_error_mode(&self) -> CaptureErrorMode;
    /// Where the graph is in its life.
    fn state(&self) -> GraphState;
    /// Nodes and edges of the raw graph (needs `keep_graph` or debug mode).
    fn nodes(&self) -> Result<GraphTopology>;
    /// Name of the backend the graph belongs to.
    fn backend_name(&self) -> &'static str;
}

/// Extension methods on every graph, `dyn` included: panic-safe scoped capture.
pub trait CaptureExt: AcceleratorGraph {
    /// `capture_begin`, run `f`, `capture_end` — like `with graph:` in PyTorch.
    ///
    /// If `f` panics, the capture is ended and discarded (the graph is reset) before the panic
    /// continues, so no stream is left capturing.
    ///
    /// ```
    /// use accel_graph_api::{AcceleratorGraph, Backend, CaptureExt, GraphOptions, GraphState};
    /// use accel_graph_mock::MockBackend;
    ///
    /// let backend = MockBackend::new();
    /// let x = backend.alloc_from(&[1.0, 2.0])?;
    /// let stream = backend.new_stream()?;
    /// let _current = backend.use_stream(&stream);
    /// let mut g = backend.graph(GraphOptions::new())?;
    /// g.capture(|| backend.scale(&x, 3.0))??;
    /// assert_eq!(g.state(), GraphState::Ready);
    /// g.replay()?;
    /// assert_eq!(backend.download(&x)?, vec![3.0, 6.0]);
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    fn capture<R>(&mut self, f: impl FnOnce() -> R) -> Result<R> {
        self.capture_begin()?;
        let out = panic::catch_unwind(AssertUnwindSafe(f));
        match out {
            Ok(value) => {
                self.capture_end()?;
                Ok(value)
            }
            Err(payload) => {
                abort_capture(self);
                panic::resume_unwind(payload)
            }
        }
    }

    /// Like [`CaptureExt::capture`] for a fallible body: if `f` returns an error the capture is
    /// discarded (graph reset) and the error returned.
    fn try_capture<R>(&mut self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        match self.capture(f) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                self.reset();
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

impl<G: AcceleratorGraph + ?Sized> CaptureExt for G {}

/// Ends a capture in progress and discards it. Errors are ignored on purpose: this runs while
/// unwinding, and `reset` below drops whatever the capture left.
fn abort_capture<G: AcceleratorGraph + ?Sized>(graph: &mut G) {
    if graph.state() == GraphState::Capturing {
        let _ = graph.capture_end();
    }
    graph.reset();
}
