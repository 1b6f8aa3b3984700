//! Activity counters, so users' tests can assert what ran eagerly, what was captured and what
//! was replayed.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a [`crate::MockBackend`]'s counters (shared by its clones).
///
/// ```
/// use accel_graph_api::prelude::*;
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// let x = backend.alloc_from(&[0.0; 2])?;
/// backend.add_scalar(&x, 1.0)?; // eager
/// let s = backend.new_stream()?;
/// let mut g = backend.graph(GraphOptions::new())?;
/// backend.capture_on(&s, &mut g, || backend.scale(&x, 2.0))?;
/// g.replay()?;
/// let c = backend.counters();
/// assert_eq!((c.eager_ops, c.captured_ops, c.replays, c.nodes_replayed), (1, 1, 1, 1));
/// assert_eq!((c.allocations, c.instantiations), (1, 1));
/// backend.reset_counters();
/// assert_eq!(backend.counters(), Default::default());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MockCounters {
    /// Portable ops and host callbacks executed eagerly (not captured).
    pub eager_ops: u64,
    /// Portable ops and host callbacks recorded into a capture.
    pub captured_ops: u64,
    /// Successful graph replays.
    pub replays: u64,
    /// Graph nodes executed by replays.
    pub nodes_replayed: u64,
    /// Buffer allocations asked for (plain and pool; counted before the device is asked).
    pub allocations: u64,
    /// Successful instantiations (explicit, at `capture_end`, or lazy at first replay).
    pub instantiations: u64,
    /// Device frees that reached the device while a capture ran (each one would break the
    /// capture on a GPU; the driver layer defers frees past captures, so this stays 0).
    pub frees_during_capture: u64,
    /// Device frees called from inside a host callback, where CUDA permits no runtime call
    /// (the free fails and the memory is lost; the driver layer defers such frees past the
    /// callback, so this stays 0).
    pub frees_in_host_callbacks: u64,
    /// Unsafe calls (a synchronize, a blocking copy, a device allocation, an event wait or
    /// query) that reached the device while a capture they conflict with ran there, by CUDA's
    /// rules for the calling thread's capture mode. CUDA refuses such a call and invalidates
    /// the capture from the calling thread, while the capture's owner may be ending it — a
    /// race NVIDIA's driver was seen to crash in; the mock refuses and invalidates alike. The
    /// driver layer decides unsafe calls by its capture rules first and makes the allowed ones
    /// in relaxed mode, so this stays 0.
    pub unsafe_calls_meeting_captures: u64,
    /// Data races the race sanitizer found (each one also failed the work that raced, and is
    /// in [`crate::MockBackend::race_reports`]).
    pub data_races: u64,
    /// Executables updated in place from another graph (`update_from`): what an update does
    /// instead of an instantiation.
    pub graph_updates: u64,
    /// Nodes of executables set in place (`update_node`).
    pub node_updates: u64,
    /// Bodies of conditional nodes run (an `if` node's taken branch once, a `while` node's
    /// body once per iteration).
    pub conditional_bodies_run: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) eager_ops: AtomicU64,
    pub(crate) captured_ops: AtomicU64,
    pub(crate) replays: AtomicU64,
    pub(crate) nodes_replayed: AtomicU64,
    pub(crate) allocations: AtomicU64,
    pub(crate) instantiations: AtomicU64,
    pub(crate) frees_during_capture: AtomicU64,
    pub(crate) frees_in_host_callbacks: AtomicU64,
    pub(crate) unsafe_calls_meeting_captures: AtomicU64,
    pub(crate) data_races: AtomicU64,
    pub(crate) graph_updates: AtomicU64,
    pub(crate) node_updates: AtomicU64,
    pub(crate) conditional_bodies_run: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> MockCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MockCounters {
            eager_ops: get(&self.eager_ops),
            captured_ops: get(&self.captured_ops),
            replays: get(&self.replays),
            nodes_replayed: get(&self.nodes_replayed),
            allocations: get(&self.allocations),
            instantiations: get(&self.instantiations),
            frees_during_capture: get(&self.frees_during_capture),
            frees_in_host_callbacks: get(&self.frees_in_host_callbacks),
            unsafe_calls_meeting_captures: get(&self.unsafe_calls_meeting_captures),
            data_races: get(&self.data_races),
            graph_updates: get(&self.graph_updates),
            node_updates: get(&self.node_updates),
            conditional_bodies_run: get(&self.conditional_bodies_run),
        }
    }

    pub(crate) fn reset(&self) {
        for c in [
            &self.eager_ops,
            &self.captured_ops,
            &self.replays,
            &self.nodes_replayed,
            &self.allocations,
            &self.instantiations,
            &self.frees_during_capture,
            &self.frees_in_host_callbacks,
            &self.unsafe_calls_meeting_captures,
            &self.data_races,
            &self.graph_updates,
            &self.node_updates,
            &self.conditional_bodies_run,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}
