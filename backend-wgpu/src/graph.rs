//! `WgpuGraphImpl`: the wgpu half of a graph. Capture marks the current stream as recording
//! into a [`CaptureSession`]; `capture_end` keeps the recorded nodes as the raw graph;
//! `instantiate` turns them into a [`ReplayPlan`]; `replay` re-encodes that plan.

use std::sync::Arc;

use accel_graph_api::{
    CaptureErrorMode, GraphError, GraphImpl, GraphTopology, PoolId, Result,
    pools::{MemoryPools, PoolHold},
};

use crate::{
    capture::CaptureSession,
    context::Context,
    memory::WgpuAllocator,
    plan::{RawGraph, ReplayPlan},
};

/// The wgpu implementation behind [`crate::WgpuGraph`].
pub struct WgpuGraphImpl {
    ctx: Arc<Context>,
    capture: Option<Arc<CaptureSession>>,
    hold: Option<PoolHold<WgpuAllocator>>,
    raw: Option<RawGraph>,
    exec: Option<ReplayPlan>,
}

impl WgpuGraphImpl {
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        WgpuGraphImpl {
            ctx,
            capture: None,
            hold: None,
            raw: None,
            exec: None,
        }
    }

    /// Number of GPU and host nodes in the raw graph (`None` once it was dropped).
    pub fn raw_node_count(&self) -> Option<usize> {
        self.raw.as_ref().map(|r| r.nodes.len())
    }

    fn abort_capture(&mut self) {
        if let Some(session) = self.capture.take() {
            session.close();
            self.ctx.rules.end(session.id);
        }
    }
}

impl GraphImpl for WgpuGraphImpl {
    fn backend_name(&self) -> &'static str {
        "wgpu"
    }

    fn capture_begin(&mut self, pool: PoolId, mode: CaptureErrorMode) -> Result<()> {
        let stream = self.ctx.current.get();
        if !stream.inner.capturable {
            return Err(GraphError::StreamNotCapturable);
        }
        let mut state = stream.state();
        if state.capture.is_some() {
            return Err(accel_graph_api::EmulatedCudaError::IllegalState.error(
                "wgpu",
                format!("stream {} is capturing already", stream.id()),
            ));
        }
        let id = self.ctx.rules.begin(mode);
        let session = CaptureSession::new(id, pool, mode.resolved(), stream.clone());
        state.capture = Some(Arc::clone(&session));
        drop(state);
        self.hold = Some(MemoryPools::hold(&self.ctx.pools, pool));
        self.capture = Some(session);
        Ok(())
    }

    fn capture_end(&mut self) -> Result<usize> {
        let session = self.capture.clone().ok_or(GraphError::NotCapturing)?;
        self.ctx.rules.check_end(session.id)?;
        if self.ctx.current.get() != session.origin {
            return Err(GraphError::CaptureStreamMismatch);
        }
        self.capture = None;
        let finished = session.close();
        if let Some(reason) = self.ctx.rules.end(session.id) {
            return Err(GraphError::CaptureInvalidated { reason });
        }
        if finished.unjoined {
            return Err(GraphError::CaptureUnjoined);
        }
        let count = finished.nodes.len();
        self.raw = Some(RawGraph {
            nodes: finished.nodes.into(),
        });
        Ok(count)
    }

    fn instantiate(&mut self) -> Result<()> {
        let raw = self.raw.as_ref().ok_or(GraphError::RawGraphUnavailable)?;
        self.exec = Some(raw.instantiate());
        Ok(())
    }

    fn replay(&mut self) -> Result<()> {
        let exec = self.exec.as_ref().ok_or(GraphError::NotCaptured {
            operation: "replay",
        })?;
        let stream = self.ctx.current.get();
        if stream.session().is_some() {
            return Err(GraphError::Unsupported {
                what: "replaying a wgpu graph while the current stream is capturing (no child \
                       graph nodes in software graphs)"
                    .to_owned(),
            });
        }
        exec.replay(&self.ctx.gpu, &stream)
    }

    fn drop_raw_graph(&mut self) {
        self.raw = None;
    }

    fn reset(&mut self) {
        self.abort_capture();
        self.raw = None;
        self.exec = None;
        self.hold = None;
    }

    fn topology(&self) -> Result<GraphTopology> {
        self.raw
            .as_ref()
            .map(RawGraph::topology)
            .ok_or(GraphError::RawGraphUnavailable)
    }
}

impl std::fmt::Debug for WgpuGraphImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuGraphImpl")
            .field("capturing", &self.capture.is_some())
            .field("raw_nodes", &self.raw_node_count())
            .field("instantiated", &self.exec.is_some())
            .finish()
    }
}
