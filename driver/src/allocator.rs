//! `DriverAllocator`: the raw allocator under the shared pool bookkeeping — the driver's
//! `malloc`/`free`, with blocks let go recycled (see [`crate::recycler`]) and frees kept out of
//! captures by the domain's gate.

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use accel_graph_api::{Result, backend_kit::pools::RawAllocator};

use crate::{
    Driver,
    domain::Domain,
    errors::{CallSite, to_graph_error},
    recycler::{Recycler, Waited},
    shared::relaxed_mode,
};

/// The driver's device memory as a [`RawAllocator`].
pub struct DriverAllocator<D: Driver> {
    driver: Arc<D>,
    domain: Arc<Domain>,
    /// Bytes of frees waiting for the domain's captures to end.
    deferred_bytes: Arc<AtomicUsize>,
    /// Whether blocks let go are kept for later allocations ([`crate::api::DriverMemory::recycles_blocks`]).
    recycles: bool,
    /// Blocks let go, kept for later allocations.
    recycler: Arc<Mutex<Recycler<D::Block>>>,
    /// A device-wide wait to recycle the quarantine is queued behind the domain's captures.
    wait_queued: Arc<AtomicBool>,
}

impl<D: Driver> DriverAllocator<D> {
    pub(crate) fn new(driver: Arc<D>, domain: Arc<Domain>) -> Self {
        DriverAllocator {
            recycles: driver.recycles_blocks(),
            driver,
            domain,
            deferred_bytes: Arc::new(AtomicUsize::new(0)),
            recycler: Arc::new(Mutex::new(Recycler::default())),
            wait_queued: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Bytes of frees waiting for a capture to end.
    pub fn deferred_bytes(&self) -> usize {
        self.deferred_bytes.load(Ordering::Acquire)
    }

    /// Bytes of device blocks kept for later allocations (not counted by the pools).
    pub fn cached_bytes(&self) -> usize {
        lock(&self.recycler).kept_bytes()
    }

    /// Takes the quarantined blocks as a device-wide wait begins; hand them to
    /// [`DriverAllocator::wait_completed`] with the wait's outcome. The caller has made sure
    /// that no capture of the device runs: the wait then covers every queued use of them.
    pub(crate) fn wait_begins(&self) -> Waited<D::Block> {
        lock(&self.recycler).begin_wait()
    }

    /// The device-wide wait begun with [`DriverAllocator::wait_begins`] ended: its blocks are
    /// ready for reuse if it succeeded, else still quarantined.
    pub(crate) fn wait_completed(&self, waited: Waited<D::Block>, succeeded: bool) {
        lock(&self.recycler).end_wait(waited, succeeded);
    }

    /// Gives the kept blocks that nothing queued can still use back to the driver
    /// (`empty_cache`, a refused allocation); returns their bytes. When no capture of the
    /// domain runs, a device-wide wait first makes the quarantine ready. Blocks whose queued
    /// work that wait did not see finish (it failed, or a capture ran) stay kept: the driver's
    /// free would wait for that work on a device, but on one that does not (the mock) the work
    /// would meet freed memory, and a stalled stream would make it wait for ever.
    pub(crate) fn release_cached(&self) -> usize {
        if self.recycles && !self.domain.capture_active() && lock(&self.recycler).quarantined() {
            self.domain.free(self.device_wide_wait());
        }
        let blocks = lock(&self.recycler).drain_ready();
        let mut released = 0usize;
        for (block, bytes) in blocks {
            released = released.saturating_add(bytes);
            self.free_block(block, bytes);
        }
        released
    }

    /// A device-wide wait that makes the quarantine ready when it succeeds; run by the free
    /// gate, so only while no capture of the domain runs.
    fn device_wide_wait(&self) -> impl FnOnce() + Send + 'static {
        let driver = Arc::clone(&self.driver);
        let recycler = Arc::clone(&self.recycler);
        move || {
            let waited = lock(&recycler).begin_wait();
            // No capture of the domain runs: a device-wide wait is allowed and covers every
            // queued use of the quarantined blocks.
            let outcome = driver.bind().and_then(|()| driver.synchronize());
            lock(&recycler).end_wait(waited, outcome.is_ok());
            if let Err(e) = outcome {
                tracing::warn!(backend = D::KIND.name(), error = %e, "waiting for the device to recycle memory failed");
            }
        }
    }

    /// Frees `block` through the driver once no capture of the domain runs; the driver's free
    /// waits for queued work that may still use it.
    fn free_block(&self, block: D::Block, bytes: usize) {
        let driver = Arc::clone(&self.driver);
        let deferred = Arc::clone(&self.deferred_bytes);
        deferred.fetch_add(bytes, Ordering::AcqRel);
        self.domain.free(move || {
            deferred.fetch_sub(bytes, Ordering::AcqRel);
            let freed = driver.bind().and_then(|()| {
                // SAFETY: the pools release a block once, when its last allocation handle is
                // gone: no buffer holds it, no graph holds it (captures keep a hold on every
                // block they touch), and pending frees wait for the streams that used it; the
                // recycler hands it out again or frees it, never both. The block came from
                // this driver's `malloc` (or was adopted as if it had), and the free gate ran
                // this closure only while no capture of the domain runs.
                unsafe { driver.free(block) }
            });
            if let Err(e) = freed {
                tracing::warn!(backend = D::KIND.name(), error = %e, "freeing device memory failed");
            }
        });
    }

    /// Quarantine is full: once no capture of the domain runs, wait for the device and make
    /// the quarantined blocks ready (one wait for many blocks instead of one per free).
    fn recycle_quarantine(&self) {
        if self.wait_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let queued = Arc::clone(&self.wait_queued);
        let wait = self.device_wide_wait();
        self.domain.free(move || {
            queued.store(false, Ordering::Release);
            wait();
        });
    }
}

fn lock<B>(recycler: &Mutex<Recycler<B>>) -> MutexGuard<'_, Recycler<B>> {
    // Every method of the recycler leaves it consistent between statements that can panic
    // (none can), so a poisoned lock still holds valid books.
    recycler.lock().unwrap_or_else(|e| e.into_inner())
}

