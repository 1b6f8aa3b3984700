//! `Shared`: the state a backend instance's clones, buffers and graphs share.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use accel_graph_api::{
    BackendKind, Capabilities, CaptureErrorMode, GraphError, InstanceCache, Result,
    backend_kit::{
        CurrentStream,
        pools::{MemoryPools, OwnedAllocation},
        stream_order::StreamClock,
    },
    kernel::{Kernel, check_grid_dependency},
};

use crate::{
    Driver, DriverStream,
    allocator::DriverAllocator,
    api::{DriverError, DriverResult},
    capture::CaptureEntry,
    domain::Domain,
    errors::{CallSite, to_graph_error},
    host::{HostCall, HostPanics, in_host_callback},
    stream::Turn,
};

/// Process-wide counter of backend instances (the low bits of `instance_id`).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// Memory dropped while streams recorded with `record_stream` may still use it (its block is
/// pending in the pools' books until it is freed).
struct PendingFree<D: Driver> {
    /// Held until the free is due: dropping it frees the block.
    _memory: OwnedAllocation<DriverAllocator<D>>,
    /// Streams whose progress past the drop is not recorded yet (they were capturing).
    unrecorded: Vec<DriverStream<D>>,
    /// Events recorded on the streams after the drop, with the stream's clock and the tick
    /// taken before the record: the memory goes when all completed, and each stream's work
    /// before its tick is then known complete.
    events: Vec<(D::Event, Arc<StreamClock>, u64)>,
}

/// One backend instance.
pub(crate) struct Shared<D: Driver> {
    pub(crate) driver: Arc<D>,
    pub(crate) id: u64,
    pub(crate) capabilities: Capabilities,
    pub(crate) domain: Arc<Domain>,
    pub(crate) pools: Arc<MemoryPools<DriverAllocator<D>>>,
    pub(crate) current: CurrentStream<DriverStream<D>>,
    pub(crate) cache: InstanceCache,
    /// Captures in progress, so a stream that joins one by an event wait finds it.
    pub(crate) captures: Mutex<Vec<Arc<CaptureEntry<D>>>>,
    /// The turn to call into captures, one for all the instance's captures (see
    /// [`crate::stream::Issuing`]).
    pub(crate) turn: Turn,
    pub(crate) host_panics: Arc<HostPanics>,
    /// Host callbacks of reset graphs: a launch in flight may still call them, so they go at
    /// the next device synchronization. Shared: host nodes point at them, and graphs that
    /// took over or embed another graph's work call its callbacks too. Each with the number of
    /// its retirement: a synchronization frees only those retired before it began (a graph
    /// replayed and reset by another thread meanwhile may have a launch still queued).
    retired: Mutex<Vec<(u64, Arc<HostCall>)>>,
    /// The number the next retirement gets.
    next_retirement: AtomicU64,
    pending_frees: Mutex<Vec<PendingFree<D>>>,
    next_graph: AtomicU64,
    /// Users' kernels compiled for this instance, by kernel id (each with its kernel, which
    /// keeps the id from being reused).
    #[allow(clippy::type_complexity)]
    kernels: Mutex<HashMap<u64, (Kernel, Arc<D::Module>)>>,
}

fn kind_tag(kind: BackendKind) -> u64 {
    let tag: u64 = match kind {
        BackendKind::Mock => 0x4d,
        BackendKind::Cuda => 0x43,
        BackendKind::Hip => 0x48,
        BackendKind::Wgpu => 0x57,
    };
    tag << 56
}

impl<D: Driver> Shared<D> {
    pub(crate) fn new(driver: D) -> Self {
        let driver = Arc::new(driver);
        let id = kind_tag(D::KIND) | NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let domain = Domain::get(D::KIND, driver.capture_domain());
        let pools = MemoryPools::with_reuse_rule(
            DriverAllocator::new(Arc::clone(&driver), Arc::clone(&domain)),
            driver.pool_reuse_rule(),
        );
        let default_stream = DriverStream::new(
            &*driver,
            driver.default_stream(),
            id,
            pools.order().new_stream(),
        );
        Shared {
            capabilities: driver.capabilities(),
            pools,
            current: CurrentStream::new(default_stream),
            driver,
            id,
            domain,
            cache: InstanceCache::default(),
            captures: Mutex::new(Vec::new()),
            turn: Turn::default(),
            host_panics: Arc::new(HostPanics::default()),
            retired: Mutex::new(Vec::new()),
            next_retirement: AtomicU64::new(0),
            pending_frees: Mutex::new(Vec::new()),
            next_graph: AtomicU64::new(1),
            kernels: Mutex::new(HashMap::new()),
        }
    }

