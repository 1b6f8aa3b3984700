//! Fault injection: make the n-th allocation, instantiation or replay fail, or make a replay
//! hit a device fault, to test how users' code handles device errors.

use std::sync::{
    Mutex,
    atomic::{AtomicBool, Ordering},
};

use accel_graph_api::{GraphError, Result};

/// Where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultSite {
    /// `alloc` (and so `alloc_from`), plain or from a pool.
    Alloc,
    /// Graph instantiation (explicit, at `capture_end` with `keep_graph = false`, or lazy).
    Instantiate,
    /// Graph replay.
    Replay,
    /// A graph replay that hits an illegal address (as a buggy kernel would): the device is
    /// unusable from then on, and every later call fails with
    /// [`GraphError::DeviceFault`] naming `CUDA_ERROR_ILLEGAL_ADDRESS`, as CUDA's sticky
    /// errors do.
    DeviceFault,
}

impl FaultSite {
    /// The name used in [`GraphError::InjectedFault`].
    pub fn name(self) -> &'static str {
        match self {
            FaultSite::Alloc => "alloc",
            FaultSite::Instantiate => "instantiate",
            FaultSite::Replay => "replay",
            FaultSite::DeviceFault => "device fault",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Armed {
    nth: u64,
    seen: u64,
}

/// The armed faults of one backend instance.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Fast path: replay checks this flag only, so an unarmed backend pays one relaxed load.
    any_armed: AtomicBool,
    armed: Mutex<[Option<Armed>; 4]>,
}

impl Faults {
    /// Arms `site`: its `nth` call from now (1-based) fails once. `nth == 0` disarms it.
    pub(crate) fn arm(&self, site: FaultSite, nth: u64) {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        armed[site.slot()] = (nth > 0).then_some(Armed { nth, seen: 0 });
        self.any_armed
            .store(armed.iter().any(Option::is_some), Ordering::Relaxed);
    }

    /// Disarms every site.
    pub(crate) fn clear(&self) {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        *armed = [None; 4];
        self.any_armed.store(false, Ordering::Relaxed);
    }

    /// Counts a call at `site`; fails if it is the armed one.
    pub(crate) fn check(&self, site: FaultSite) -> Result<()> {
        if !self.any_armed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        let Some(a) = armed[site.slot()].as_mut() else {
            return Ok(());
        };
        a.seen += 1;
        if a.seen < a.nth {
            return Ok(());
        }
        let count = a.nth;
        armed[site.slot()] = None;
        self.any_armed
            .store(armed.iter().any(Option::is_some), Ordering::Relaxed);
        Err(GraphError::InjectedFault {
            operation: site.name(),
            count,
        })
    }
}
