//! Streams: logical streams over the device's one wgpu queue. The queue runs submissions in
//! order, so work is never reordered across streams; a stream remembers its last submission
//! (for `stream_synchronize`, events and host functions) and which capture it takes part in
//! (the software capture's business).

use std::sync::{Mutex, MutexGuard};

use accel_graph_driver::{DriverResult, api::DriverStreams};

use crate::WgpuDevice;

/// The key of the default stream, which cannot be captured (as CUDA's legacy stream).
const DEFAULT_STREAM: u64 = 0;

/// One stream (the driver-level object behind a [`crate::WgpuStream`]).
#[derive(Debug)]
pub struct WgpuStreamState {
    key: u64,
    /// The last queue submission made on the stream's behalf.
    last: Mutex<Option<wgpu::SubmissionIndex>>,
}

impl WgpuStreamState {
    fn new(key: u64) -> Self {
        WgpuStreamState {
            key,
            last: Mutex::new(None),
        }
    }

    fn last_slot(&self) -> MutexGuard<'_, Option<wgpu::SubmissionIndex>> {
        // Replaced whole: a panic elsewhere cannot tear it.
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream's number within its backend instance (0 is the default stream; new streams
    /// count up from 1).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The last queue submission made on the stream's behalf (`None` before the first).
    pub fn last_submission(&self) -> Option<wgpu::SubmissionIndex> {
        self.last_slot().clone()
    }

    /// Makes a submission on the stream's behalf with `submit` (a `queue.submit`). Under the
    /// stream's lock, so that of two threads submitting on one stream, the one that submits
    /// last is the one remembered (submission indices cannot be compared).
    pub(crate) fn submit(&self, submit: impl FnOnce() -> wgpu::SubmissionIndex) {
        let mut last = self.last_slot();
        *last = Some(submit());
    }
}

impl DriverStreams for WgpuDevice {
    type Stream = WgpuStreamState;

    fn default_stream(&self) -> WgpuStreamState {
        WgpuStreamState::new(DEFAULT_STREAM)
    }

    fn create_stream(&self) -> DriverResult<WgpuStreamState> {
        Ok(WgpuStreamState::new(self.next_stream_key()))
    }

    fn stream_key(&self, stream: &WgpuStreamState) -> u64 {
        stream.key
    }

    fn is_default_stream(&self, stream: &WgpuStreamState) -> bool {
        stream.key == DEFAULT_STREAM
    }

    fn stream_synchronize(&self, stream: &WgpuStreamState) -> DriverResult<()> {
        // The queue is in order: the stream's last submission completes after every earlier
        // one, of any stream.
        match stream.last_submission() {
            Some(index) => self.gpu().wait(Some(&index)),
            None => Ok(()),
        }
    }

    fn capture_id(&self, stream: &WgpuStreamState) -> DriverResult<Option<u64>> {
        Ok(self.capture.capture_id(stream.key))
    }
}
