//! `Domain`: what every backend instance of one capture domain shares — the capture-mode rules
//! and the gate that keeps device frees out of captures.
//!
//! # Why frees are gated
//!
//! Freeing device memory (`cuMemFree`, `hipFree`) synchronizes, which a capture in progress
//! forbids: the free fails and may invalidate the capture. Buffers are dropped from any
//! thread at any time, so a free cannot simply return an error: while any capture of the
//! domain runs, frees wait, and run when the last capture ends.
//!
//! The window this closes: a capture that has begun in the driver but is not yet counted. Here
//! a capture is counted *before* the driver begins it ([`Domain::capture_starting`], under the
//! gate's write lock), and a free checks the count and frees *under the read lock*. So either
//! the free's check-and-free runs entirely before the count goes up — hence before the driver
//! begins the capture — or the free sees the count and waits. No free can run in between
//! (`unsafe_calls_and_frees_never_meet_a_capture_at_the_device` in the mock backend's tests
//! drives many threads through that window against a device that counts frees and unsafe
//! calls reaching it during a capture).
//!
//! # Why unsafe calls never meet a capture in the driver
//!
//! The capture-mode rules decide every unsafe call (a synchronize, a blocking copy, a device
//! allocation) before it reaches the driver. A capture another thread begins *after* that
//! decision must not be hit by the call in the driver: CUDA would refuse the call and
//! invalidate that capture from the calling thread while its owner begins, uses or ends it —
//! and NVIDIA's driver was seen to crash in that race (SIGSEGV inside `cuStreamSynchronize`
//! while another thread ran `cuStreamEndCapture`). So the stream-level unsafe calls the rules
//! allowed run with the calling thread's capture mode relaxed (which no capture of another
//! thread conflicts with), and a device-wide synchronize — which conflicts with captures in
//! every mode — runs under the gate's read lock ([`Domain::excluding_capture_begins`]), while
//! a capture is registered with the rules under the write lock ([`Domain::capture_starting`]).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, Weak,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use accel_graph_api::{
    BackendKind, CaptureErrorMode,
    backend_kit::capture_rules::{CaptureRecord, CaptureRules},
};

use crate::host::in_host_callback;

/// Work waiting for the domain's captures to end.
type Deferred = Box<dyn FnOnce() + Send>;

/// One capture domain.
pub(crate) struct Domain {
    /// The capture-mode rules of every capture in the domain.
    pub(crate) rules: CaptureRules,
    /// Write-locked to change `captures`; read-locked around every free.
    gate: RwLock<()>,
    /// Captures begun, or beginning, in the domain.
    captures: AtomicUsize,
    deferred: Mutex<Vec<Deferred>>,
    /// Set when `deferred` may hold work: the fast path of [`Domain::flush`].
    has_deferred: AtomicBool,
}

impl Domain {
    /// The domain `key` of backend `kind`, shared by every live instance that names it.
    pub(crate) fn get(kind: BackendKind, key: u64) -> Arc<Domain> {
        type Registry = Mutex<HashMap<(BackendKind, u64), Weak<Domain>>>;
        static DOMAINS: OnceLock<Registry> = OnceLock::new();
        let mut domains = DOMAINS
            .get_or_init(Registry::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        domains.retain(|_, d| d.strong_count() > 0);
        if let Some(domain) = domains.get(&(kind, key)).and_then(Weak::upgrade) {
            return domain;
        }
        let domain = Arc::new(Domain {
            rules: CaptureRules::default(),
            gate: RwLock::new(()),
            captures: AtomicUsize::new(0),
            deferred: Mutex::new(Vec::new()),
            has_deferred: AtomicBool::new(false),
        });
        domains.insert((kind, key), Arc::downgrade(&domain));
        domain
    }

    /// Counts a capture of `mode` that is about to begin in the driver, and registers it with
    /// the rules, both under the write lock: a free or a device-wide synchronize either ran
    /// entirely before, or sees the capture. Call [`Domain::capture_ended`] once for it (and
    /// end the record with the rules), whether it began or not.
    pub(crate) fn capture_starting(&self, mode: CaptureErrorMode) -> Arc<CaptureRecord> {
        let _write = self.gate.write().unwrap_or_else(|e| e.into_inner());
        self.captures.fetch_add(1, Ordering::AcqRel);
        self.rules.begin(mode)
    }

    /// Runs `f` (a device-wide call the rules allowed, checked inside `f`) while no capture of
    /// the domain can begin (outside host callbacks: see [`Domain::read_gate`]).
    pub(crate) fn excluding_capture_begins<T>(&self, f: impl FnOnce() -> T) -> T {
        let _read = self.read_gate();
        f()
    }

    /// A capture counted by [`Domain::capture_starting`] is over: when it was the last one,
    /// the deferred frees run.
    pub(crate) fn capture_ended(&self) {
        {
            // Not locked in a host callback (see `read_gate`): there the count only goes down.
            let _write =
                (!in_host_callback()).then(|| self.gate.write().unwrap_or_else(|e| e.into_inner()));
            let previous = self.captures.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(previous > 0, "capture_ended without capture_starting");
        }
        self.flush();
    }

    /// True while a capture of the domain runs (or is beginning).
    pub(crate) fn capture_active(&self) -> bool {
        self.captures.load(Ordering::Acquire) > 0
    }

    /// The gate's read lock, except inside a host callback (`None`), where no runtime call
    /// may be made anyway: a wait holding the read lock may be waiting for that very
    /// callback, and a capture queued for the write lock would block a read there.
    fn read_gate(&self) -> Option<RwLockReadGuard<'_, ()>> {
        (!in_host_callback()).then(|| self.gate.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs `free` now if no capture runs and the thread is not in a host callback; else when
    /// the last capture ends, or at the next [`Domain::flush`] outside a callback. Returns
    /// true when it ran now.
    pub(crate) fn free(&self, free: impl FnOnce() + Send + 'static) -> bool {
        if let Some(_read) = self.read_gate()
            && self.captures.load(Ordering::Acquire) == 0
        {
            free();
            return true;
        }
        self.deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(free));
        self.has_deferred.store(true, Ordering::Release);
        false
    }

    /// Runs the deferred frees if no capture runs (and the thread is not in a host callback).
    pub(crate) fn flush(&self) {
        if !self.has_deferred.load(Ordering::Acquire) {
            return;
        }
        let Some(_read) = self.read_gate() else {
            return;
        };
        if self.captures.load(Ordering::Acquire) > 0 {
            return;
        }
        // Cleared before the take: work pushed meanwhile sets it again.
        self.has_deferred.store(false, Ordering::Release);
        let work = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        for free in work {
            free();
        }
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // The last instance of the domain is gone, so no capture of it can run: whatever still
        // waits is freed now.
        let work = std::mem::take(self.deferred.get_mut().unwrap_or_else(|e| e.into_inner()));
        for free in work {
            free();
        }
    }
}
