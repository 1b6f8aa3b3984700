//! `CaptureSession`: one capture in progress. It records commands as nodes whose dependencies
//! are the issuing stream's *frontier* (its last nodes), so fork/join across streams through
//! events gives a real dependency graph, as CUDA's stream capture does.

use std::sync::{Arc, Mutex, MutexGuard};

use accel_graph_api::{CaptureErrorMode, PoolId, capture_rules::CaptureId};

use crate::{command::Command, stream::WgpuStream};

/// A captured command and the nodes it runs after.
#[derive(Debug, Clone)]
pub(crate) struct RecordedNode {
    pub(crate) command: Command,
    pub(crate) deps: Vec<usize>,
}

/// A capture in progress, shared by every stream that records into it.
pub(crate) struct CaptureSession {
    pub(crate) id: CaptureId,
    pub(crate) pool: PoolId,
    pub(crate) mode: CaptureErrorMode,
    /// The stream the capture began on (and must end on).
    pub(crate) origin: WgpuStream,
    recording: Mutex<Recording>,
}

#[derive(Default)]
struct Recording {
    nodes: Vec<RecordedNode>,
    /// Per stream id: the nodes the stream's next command depends on.
    frontiers: Vec<(u64, Vec<usize>)>,
    /// Streams recording into this capture, the origin first.
    members: Vec<WgpuStream>,
    /// Set when the capture ended or was aborted: later waits on its events do nothing.
    closed: bool,
}

/// What a finished capture hands over.
pub(crate) struct FinishedCapture {
    pub(crate) nodes: Vec<RecordedNode>,
    /// Some stream forked into the capture has work the origin stream never waited for.
    pub(crate) unjoined: bool,
}

impl Recording {
    fn frontier_mut(&mut self, stream: u64) -> &mut Vec<usize> {
        let pos = match self.frontiers.iter().position(|(s, _)| *s == stream) {
            Some(p) => p,
            None => {
                self.frontiers.push((stream, Vec::new()));
                self.frontiers.len() - 1
            }
        };
        &mut self.frontiers[pos].1
    }

    /// Every node reachable backwards from `roots`, roots included.
    fn ancestors(&self, roots: &[usize]) -> Vec<bool> {
        let mut seen = vec![false; self.nodes.len()];
        let mut todo: Vec<usize> = roots.to_vec();
        while let Some(n) = todo.pop() {
            if !std::mem::replace(&mut seen[n], true) {
                todo.extend(self.nodes[n].deps.iter().copied());
            }
        }
        seen
    }
}

impl CaptureSession {
    pub(crate) fn new(
        id: CaptureId,
        pool: PoolId,
        mode: CaptureErrorMode,
        origin: WgpuStream,
    ) -> Arc<Self> {
        let recording = Recording {
            members: vec![origin.clone()],
            ..Recording::default()
        };
        Arc::new(CaptureSession {
            id,
            pool,
            mode,
            origin,
            recording: Mutex::new(recording),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Recording> {
        self.recording.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `command` on `stream`: it depends on the stream's frontier and becomes it.
    pub(crate) fn record(&self, stream: &WgpuStream, command: Command) {
        let mut rec = self.lock();
        let id = rec.nodes.len();
        let deps = std::mem::replace(rec.frontier_mut(stream.id()), vec![id]);
        rec.nodes.push(RecordedNode { command, deps });
    }

    /// The nodes an event recorded now on `stream` stands for.
    pub(crate) fn frontier(&self, stream: &WgpuStream) -> Vec<usize> {
        self.lock().frontier_mut(stream.id()).clone()
    }

    /// `stream` waits for `nodes`: it joins the capture if it was not in it, and its next
    /// command depends on `nodes` as well.
    pub(crate) fn join(&self, stream: &WgpuStream, nodes: &[usize]) {
        let mut rec = self.lock();
        if !rec.members.contains(stream) {
            rec.members.push(stream.clone());
        }
        let frontier = rec.frontier_mut(stream.id());
        for &n in nodes {
            if !frontier.contains(&n) {
                frontier.push(n);
            }
        }
    }

    /// True until the capture ends or is aborted.
    pub(crate) fn is_open(&self) -> bool {
        !self.lock().closed
    }

    /// Ends the capture: every member stream stops capturing, and the recorded nodes are
    /// returned with the verdict on unjoined forks.
    pub(crate) fn close(self: &Arc<Self>) -> FinishedCapture {
        let mut rec = self.lock();
        rec.closed = true;
        for stream in &rec.members {
            let mut state = stream.state();
            if state.capture.as_ref().is_some_and(|s| Arc::ptr_eq(s, self)) {
                state.capture = None;
            }
        }
        let origin_frontier = rec.frontier_mut(self.origin.id()).clone();
        let joined = rec.ancestors(&origin_frontier);
        let origin = self.origin.id();
        let unjoined = rec
            .frontiers
            .iter()
            .filter(|(s, _)| *s != origin)
            .any(|(_, f)| f.iter().any(|&n| !joined[n]));
        FinishedCapture {
            nodes: std::mem::take(&mut rec.nodes),
            unjoined,
        }
    }
}

impl std::fmt::Debug for CaptureSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureSession")
            .field("id", &self.id)
            .field("pool", &self.pool)
            .field("mode", &self.mode)
            .finish()
    }
}
