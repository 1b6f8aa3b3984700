//! `MockEvent`: fork/join across streams, with CUDA's capture semantics.

use std::sync::Mutex;

use accel_graph_api::capture_rules::CaptureId;

/// An event of a [`crate::MockBackend`].
///
/// Outside capture the mock is synchronous, so recording and waiting order nothing and always
/// succeed. During capture they are CUDA's fork/join: recording on a capturing stream remembers
/// that stream's last nodes; waiting on it from another stream pulls that stream into the same
/// capture, its next work depending on those nodes. They become plain dependency edges of the
/// graph, not nodes (as CUDA's stream capture does).
///
/// ```
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, NodeKind};
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// let (a, b) = (backend.alloc_from(&[0.0])?, backend.alloc_from(&[0.0])?);
/// let (main, side) = (backend.new_stream()?, backend.new_stream()?);
/// let (fork, join) = (backend.new_event()?, backend.new_event()?);
/// let mut g = backend.graph(GraphOptions::new().keep_graph(true))?;
/// backend.capture_on(&main, &mut g, || -> accel_graph_api::Result<()> {
///     backend.record_event(&fork)?;
///     {
///         let _side = backend.use_stream(&side);
///         backend.wait_event(&fork)?; // side joins the capture
///         backend.add_scalar(&b, 2.0)?;
///         backend.record_event(&join)?;
///     }
///     backend.add_scalar(&a, 1.0)?;
///     backend.wait_event(&join) // joined back: capture_end succeeds
/// })??;
/// assert_eq!(g.nodes()?.count(NodeKind::Kernel), 2);
/// g.replay()?;
/// assert_eq!((backend.download(&a)?, backend.download(&b)?), (vec![1.0], vec![2.0]));
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug)]
pub struct MockEvent {
    pub(crate) device: u64,
    pub(crate) index: u64,
    pub(crate) state: Mutex<EventState>,
}

impl MockEvent {
    /// Index of the event in its backend (counts up from 1 per backend instance).
    pub fn index(&self) -> u64 {
        self.index
    }
}

/// What the last `record_event` left in an event.
#[derive(Debug, Clone, Default)]
pub(crate) enum EventState {
    /// Never recorded: waiting on it is a no-op, as in CUDA.
    #[default]
    NeverRecorded,
    /// Recorded outside any capture.
    Recorded,
    /// Recorded on a stream of capture `capture`, after `nodes`.
    Captured {
        capture: CaptureId,
        nodes: Vec<usize>,
    },
}