impl<D: Driver> RawAllocator for DriverAllocator<D> {
    type Block = (D::Block, usize);

    fn allocate(&self, bytes: usize) -> Result<(D::Block, usize)> {
        let site = CallSite {
            operation: "alloc",
            bytes,
            unsafe_call: true,
        };
        // A recycled block: nothing queued before it was let go still uses it.
        if self.recycles
            && let Some(kept) = lock(&self.recycler).take(bytes)
        {
            return Ok(kept);
        }
        let map = |e| to_graph_error(e, site, &self.domain.rules, D::KIND.name());
        self.driver.bind().map_err(map)?;
        // Relaxed: the capture rules allowed this allocation (or it is a pool's, inside a
        // capture); it must not meet, in the driver, a capture begun since.
        let malloc = || relaxed_mode(&*self.driver, || self.driver.malloc(bytes));
        let block = match malloc() {
            Ok(block) => block,
            Err(first) => {
                // The device may be full of kept blocks: give back those nothing queued uses
                // and try once more.
                if lock(&self.recycler).kept_bytes() == 0 || self.release_cached() == 0 {
                    return Err(map(first));
                }
                malloc().map_err(map)?
            }
        };
        Ok((block, bytes))
    }

    fn release(&self, (block, bytes): (D::Block, usize)) {
        if !self.recycles {
            return self.free_block(block, bytes);
        }
        let (full, excess) = {
            let mut recycler = lock(&self.recycler);
            let full = recycler.keep(block, bytes);
            (full, recycler.excess())
        };
        for (block, bytes) in excess {
            self.free_block(block, bytes);
        }
        if full {
            self.recycle_quarantine();
        }
    }

    fn address(&self, (block, _): &(D::Block, usize)) -> u64 {
        self.driver.block_address(block)
    }
}

impl<D: Driver> std::fmt::Debug for DriverAllocator<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverAllocator")
            .field("backend", &D::KIND)
            .field("deferred_bytes", &self.deferred_bytes())
            .field("cached_bytes", &self.cached_bytes())
            .finish()
    }
}

impl<D: Driver> Drop for DriverAllocator<D> {
    fn drop(&mut self) {
        // The pools are going (the backend's last owner): every kept block goes back to the
        // device.
        let blocks = lock(&self.recycler).drain();
        for (block, bytes) in blocks {
            self.free_block(block, bytes);
        }
    }
}
