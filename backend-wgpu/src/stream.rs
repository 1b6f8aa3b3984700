//! Streams: ordered submission queues over the device's one wgpu queue. A stream remembers its
//! last submission (for `stream_synchronize`) and the capture it belongs to, if any.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::capture::CaptureSession;

/// A stream of the wgpu backend. Clones name the same stream.
///
/// All streams submit to the device's single wgpu queue, which runs submissions in order, so
/// work is never reordered across streams; streams still matter for capture (which stream is
/// capturing, fork/join through events) and for `stream_synchronize`.
#[derive(Clone)]
pub struct WgpuStream {
    pub(crate) inner: Arc<StreamInner>,
}

pub(crate) struct StreamInner {
    pub(crate) id: u64,
    pub(crate) instance: u64,
    /// False for the default stream, which refuses capture like CUDA's legacy stream.
    pub(crate) capturable: bool,
    state: Mutex<StreamState>,
}

#[derive(Default)]
pub(crate) struct StreamState {
    /// The capture this stream records into (it began there or was forked into it).
    pub(crate) capture: Option<Arc<CaptureSession>>,
    /// The last queue submission made on this stream's behalf.
    pub(crate) last_submission: Option<wgpu::SubmissionIndex>,
}

impl WgpuStream {
    pub(crate) fn new(id: u64, instance: u64, capturable: bool) -> Self {
        WgpuStream {
            inner: Arc::new(StreamInner {
                id,
                instance,
                capturable,
                state: Mutex::new(StreamState::default()),
            }),
        }
    }

    /// The stream's number within its backend (0 is the default stream).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, StreamState> {
        // The state is two plain fields; a panic elsewhere cannot leave it torn.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The capture this stream records into, if any.
    pub(crate) fn session(&self) -> Option<Arc<CaptureSession>> {
        self.state().capture.clone()
    }
}

impl PartialEq for WgpuStream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.id == other.inner.id && self.inner.instance == other.inner.instance
    }
}

impl Eq for WgpuStream {}

impl std::fmt::Debug for WgpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuStream")
            .field("id", &self.inner.id)
            .field("default", &!self.inner.capturable)
            .finish()
    }
}
