//! The captures in progress on one backend instance: which pool each allocates from, which host
//! callbacks it must keep alive, and the capture-mode rules the backend applies to its own
//! blocking calls.
//!
//! The runtime identifies a capture by the id `hipStreamGetCaptureInfo` reports for every
//! stream taking part in it (the origin stream and streams pulled in through events), so
//! allocations and host callbacks issued on a forked stream find their capture too.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    thread::{self, ThreadId},
};

use accel_graph_api::{
    CaptureErrorMode, GraphError, HostCallback, PoolId, Result,
    capture_rules::{CaptureId, CaptureRules},
};

/// Host callbacks a graph calls on every replay: they must outlive its executable graph.
pub(crate) type KeepAlive = Arc<Mutex<Vec<Box<HostCallback>>>>;

/// One capture in progress.
#[derive(Clone)]
pub(crate) struct ActiveCapture {
    /// The runtime's capture id.
    pub(crate) runtime_id: u64,
    /// The id in [`CaptureRules`].
    pub(crate) rules_id: CaptureId,
    /// The pool the capture's allocations come from.
    pub(crate) pool: PoolId,
    /// The resolved capture mode.
    pub(crate) mode: CaptureErrorMode,
    /// The thread that began it.
    pub(crate) thread: ThreadId,
    /// Host callbacks recorded into it.
    pub(crate) keep_alive: KeepAlive,
}

/// Registry of the captures in progress.
#[derive(Default)]
pub(crate) struct Captures {
    active: Mutex<Vec<ActiveCapture>>,
    rules: CaptureRules,
}

impl Captures {
    /// The registry, locked. Holding the lock keeps captures from beginning, which the
    /// allocator uses to free memory only while no capture runs.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<ActiveCapture>> {
        // The list stays consistent even if a holder panicked: every update is one push/remove.
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a capture the runtime began (id `runtime_id`) on the calling thread.
    pub(crate) fn begin(
        &self,
        runtime_id: u64,
        pool: PoolId,
        mode: CaptureErrorMode,
        keep_alive: KeepAlive,
    ) -> ActiveCapture {
        let mut active = self.lock();
        let capture = ActiveCapture {
            runtime_id,
            rules_id: self.rules.begin(mode),
            pool,
            mode: mode.resolved(),
            thread: thread::current().id(),
            keep_alive,
        };
        active.push(capture.clone());
        capture
    }

    /// Removes the capture; returns why the backend's rules invalidated it, if they did.
    pub(crate) fn end(&self, runtime_id: u64) -> Option<String> {
        let mut active = self.lock();
        let pos = active.iter().position(|c| c.runtime_id == runtime_id)?;
        let capture = active.remove(pos);
        self.rules.end(capture.rules_id)
    }

    /// The capture with runtime id `runtime_id`, if in progress.
    pub(crate) fn get(&self, runtime_id: u64) -> Option<ActiveCapture> {
        self.lock()
            .iter()
            .find(|c| c.runtime_id == runtime_id)
            .cloned()
    }

    /// Checks that the calling thread may end `capture` (only its own thread may, unless
    /// relaxed).
    pub(crate) fn check_end(&self, capture: &ActiveCapture) -> Result<()> {
        self.rules.check_end(capture.rules_id)
    }

    /// Marks `capture` invalid, keeping the first reason.
    pub(crate) fn invalidate(&self, capture: &ActiveCapture, reason: impl Into<String>) {
        self.rules.invalidate(capture.rules_id, reason);
    }

    /// Applies CUDA's capture-mode rules to a blocking call of the backend (`operation`):
    /// forbidden on the thread of a non-relaxed capture and on every thread while a global
    /// capture runs; a capture that forbids the call is invalidated by it. The runtime applies
    /// its own rules as well; these make the contract hold on runtimes that enforce fewer.
    pub(crate) fn check_unsafe_call(&self, operation: &str) -> Result<()> {
        self.rules.check_unsafe_call(operation)
    }

    /// Applies the rule for a device-wide synchronize: it conflicts with every capture in
    /// progress, in every mode and from every thread (as on CUDA), and invalidates each.
    pub(crate) fn check_device_synchronize(&self, operation: &str) -> Result<()> {
        self.rules.check_device_synchronize(operation)
    }

    /// True while a capture is in progress.
    pub(crate) fn any_active(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The mode to name when the runtime refuses a call during capture: the calling thread's
    /// non-relaxed capture, else another thread's global one.
    pub(crate) fn forbidding_mode(&self) -> CaptureErrorMode {
        let me = thread::current().id();
        let active = self.lock();
        active
            .iter()
            .find(|c| c.thread == me && c.mode != CaptureErrorMode::Relaxed)
            .or_else(|| active.iter().find(|c| c.mode == CaptureErrorMode::Global))
            .or_else(|| active.first())
            .map_or(CaptureErrorMode::Global, |c| c.mode)
    }

    /// Errors with `CaptureInvalidated` if the backend's rules invalidated `capture`.
    pub(crate) fn ensure_valid(&self, capture: &ActiveCapture) -> Result<()> {
        match self.rules.invalidation(capture.rules_id) {
            Some(reason) => Err(GraphError::CaptureInvalidated { reason }),
            None => Ok(()),
        }
    }
}
