//! CUDA's capture-mode rules, written once: which calls a capture in progress forbids on which
//! thread, and which captures a forbidden call invalidates.

use std::{
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, ThreadId},
};

use crate::{CaptureConflict, CaptureErrorMode, GraphError, Result};

/// One capture in progress, as the rules see it: its thread and mode, and whether a forbidden
/// call invalidated it. Shared (`Arc`) so the capture's owner checks invalidation without a
/// lock.
#[derive(Debug)]
pub struct CaptureRecord {
    id: u64,
    thread: ThreadId,
    mode: CaptureErrorMode,
    invalidated: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl CaptureRecord {
    /// The thread that began the capture.
    pub fn thread(&self) -> ThreadId {
        self.thread
    }

    /// The capture's resolved mode.
    pub fn mode(&self) -> CaptureErrorMode {
        self.mode
    }

    /// True once a forbidden call (or an error inside the capture) invalidated it.
    #[inline]
    pub fn is_invalidated(&self) -> bool {
        self.invalidated.load(Ordering::Acquire)
    }

    /// Why the capture was invalidated, if it was.
    pub fn invalidation(&self) -> Option<String> {
        if !self.is_invalidated() {
            return None;
        }
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Marks the capture invalid, keeping the first reason.
    pub fn invalidate(&self, reason: impl Into<String>) {
        let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert_with(|| reason.into());
        self.invalidated.store(true, Ordering::Release);
    }

    /// `Err(CaptureInvalidated)` if the capture was invalidated.
    pub fn ensure_valid(&self) -> Result<()> {
        match self.invalidation() {
            Some(reason) => Err(GraphError::CaptureInvalidated { reason }),
            None => Ok(()),
        }
    }

    /// Checks that the calling thread may end the capture: outside `Relaxed` mode only the
    /// thread that began it may (the capture goes on after the error).
    pub fn check_end(&self) -> Result<()> {
        if self.mode != CaptureErrorMode::Relaxed && self.thread != thread::current().id() {
            Err(GraphError::WrongThread)
        } else {
            Ok(())
        }
    }
}

/// The captures in progress in one *capture domain* — what the CUDA driver's global mode
/// spans (the process) — and CUDA's rules for unsafe calls during them, as measured on an
/// H100 (driver 580):
///
/// * a capture of the calling thread that is not `Relaxed` forbids the call;
/// * a `Global` capture of another thread forbids it;
/// * a device-wide synchronize conflicts with every capture, in every mode;
///
/// and a capture that forbids a call is invalidated by it.
///
/// ```
/// use accel_graph_api::{CaptureErrorMode, backend_kit::capture_rules::CaptureRules};
/// let rules = CaptureRules::default();
/// let capture = rules.begin(CaptureErrorMode::ThreadLocal);
/// // from another thread: thread_local allows it
/// std::thread::scope(|s| { s.spawn(|| assert!(rules.check_unsafe_call("synchronize").is_ok())); });
/// // on the capturing thread: error, and the capture is invalidated
/// assert!(rules.check_unsafe_call("synchronize").is_err());
/// assert!(capture.is_invalidated());
/// rules.end(&capture);
/// assert!(!rules.any_active());
/// ```
#[derive(Debug, Default)]
pub struct CaptureRules {
    active: Mutex<Vec<Arc<CaptureRecord>>>,
    next: AtomicU64,
}

impl CaptureRules {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<CaptureRecord>>> {
        // One push or remove per update: a panic elsewhere cannot tear the list.
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a capture begun on the calling thread in `mode`.
    pub fn begin(&self, mode: CaptureErrorMode) -> Arc<CaptureRecord> {
        let record = Arc::new(CaptureRecord {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            thread: thread::current().id(),
            mode: mode.resolved(),
            invalidated: AtomicBool::new(false),
            reason: Mutex::new(None),
        });
        self.lock().push(Arc::clone(&record));
        record
    }

    /// Removes a capture that ended (or was aborted); returns why it was invalidated, if it
    /// was.
    pub fn end(&self, record: &CaptureRecord) -> Option<String> {
        self.lock().retain(|c| c.id != record.id);
        record.invalidation()
    }

    /// True while any capture is in progress.
    pub fn any_active(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Applies the rules to an unsafe call (`operation`) made on the calling thread.
    pub fn check_unsafe_call(&self, operation: &str) -> Result<()> {
        let me = thread::current().id();
        self.check(operation, |c| {
            if c.thread == me {
                (c.mode != CaptureErrorMode::Relaxed).then_some(CaptureConflict::CapturingThread)
            } else {
                (c.mode == CaptureErrorMode::Global).then_some(CaptureConflict::OtherThread)
            }
        })
    }

    /// Applies the rule for a device-wide synchronize: it conflicts with every capture in
    /// progress, in every mode and from every thread (`cuCtxSynchronize` fails and invalidates
    /// the capture even in relaxed mode).
    pub fn check_device_synchronize(&self, operation: &str) -> Result<()> {
        self.check(operation, |_| Some(CaptureConflict::EveryMode))
    }

    /// The mode and conflict to name when the driver itself refuses an unsafe call made on the
    /// calling thread: its own non-relaxed capture, else another thread's global one, else the
    /// first capture in progress.
    pub fn forbidding(&self) -> (CaptureErrorMode, CaptureConflict) {
        let me = thread::current().id();
        let active = self.lock();
        if let Some(c) = active
            .iter()
            .find(|c| c.thread == me && c.mode != CaptureErrorMode::Relaxed)
        {
            return (c.mode, CaptureConflict::CapturingThread);
        }
        if let Some(c) = active.iter().find(|c| c.mode == CaptureErrorMode::Global) {
            return (c.mode, CaptureConflict::OtherThread);
        }
        active.first().map_or(
            (CaptureErrorMode::Global, CaptureConflict::EveryMode),
            |c| (c.mode, CaptureConflict::EveryMode),
        )
    }

    /// Invalidates every active capture that `forbids` the call and reports the first one.
    fn check(
        &self,
        operation: &str,
        forbids: impl Fn(&CaptureRecord) -> Option<CaptureConflict>,
    ) -> Result<()> {
        let active = self.lock();
        let mut violated = None;
        for c in active.iter() {
            if let Some(conflict) = forbids(c) {
                c.invalidate(format!("unsafe call during capture: {operation}"));
                violated.get_or_insert((c.mode, conflict));
            }
        }
        match violated {
            Some((mode, conflict)) => Err(GraphError::UnsafeDuringCapture {
                operation: operation.to_owned(),
                mode,
                conflict,
            }),
            None => Ok(()),
        }
    }
}
