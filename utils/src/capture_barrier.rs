//! `CaptureBarrier`: a meeting of every rank around captures, Megatron's
//! `torch.distributed.barrier()` around its graph captures, for the full-iteration wrapper
//! ([`FullGraphWrapper::capture_barrier`](crate::FullGraphWrapper::capture_barrier)) and
//! graphed callables ([`make_graphed_callables_across_ranks`](crate::make_graphed_callables_across_ranks)).
//!
//! Why around captures: ranks that are threads of one process share CUDA's capture domain, so
//! a device-wide synchronize on one rank while another rank captures would invalidate that
//! capture. With a barrier after the synchronize that precedes a capture, and another before
//! the synchronize that follows it, no rank synchronizes while another captures; and every
//! rank has finished its eager warm-up (whose collectives set up the device's connections)
//! before any rank captures. Each rank captures on its own instance's shared capture stream
//! ([`shared_capture_stream`](crate::shared_capture_stream)): one capture stream per rank.

use std::{fmt, sync::Arc};

use accel_graph_api::{Backend, Result, collective::Communicator};

/// A barrier across ranks: [`CaptureBarrier::wait`] returns once every rank called it (or
/// fails, bounded, when one does not come).
///
/// ```
/// use std::sync::Arc;
/// use accel_graph_api::collective::{Communicator, MemoryStore};
/// use accel_graph_mock::MockBackend;
/// use accel_graph_utils::CaptureBarrier;
///
/// let store = MemoryStore::new();
/// std::thread::scope(|s| {
///     for rank in 0..2 {
///         let store = store.clone();
///         s.spawn(move || -> accel_graph_api::Result<()> {
///             let comm = Arc::new(Communicator::new(&MockBackend::new(), store, rank, 2)?);
///             let barrier = CaptureBarrier::of(&comm);
///             barrier.wait() // both ranks meet here
///         });
///     }
/// });
/// // Any other rendezvous works too (a test with one rank needs none):
/// assert!(CaptureBarrier::new(|| Ok(())).wait().is_ok());
/// ```
#[derive(Clone)]
pub struct CaptureBarrier {
    wait: Arc<dyn Fn() -> Result<()> + Send + Sync>,
}

impl CaptureBarrier {
    /// A barrier that calls `wait`.
    pub fn new(wait: impl Fn() -> Result<()> + Send + Sync + 'static) -> Self {
        CaptureBarrier {
            wait: Arc::new(wait),
        }
    }

    /// The barrier of `comm`'s ranks ([`Communicator::barrier`]: host-only, bounded by the
    /// communicator's timeout).
    pub fn of<B: Backend>(comm: &Arc<Communicator<B>>) -> Self {
        let comm = Arc::clone(comm);
        Self::new(move || comm.barrier())
    }

    /// Waits for every rank.
    pub fn wait(&self) -> Result<()> {
        (self.wait)()
    }
}

impl fmt::Debug for CaptureBarrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CaptureBarrier")
    }
}