    /// The backend's name in errors.
    pub(crate) fn name(&self) -> &'static str {
        D::KIND.name()
    }

    /// Maps a driver error of the call at `site`.
    pub(crate) fn error(&self, error: DriverError, site: CallSite<'_>) -> GraphError {
        to_graph_error(error, site, &self.domain.rules, self.name())
    }

    /// `result` with its error mapped for the call at `site`.
    pub(crate) fn check<T>(&self, result: DriverResult<T>, site: CallSite<'_>) -> Result<T> {
        result.map_err(|e| self.error(e, site))
    }

    /// Binds the driver on this thread.
    #[inline]
    pub(crate) fn bind(&self) -> Result<()> {
        self.check(self.driver.bind(), CallSite::op("bind"))
    }

    /// A serial number for a new graph (names its host nodes in messages).
    pub(crate) fn next_graph(&self) -> u64 {
        self.next_graph.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `f` with the calling thread's capture mode relaxed, as PyTorch's caching allocator
    /// does around allocations into a graph's pool: work that is no stream work (a pool
    /// allocation, an instantiation) must neither be refused by nor disturb a capture. Unsafe
    /// calls the capture rules allowed run so too (see the domain module: they must not meet
    /// a capture begun after the rules decided).
    pub(crate) fn relaxed<T>(&self, f: impl FnOnce() -> T) -> T {
        relaxed_mode(&*self.driver, f)
    }

    /// `kernel` compiled for this instance: from the cache, or compiled and loaded now (in
    /// relaxed mode: loading a module is no stream work, and must neither disturb nor be
    /// refused by a capture in progress).
    pub(crate) fn kernel_module(&self, kernel: &Kernel) -> Result<Arc<D::Module>> {
        let mut cache = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, module)) = cache.get(&kernel.id()) {
            return Ok(Arc::clone(module));
        }
        check_grid_dependency(kernel)?;
        self.bind()?;
        let module = self.check(
            self.relaxed(|| self.driver.load_kernel(kernel)),
            CallSite::op("load_kernel"),
        )?;
        let module = Arc::new(module);
        cache.insert(kernel.id(), (kernel.clone(), Arc::clone(&module)));
        Ok(module)
    }

    /// Keeps `memory` alive for the capture the raw stream `stream` takes part in, if any (see
    /// [`crate::BufferMemory::track_raw_use`]).
    pub(crate) fn keep_for_raw_work(
        &self,
        memory: &OwnedAllocation<DriverAllocator<D>>,
        stream: &D::Stream,
    ) -> Result<bool> {
        self.bind()?;
        let Some(id) = self.check(
            self.driver.capture_id(stream),
            CallSite::op("track_raw_use"),
        )?
        else {
            return Ok(false);
        };
        let entry = self
            .captures()
            .iter()
            .find(|c| c.driver_id() == Some(id))
            .cloned();
        match entry {
            Some(entry) => {
                entry.keep_block(memory);
                Ok(true)
            }
            None => Err(GraphError::Unsupported {
                what: "raw work on a stream that captures into a capture this backend did not \
                       begin: begin captures through the backend (capture_begin, capture_on) \
                       so that their graphs keep the memory their work uses"
                    .to_owned(),
            }),
        }
    }

    pub(crate) fn captures(&self) -> MutexGuard<'_, Vec<Arc<CaptureEntry<D>>>> {
        self.captures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Host callbacks of a reset graph: dropped once no launch can call them any more — now,
    /// after a device synchronization, unless a capture runs (which a synchronization would
    /// break) or this is a host callback (where no runtime call is permitted); then at the
    /// next synchronization.
    pub(crate) fn retire_callbacks(&self, callbacks: Vec<Arc<HostCall>>) {
        if callbacks.is_empty() {
            return;
        }
        // Numbered after the graph's last launch (a reset follows its replays), so a
        // synchronization that began after this number was taken covers those launches.
        let number = self.next_retirement.fetch_add(1, Ordering::AcqRel);
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(callbacks.into_iter().map(|call| (number, call)));
        // Checked and synchronized while no capture can begin, as `synchronize` does: a
        // capture begun after the check would meet the device-wide wait. The list is not
        // locked meanwhile: a host callback the wait waits for may retire callbacks too.
        let synchronized = !in_host_callback()
            && self.domain.excluding_capture_begins(|| {
                !self.domain.capture_active()
                    && self.driver.bind().is_ok()
                    && self.driver.synchronize().is_ok()
            });
        if synchronized {
            self.retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(retired, _)| *retired > number);
        }
    }

    /// Taken right before a device synchronization, for [`Shared::after_synchronize`].
    pub(crate) fn retirement_mark(&self) -> u64 {
        self.next_retirement.load(Ordering::Acquire)
    }

    /// After a device synchronization that began at `mark` ([`Shared::retirement_mark`]):
    /// every launch made before it has finished, so the callbacks retired before it go.
    pub(crate) fn after_synchronize(&self, mark: u64) {
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(number, _)| *number >= mark);
        self.poll_pending_frees();
    }

    /// Memory whose buffer was dropped while `streams` may still use it: freed once each
    /// stream has passed this point.
    pub(crate) fn free_after(
        &self,
        memory: OwnedAllocation<DriverAllocator<D>>,
        streams: Vec<DriverStream<D>>,
    ) {
        self.pending_frees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(PendingFree {
                _memory: memory,
                unrecorded: streams,
                events: Vec::new(),
            });
        self.poll_pending_frees();
    }

    /// Records the drop point on streams that stopped capturing, and frees the memory whose
    /// streams all passed it.
    pub(crate) fn poll_pending_frees(&self) {
        // No runtime call from inside a host callback; frees it deferred run now.
        if in_host_callback() {
            return;
        }
        self.domain.flush();
        // Processing records and queries events, which CUDA refuses during a capture (and the
        // refusal invalidates the capture): wait until no capture of the domain runs, as
        // PyTorch's allocator skips process_events while a capture may be underway.
        if self.domain.capture_active() {
            return;
        }
        let done: Vec<PendingFree<D>> = {
            let mut pending = self.pending_frees.lock().unwrap_or_else(|e| e.into_inner());
            if pending.is_empty() {
                return;
            }
            for p in pending.iter_mut() {
                let mut still = Vec::new();
                for stream in p.unrecorded.drain(..) {
                    // Decided and recorded with the membership settled: a record on a stream
                    // that began capturing meanwhile would be a node of that capture, and
                    // its query illegal.
                    let Ok(settled) = stream.inner.settled_outside_capture() else {
                        still.push(stream);
                        continue;
                    };
                    // Inside a capture the point is the capture's end: record once it ended.
                    if settled.capture().is_some() {
                        drop(settled);
                        still.push(stream);
                        continue;
                    }
                    let began = self.pools.order().now();
                    let recorded = self
                        .driver
                        .create_event(accel_graph_api::EventOptions::new())
                        .and_then(|event| {
                            // SAFETY: the event is private to this pending free and only
                            // ever queried, so no stream waits on it and none can be forked
                            // through it into a capture (nor is the stream capturing: checked
                            // above, and settled until the record is made).
                            unsafe { self.driver.record_event(&event, &stream.inner.raw) }
                                .map(|()| event)
                        });
                    drop(settled);
                    match recorded {
                        Ok(event) => {
                            p.events
                                .push((event, Arc::clone(&stream.inner.clock), began));
                        }
                        // The stream cannot take an event (a broken device): nothing can be
                        // ordered after it, so wait for the device instead.
                        Err(_) => still.push(stream),
                    }
                }
                p.unrecorded = still;
            }
            let (done, waiting): (Vec<_>, Vec<_>) =
                std::mem::take(&mut *pending).into_iter().partition(|p| {
                    p.unrecorded.is_empty()
                        && p.events.iter().all(|(e, ..)| {
                            // A query that fails says nothing about the stream's progress:
                            // keep the memory (it goes at the instance's drop, after a
                            // synchronize) rather than free it under a running kernel.
                            // Relaxed: a capture another thread begins after the check above
                            // must not meet the query in the driver (see `crate::domain`).
                            self.relaxed(|| self.driver.event_query(e)).unwrap_or(false)
                        })
                });
            *pending = waiting;
            done
        };
        for p in &done {
            for (_, clock, began) in &p.events {
                clock.completed_before(*began);
            }
        }
        // Freed outside the lock: a free may reach the driver.
        drop(done);
    }
}

impl<D: Driver> Drop for Shared<D> {
    fn drop(&mut self) {
        let retired = self.retired.get_mut().unwrap_or_else(|e| e.into_inner());
        let pending = self
            .pending_frees
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        if !retired.is_empty() || !pending.is_empty() {
            // Queued host nodes may still call retired callbacks, and streams may still use
            // pending memory: wait for the device before both go.
            let _ = self.driver.bind().and_then(|()| self.driver.synchronize());
        }
    }
}

/// Runs `f` with the calling thread's capture mode exchanged for `Relaxed`, restoring it after.
pub(crate) fn relaxed_mode<D: Driver, T>(driver: &D, f: impl FnOnce() -> T) -> T {
    match driver.exchange_capture_mode(CaptureErrorMode::Relaxed) {
        Ok(previous) => {
            let out = f();
            if let Err(e) = driver.exchange_capture_mode(previous) {
                tracing::warn!(backend = D::KIND.name(), error = %e, "could not restore the capture mode");
            }
            out
        }
        Err(_) => f(),
    }
}
