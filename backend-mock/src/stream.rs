//! Simulated streams. Work runs at once, on the calling thread, unless the stream is *stalled*
//! ([`crate::MockBackend::stall_stream`], a stand-in for a long-running kernel): then it
//! queues until the stream is resumed.

use std::sync::{Arc, Mutex, MutexGuard, atomic::Ordering};

use accel_graph_driver::{DriverResult, api::DriverStreams};

use crate::{
    MockDevice,
    ops::MockCommand,
    sanitizer::{Queued, QueuedOrder, StreamClock},
};

/// One simulated stream (the driver-level object behind a [`crate::MockStream`]).
pub struct MockStreamState {
    key: u64,
    default: bool,
    /// `Some(queue)` while stalled.
    stall: Mutex<Option<Vec<Queued>>>,
    /// The race sanitizer's clock of the stream.
    pub(crate) clock: StreamClock,
}

impl MockStreamState {
    /// The stream's number within its device (0 is the default stream; new streams count up
    /// from 1, so the same program gets the same numbers).
    pub fn index(&self) -> u64 {
        self.key
    }

    fn stall_slot(&self) -> MutexGuard<'_, Option<Vec<Queued>>> {
        // The queue is pushed to or taken whole: a panic elsewhere cannot tear it.
        self.stall.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True while the stream is stalled.
    pub fn is_stalled(&self) -> bool {
        self.stall_slot().is_some()
    }

    /// Queues `command` if the stream is stalled, with the order `order` says it is issued
    /// with; hands it back to run now otherwise.
    pub(crate) fn queue_if_stalled(
        &self,
        command: MockCommand,
        order: impl FnOnce(&MockCommand) -> Option<QueuedOrder>,
    ) -> Option<MockCommand> {
        match self.stall_slot().as_mut() {
            Some(queue) => {
                let order = order(&command);
                queue.push(Queued { command, order });
                None
            }
            None => Some(command),
        }
    }
}

impl std::fmt::Debug for MockStreamState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockStreamState")
            .field("index", &self.key)
            .field("stalled", &self.is_stalled())
            .finish()
    }
}

impl MockDevice {
    /// Stalls `stream`: its work queues until [`MockDevice::resume`]. False if it was stalled
    /// already.
    pub(crate) fn stall(&self, stream: &Arc<MockStreamState>) -> bool {
        let mut slot = stream.stall_slot();
        if slot.is_some() {
            return false;
        }
        *slot = Some(Vec::new());
        self.stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(stream));
        true
    }

    /// Resumes a stalled stream: its queued work runs now, in order.
    pub(crate) fn resume(&self, stream: &MockStreamState) -> DriverResult<()> {
        let Some(queue) = stream.stall_slot().take() else {
            return Ok(());
        };
        self.stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| !std::ptr::eq(s.as_ptr(), stream));
        for Queued { command, order } in queue {
            self.sanitize_eager(stream, &command, order.as_ref())?;
            self.execute(&command, None)?;
        }
        Ok(())
    }
}

impl DriverStreams for MockDevice {
    type Stream = Arc<MockStreamState>;

    fn default_stream(&self) -> Arc<MockStreamState> {
        Arc::new(MockStreamState {
            key: 0,
            default: true,
            stall: Mutex::new(None),
            clock: StreamClock::default(),
        })
    }

    fn create_stream(&self) -> DriverResult<Arc<MockStreamState>> {
        self.alive()?;
        Ok(Arc::new(MockStreamState {
            key: self.next_stream.fetch_add(1, Ordering::Relaxed),
            default: false,
            stall: Mutex::new(None),
            clock: StreamClock::default(),
        }))
    }

    fn stream_key(&self, stream: &Arc<MockStreamState>) -> u64 {
        stream.key
    }

    fn is_default_stream(&self, stream: &Arc<MockStreamState>) -> bool {
        stream.default
    }

    fn stream_synchronize(&self, stream: &Arc<MockStreamState>) -> DriverResult<()> {
        self.check_can_wait(stream, "stream_synchronize")?;
        self.host_waited_for_stream(stream);
        Ok(())
    }

    fn capture_id(&self, stream: &Arc<MockStreamState>) -> DriverResult<Option<u64>> {
        Ok(self.capture.capture_id(stream.key))
    }
}

impl Drop for MockStreamState {
    fn drop(&mut self) {
        // A stream dropped while stalled: its queued work is dropped with it (as work of a
        // destroyed stream never runs on a device).
        if self.stall.get_mut().map(|s| s.is_some()).unwrap_or(false) {
            tracing::warn!(
                stream = self.key,
                "a stalled mock stream was dropped with queued work"
            );
        }
    }
}
