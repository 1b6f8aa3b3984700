//! `AcceleratorGraph`: the object-safe graph contract, one method per `torch.accelerator.Graph`
//! method, plus the scoped, panic-safe capture helpers.

use std::{
    panic::{self, AssertUnwindSafe},
    path::Path,
};

use crate::{CaptureErrorMode, GraphState, GraphTopology, PoolId, Result};

/// Declares the graph contract once: the trait below and the list of its methods that the
/// facade's `AnyGraph` forwards (`for_each_graph_method!`), so the two cannot drift apart.
macro_rules! graph_contract {
    ($( $(#[$meta:meta])* fn $name:ident(self: $receiver:ty $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        /// A graph: capture a stream's work once, replay it with one launch.
        ///
        /// Object-safe and free of associated types, so `dyn AcceleratorGraph` and enum
        /// dispatch over backends both work. Every backend's graph type implements it; the
        /// state checks live in one place ([`crate::Graph`]) so misuse is reported identically
        /// everywhere.
        ///
        /// ```
        /// use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState, PortableOps};
        /// use accel_graph_mock::MockBackend;
        ///
        /// let backend = MockBackend::new();
        /// let x = backend.alloc_from(&[0.0; 4])?;
        /// let stream = backend.new_stream()?;
        /// let _current = backend.use_stream(&stream)?; // like `with stream:`
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
        // The receivers are spelled `self: &Self` so that the declaration macro can take both
        // `&self` and `&mut self` methods apart; the trait is the same as with the short forms.
        #[allow(clippy::needless_arbitrary_self_type)]
        pub trait AcceleratorGraph: Send {
            $( $(#[$meta])* fn $name(self: $receiver $(, $arg: $ty)*) $(-> $ret)?; )*
        }

        /// Calls `$callback!` with the signature of every [`AcceleratorGraph`] method, so that
        /// forwarding impls (the facade's `AnyGraph`) are generated from the one declaration.
        #[macro_export]
        #[doc(hidden)]
        macro_rules! for_each_graph_method {
            ($callback:ident) => {
                $callback! { $( fn $name(self: $receiver $(, $arg: $ty)*) $(-> $ret)?; )* }
            };
        }
    };
}

graph_contract! {
    /// Begins capture on the calling thread's current stream of the graph's backend.
    /// Allocations made on that stream during the capture come from the graph's pool.
    fn capture_begin(self: &mut Self) -> Result<()>;
    /// Ends the capture. With `keep_graph == false` the graph is instantiated now and the raw
    /// graph dropped (kept if debug mode is on).
    fn capture_end(self: &mut Self) -> Result<()>;
    /// Instantiates the raw graph (only with `keep_graph == true`); may be called again after
    /// the raw graph changed.
    fn instantiate(self: &mut Self) -> Result<()>;
    /// Launches the graph on the current stream (instantiating first if `keep_graph` and not
    /// yet instantiated).
    fn replay(self: &mut Self) -> Result<()>;
    /// Drops the raw and executable graph, this graph's hold on its pool and on the memory its
    /// captured work used; the object can capture again. Never fails; aborts a capture in
    /// progress.
    fn reset(self: &mut Self);
    /// The pool this graph allocates from (after a successful capture).
    fn pool(self: &Self) -> Result<PoolId>;
    /// Keeps the raw graph after `capture_end` so that [`AcceleratorGraph::debug_dump`] works.
    fn enable_debug_mode(self: &mut Self);
    /// Writes the raw graph as a DOT file.
    fn debug_dump(self: &Self, path: &Path) -> Result<()>;
    /// `keep_graph` as constructed.
    fn keep_graph(self: &Self) -> bool;
    /// `capture_error_mode` as constructed.
    fn capture_error_mode(self: &Self) -> CaptureErrorMode;
    /// Where the graph is in its life.
    fn state(self: &Self) -> GraphState;
    /// Nodes and edges of the raw graph (needs `keep_graph` or debug mode).
    fn nodes(self: &Self) -> Result<GraphTopology>;
    /// Name of the backend the graph belongs to.
    fn backend_name(self: &Self) -> &'static str;
}

/// Scoped capture on every graph, `dyn` included: PyTorch's `with graph:`.
///
/// A scoped capture never leaves a stream capturing: if the body fails, panics, or the capture
/// cannot be ended, the capture is discarded (the graph is reset) before the error is returned
/// or the panic resumed.
pub trait CaptureExt: AcceleratorGraph {
    /// `capture_begin`, run the fallible body `f`, `capture_end`; returns the body's value.
    ///
    /// ```
    /// use accel_graph_api::{AcceleratorGraph, Backend, CaptureExt, GraphOptions, GraphState, PortableOps};
    /// use accel_graph_mock::MockBackend;
    ///
    /// let backend = MockBackend::new();
    /// let x = backend.alloc_from(&[1.0, 2.0])?;
    /// let stream = backend.new_stream()?;
    /// let _current = backend.use_stream(&stream)?;
    /// let mut g = backend.graph(GraphOptions::new())?;
    /// g.capture(|| {
    ///     backend.scale(&x, 3.0)?;
    ///     backend.add_scalar(&x, 1.0)
    /// })?;
    /// assert_eq!(g.state(), GraphState::Ready);
    /// g.replay()?;
    /// assert_eq!(backend.download(&x)?, vec![4.0, 7.0]);
    ///
    /// // A failing body discards the capture and returns its error.
    /// let mut h = backend.graph(GraphOptions::new())?;
    /// let other = MockBackend::new().alloc(2)?;
    /// assert!(h.capture(|| backend.scale(&other, 2.0)).is_err()); // a foreign buffer
    /// assert_eq!(h.state(), GraphState::Empty);
    /// assert!(!backend.is_capturing(&stream)?);
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    fn capture<R>(&mut self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.capture_begin()?;
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(value)) => match self.capture_end() {
                Ok(()) => Ok(value),
                Err(e) => {
                    discard(self);
                    Err(e)
                }
            },
            Ok(Err(e)) => {
                discard(self);
                Err(e)
            }
            Err(payload) => {
                discard(self);
                panic::resume_unwind(payload)
            }
        }
    }

    /// [`CaptureExt::capture`] for a body that cannot fail.
    fn capture_infallible<R>(&mut self, f: impl FnOnce() -> R) -> Result<R> {
        self.capture(|| Ok(f()))
    }
}

impl<G: AcceleratorGraph + ?Sized> CaptureExt for G {}

/// Ends a failed scoped capture: `reset` aborts a capture in progress on the stream it began
/// on, whatever the thread's current stream is now, and drops whatever it recorded.
fn discard<G: AcceleratorGraph + ?Sized>(graph: &mut G) {
    graph.reset();
}
