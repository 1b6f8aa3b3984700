//! CUDA's capture-mode rules, for backends that emulate capture in software (mock, wgpu), so
//! they behave as the driver does.

use std::{
    sync::Mutex,
    thread::{self, ThreadId},
};

use crate::{CaptureErrorMode, GraphError, Result};

/// Identifier of one capture sequence.
pub type CaptureId = u64;

#[derive(Debug, Clone)]
struct ActiveCapture {
    id: CaptureId,
    thread: ThreadId,
    mode: CaptureErrorMode,
    invalidated: Option<String>,
}

/// The captures in progress on one device, and the rules for unsafe calls during them.
///
/// ```
/// use accel_graph_api::{CaptureErrorMode, capture_rules::CaptureRules};
/// let rules = CaptureRules::default();
/// let id = rules.begin(CaptureErrorMode::ThreadLocal);
/// // from another thread: thread_local allows it
/// std::thread::scope(|s| { s.spawn(|| assert!(rules.check_unsafe_call("synchronize").is_ok())); });
/// // on the capturing thread: error, and the capture is invalidated
/// assert!(rules.check_unsafe_call("synchronize").is_err());
/// assert!(rules.invalidation(id).is_some());
/// ```
#[derive(Debug, Default)]
pub struct CaptureRules {
    active: Mutex<Vec<ActiveCapture>>,
    next: Mutex<CaptureId>,
}

impl CaptureRules {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ActiveCapture>> {
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a capture begun on the calling thread in `mode` (resolved).
    pub fn begin(&self, mode: CaptureErrorMode) -> CaptureId {
        let id = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        self.lock().push(ActiveCapture {
            id,
            thread: thread::current().id(),
            mode: mode.resolved(),
            invalidated: None,
        });
        id
    }

    /// Checks that the calling thread may end capture `id`: outside `Relaxed` mode only the
    /// thread that began it may.
    pub fn check_end(&self, id: CaptureId) -> Result<()> {
        let active = self.lock();
        match active.iter().find(|c| c.id == id) {
            Some(c)
                if c.mode != CaptureErrorMode::Relaxed && c.thread != thread::current().id() =>
            {
                Err(GraphError::WrongThread)
            }
            _ => Ok(()),
        }
    }

    /// Removes capture `id`; returns why it was invalidated, if it was.
    pub fn end(&self, id: CaptureId) -> Option<String> {
        let mut active = self.lock();
        let pos = active.iter().position(|c| c.id == id)?;
        active.remove(pos).invalidated
    }

    /// Marks capture `id` invalid (an error inside the capture), keeping the first reason.
    pub fn invalidate(&self, id: CaptureId, reason: impl Into<String>) {
        if let Some(c) = self.lock().iter_mut().find(|c| c.id == id) {
            c.invalidated.get_or_insert_with(|| reason.into());
        }
    }

    /// Why capture `id` was invalidated, if it was.
    pub fn invalidation(&self, id: CaptureId) -> Option<String> {
        self.lock()
            .iter()
            .find(|c| c.id == id)
            .and_then(|c| c.invalidated.clone())
    }

    /// True while any capture is in progress.
    pub fn any_active(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Applies the rules to an unsafe call (`operation`) made on the calling thread, as the CUDA
    /// driver does (measured on an H100, driver 580):
    ///
    /// * a capture of this thread not in `Relaxed` mode forbids it;
    /// * a `Global` capture of another thread forbids it;
    ///
    /// and a capture that forbids a call is invalidated by it.
    pub fn check_unsafe_call(&self, operation: &str) -> Result<()> {
        let me = thread::current().id();
        self.check(operation, |c| {
            if c.thread == me {
                c.mode != CaptureErrorMode::Relaxed
            } else {
                c.mode == CaptureErrorMode::Global
            }
        })
    }

    /// Applies the rule for a device-wide synchronize: it conflicts with every capture in
    /// progress, in every mode and from every thread (`cuCtxSynchronize` fails and invalidates
    /// the capture even in relaxed mode), so each active capture forbids it and is invalidated.
    pub fn check_device_synchronize(&self, operation: &str) -> Result<()> {
        self.check(operation, |_| true)
    }

    /// Invalidates every active capture for which `forbids` holds and reports the first one.
    fn check(&self, operation: &str, forbids: impl Fn(&ActiveCapture) -> bool) -> Result<()> {
        let mut active = self.lock();
        let mut violated = None;
        for c in active.iter_mut().filter(|c| forbids(c)) {
            c.invalidated
                .get_or_insert_with(|| format!("unsafe call during capture: {operation}"));
            violated.get_or_insert(c.mode);
        }
        match violated {
            Some(mode) => Err(GraphError::UnsafeDuringCapture {
                operation: operation.to_owned(),
                mode,
            }),
            None => Ok(()),
        }
    }
}
