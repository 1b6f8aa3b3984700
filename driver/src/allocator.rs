//! `DriverAllocator`: the raw allocator under the shared pool bookkeeping — the driver's
//! `malloc`/`free`, with frees kept out of captures by the domain's gate.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{Result, backend_kit::pools::RawAllocator};

use crate::{
    Driver,
    domain::Domain,
    errors::{CallSite, to_graph_error},
    shared::relaxed_mode,
};

/// The driver's device memory as a [`RawAllocator`].
pub struct DriverAllocator<D: Driver> {
    driver: Arc<D>,
    domain: Arc<Domain>,
    /// Bytes of frees waiting for the domain's captures to end.
    deferred_bytes: Arc<AtomicUsize>,
}

impl<D: Driver> DriverAllocator<D> {
    pub(crate) fn new(driver: Arc<D>, domain: Arc<Domain>) -> Self {
        DriverAllocator {
            driver,
            domain,
            deferred_bytes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Bytes of frees waiting for a capture to end.
    pub fn deferred_bytes(&self) -> usize {
        self.deferred_bytes.load(Ordering::Acquire)
    }
}

impl<D: Driver> RawAllocator for DriverAllocator<D> {
    type Block = (D::Block, usize);

    fn allocate(&self, bytes: usize) -> Result<(D::Block, usize)> {
        let site = CallSite {
            operation: "alloc",
            bytes,
            unsafe_call: true,
        };
        let map = |e| to_graph_error(e, site, &self.domain.rules, D::KIND.name());
        self.driver.bind().map_err(map)?;
        // Relaxed: the capture rules allowed this allocation (or it is a pool's, inside a
        // capture); it must not meet, in the driver, a capture begun since.
        let block = relaxed_mode(&*self.driver, || self.driver.malloc(bytes)).map_err(map)?;
        Ok((block, bytes))
    }

    fn release(&self, (block, bytes): (D::Block, usize)) {
        let driver = Arc::clone(&self.driver);
        let deferred = Arc::clone(&self.deferred_bytes);
        deferred.fetch_add(bytes, Ordering::AcqRel);
        self.domain.free(move || {
            deferred.fetch_sub(bytes, Ordering::AcqRel);
            let freed = driver.bind().and_then(|()| {
                // SAFETY: the pools release a block once, when its last allocation handle is
                // gone: no buffer holds it, no graph holds it (captures keep a hold on every
                // block they touch), and pending frees wait for the streams that used it. The
                // block came from this driver's `malloc` (`allocate` above), and the free gate
                // ran this closure only while no capture of the domain runs.
                unsafe { driver.free(block) }
            });
            if let Err(e) = freed {
                tracing::warn!(backend = D::KIND.name(), error = %e, "freeing device memory failed");
            }
        });
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
            .finish()
    }
}
