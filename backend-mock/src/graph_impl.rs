//! `MockGraphImpl`: the mock's half of a graph ([`accel_graph_api::GraphImpl`]).

use std::sync::Arc;

use accel_graph_api::{
    CaptureErrorMode, GraphError, GraphImpl, GraphTopology, PoolId, Result,
    capture_rules::CaptureId,
    pools::{MemoryPools, PoolHold},
};

use crate::{
    MockStream, counters::Counters, device::Device, faults::FaultSite, memory::MockAllocator,
    plan::ReplayPlan, raw_graph::RawGraph,
};

/// A capture this graph has in progress.
#[derive(Debug, Clone, Copy)]
struct ActiveCapture {
    id: CaptureId,
    origin: MockStream,
}

/// The mock backend's graph implementation; users meet it as
/// [`MockGraph`](crate::MockGraph) = `accel_graph_api::Graph<MockGraphImpl>`.
///
/// * capture records ops as nodes (never runs them);
/// * `instantiate` compiles the raw graph into a flat replay plan;
/// * `replay` runs the plan on the calling thread's current stream, after the sanitizer
///   checked that no memory it touches was freed since capture.
///
/// Replaying into a stream that is itself capturing (which CUDA records as a child-graph
/// node) is not modelled: it fails with [`GraphError::Unsupported`].
///
/// ```
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions};
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// let x = backend.alloc_from(&[1.0])?;
/// let s = backend.new_stream()?;
/// let mut g = backend.graph(GraphOptions::new())?;
/// backend.capture_on(&s, &mut g, || backend.add_scalar(&x, 1.0))??;
/// g.replay()?; // on the default stream: fine
/// assert_eq!(backend.download(&x)?, vec![2.0]);
/// drop(x);
/// assert!(matches!(g.replay(), Err(GraphError::DanglingBuffer { .. })));
/// # Ok::<(), GraphError>(())
/// ```
pub struct MockGraphImpl {
    device: Arc<Device>,
    capture: Option<ActiveCapture>,
    hold: Option<PoolHold<MockAllocator>>,
    raw: Option<RawGraph>,
    plan: Option<ReplayPlan>,
}

impl MockGraphImpl {
    pub(crate) fn new(device: Arc<Device>) -> Self {
        MockGraphImpl {
            device,
            capture: None,
            hold: None,
            raw: None,
            plan: None,
        }
    }

    /// Number of nodes of the executable graph (0 before instantiation).
    pub fn executable_len(&self) -> usize {
        self.plan.as_ref().map_or(0, ReplayPlan::len)
    }

    fn abort_capture(&mut self) {
        if let Some(active) = self.capture.take() {
            self.device.abort_capture(active.id);
        }
    }

    /// Drops everything; the pool hold last, after the memory references of the graph.
    fn release_all(&mut self) {
        self.abort_capture();
        self.raw = None;
        self.plan = None;
        self.hold = None;
    }
}

impl GraphImpl for MockGraphImpl {
    fn backend_name(&self) -> &'static str {
        "mock"
    }

    fn capture_begin(&mut self, pool: PoolId, mode: CaptureErrorMode) -> Result<()> {
        // A previous graph's leftovers would otherwise outlive the new capture.
        self.release_all();
        let origin = self.device.current_stream()?;
        let id = self.device.begin_capture(&origin, pool, mode)?;
        self.hold = Some(MemoryPools::hold(&self.device.pools, pool));
        self.capture = Some(ActiveCapture { id, origin });
        tracing::debug!(capture = id, stream = origin.index, %pool, %mode, "mock: capture begun");
        Ok(())
    }

    fn capture_end(&mut self) -> Result<usize> {
        let Some(active) = self.capture else {
            return Err(GraphError::NotCapturing);
        };
        // Both checks leave the capture running, as CUDA does.
        self.device.rules.check_end(active.id)?;
        if self.device.current.get() != active.origin {
            return Err(GraphError::CaptureStreamMismatch);
        }
        debug_assert_eq!(
            self.device.capture_origin(active.id),
            Some(active.origin.index)
        );
        self.capture = None;
        match self.device.end_capture(active.id) {
            Ok(raw) => {
                let n = raw.len();
                tracing::debug!(capture = active.id, nodes = n, "mock: capture ended");
                self.raw = Some(raw);
                Ok(n)
            }
            Err(e) => {
                tracing::debug!(capture = active.id, error = %e, "mock: capture failed");
                self.release_all();
                Err(e)
            }
        }
    }

    fn instantiate(&mut self) -> Result<()> {
        let raw = self.raw.as_ref().ok_or(GraphError::RawGraphUnavailable)?;
        self.device.faults.check(FaultSite::Instantiate)?;
        self.plan = Some(ReplayPlan::compile(raw));
        Counters::bump(&self.device.counters.instantiations, 1);
        Ok(())
    }

    fn replay(&mut self) -> Result<()> {
        let plan = self.plan.as_ref().ok_or(GraphError::NotCaptured {
            operation: "replay",
        })?;
        let stream = self.device.current_stream()?;
        if self.device.stream_capture(&stream)?.is_some() {
            return Err(GraphError::Unsupported {
                what: "replaying a graph on a stream that is capturing (a child-graph node in \
                       CUDA); the mock replays only on streams that are not capturing"
                    .to_owned(),
            });
        }
        self.device.faults.check(FaultSite::Replay)?;
        plan.check_memory()?;
        plan.run();
        Counters::bump(&self.device.counters.replays, 1);
        Counters::bump(&self.device.counters.nodes_replayed, plan.len() as u64);
        Ok(())
    }

    fn drop_raw_graph(&mut self) {
        self.raw = None;
    }

    fn reset(&mut self) {
        self.release_all();
    }

    fn topology(&self) -> Result<GraphTopology> {
        self.raw
            .as_ref()
            .map(RawGraph::topology)
            .ok_or(GraphError::RawGraphUnavailable)
    }
}

impl Drop for MockGraphImpl {
    fn drop(&mut self) {
        // A graph dropped mid-capture ends the capture: no stream is left capturing.
        self.release_all();
    }
}

impl std::fmt::Debug for MockGraphImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockGraphImpl")
            .field("capturing", &self.capture.is_some())
            .field("raw_nodes", &self.raw.as_ref().map(RawGraph::len))
            .field("executable_nodes", &self.plan.as_ref().map(ReplayPlan::len))
            .finish()
    }
}
