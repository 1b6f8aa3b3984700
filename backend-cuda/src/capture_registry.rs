//! The captures this backend instance has begun, keyed by CUDA's capture id, so that work
//! issued on any stream joined into a capture (allocations, host callbacks) finds its graph.

use std::{
    collections::HashMap,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    thread::{self, ThreadId},
};

use accel_graph_api::{CaptureErrorMode, HostCallback, PoolId};

/// Captures begun by any backend instance of the process that have not ended: frees of device
/// memory wait while it is non-zero, because `cuMemFree` during a capture may invalidate it.
static ACTIVE_CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Whether any capture begun through accel-graph is in progress in the process.
pub(crate) fn any_capture_active() -> bool {
    ACTIVE_CAPTURES.load(Ordering::Acquire) > 0
}

/// One capture in progress.
pub(crate) struct CaptureEntry {
    /// The graph's pool: allocations made during the capture come from it.
    pub pool: PoolId,
    /// The capture's (resolved) error mode.
    pub mode: CaptureErrorMode,
    /// The thread that began it.
    pub thread: ThreadId,
    /// Host callbacks captured as host nodes: they must live as long as the graph. Boxed:
    /// host nodes hold a thin pointer to each.
    #[allow(clippy::vec_box)]
    pub callbacks: Vec<Box<HostCallback>>,
}

impl std::fmt::Debug for CaptureEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureEntry")
            .field("pool", &self.pool)
            .field("mode", &self.mode)
            .field("thread", &self.thread)
            .field("callbacks", &self.callbacks.len())
            .finish()
    }
}

/// Active captures of one backend instance.
#[derive(Default)]
pub(crate) struct CaptureRegistry {
    entries: Mutex<HashMap<u64, CaptureEntry>>,
    /// Host callbacks of reset graphs, waiting for a device synchronisation (not allowed while
    /// a capture runs) before they can be dropped.
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<HostCallback>>>,
}

impl std::fmt::Debug for CaptureRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureRegistry")
            .field("active", &self.lock().len())
            .finish()
    }
}

impl CaptureRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, CaptureEntry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers capture `id`, begun on this thread.
    pub(crate) fn begin(&self, id: u64, pool: PoolId, mode: CaptureErrorMode) {
        ACTIVE_CAPTURES.fetch_add(1, Ordering::AcqRel);
        self.lock().insert(
            id,
            CaptureEntry {
                pool,
                mode,
                thread: thread::current().id(),
                callbacks: Vec::new(),
            },
        );
    }

    /// Removes capture `id`, returning its entry (its host callbacks go to the graph).
    pub(crate) fn end(&self, id: u64) -> Option<CaptureEntry> {
        let entry = self.lock().remove(&id);
        if entry.is_some() {
            ACTIVE_CAPTURES.fetch_sub(1, Ordering::AcqRel);
        }
        entry
    }

    /// Drops the callbacks of a reset graph once no launch can still call them: after a device
    /// synchronisation now, or — while a capture runs, which a synchronisation would break —
    /// at the next reset with no capture in progress.
    #[allow(clippy::vec_box)]
    pub(crate) fn retire_callbacks(&self, callbacks: Vec<Box<HostCallback>>) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        retired.extend(callbacks);
        if any_capture_active() {
            return;
        }
        // SAFETY: plain device synchronisation, with no capture in progress.
        let rc = unsafe { cudarc::driver::sys::cuCtxSynchronize() };
        if rc == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            retired.clear();
        }
    }

    /// Whether callbacks wait for a synchronisation.
    pub(crate) fn has_retired_callbacks(&self) -> bool {
        !self
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The pool of capture `id`, if it is one of ours.
    pub(crate) fn pool_of(&self, id: u64) -> Option<PoolId> {
        self.lock().get(&id).map(|e| e.pool)
    }

    /// Keeps a captured host callback alive with its capture; false if `id` is not ours.
    pub(crate) fn keep_callback(&self, id: u64, callback: Box<HostCallback>) -> bool {
        match self.lock().get_mut(&id) {
            Some(entry) => {
                entry.callbacks.push(callback);
                true
            }
            None => false,
        }
    }

    /// The mode that governs an unsafe call made on this thread: the capture this thread
    /// began, else a `Global` capture of another thread, else the strictest active one.
    pub(crate) fn governing_mode(&self) -> CaptureErrorMode {
        let me = thread::current().id();
        let entries = self.lock();
        if let Some(e) = entries.values().find(|e| e.thread == me) {
            return e.mode;
        }
        if entries.values().any(|e| e.mode == CaptureErrorMode::Global) {
            return CaptureErrorMode::Global;
        }
        entries
            .values()
            .map(|e| e.mode)
            .next()
            .unwrap_or(CaptureErrorMode::Global)
    }
}
