//! Events: a point in a stream's order. Recorded outside a capture an event names a queue
//! submission; recorded on a capturing stream it names that stream's last captured nodes, so a
//! wait on another stream forks the capture there (and a wait back joins it).

use std::sync::{Mutex, MutexGuard, Weak};

use crate::capture::CaptureSession;

/// An event of the wgpu backend.
pub struct WgpuEvent {
    pub(crate) id: u64,
    pub(crate) instance: u64,
    state: Mutex<EventState>,
}

#[derive(Default, Clone)]
pub(crate) enum EventState {
    /// Never recorded.
    #[default]
    Unrecorded,
    /// Recorded eagerly: the stream's last submission at that point.
    Submitted(Option<wgpu::SubmissionIndex>),
    /// Recorded during a capture: the recording stream's frontier nodes.
    Captured {
        session: Weak<CaptureSession>,
        nodes: Vec<usize>,
    },
}

impl WgpuEvent {
    pub(crate) fn new(id: u64, instance: u64) -> Self {
        WgpuEvent {
            id,
            instance,
            state: Mutex::new(EventState::Unrecorded),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, EventState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for WgpuEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let recorded = match &*self.state() {
            EventState::Unrecorded => "unrecorded",
            EventState::Submitted(_) => "submitted",
            EventState::Captured { .. } => "captured",
        };
        f.debug_struct("WgpuEvent")
            .field("id", &self.id)
            .field("state", &recorded)
            .finish()
    }
}
