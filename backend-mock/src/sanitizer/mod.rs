//! The race sanitizer: two accesses to overlapping bytes of one block, at least one a write,
//! that nothing orders — on a GPU their outcome would depend on timing. On by default
//! ([`crate::MockConfig::race_sanitizer`]).
//!
//! * **Captured graphs** are checked once, when the capture ends: two nodes with no path
//!   between them in the graph's dependencies must not conflict ([`graph`]). The capture
//!   ends with [`GraphError::DataRace`](accel_graph_api::GraphError::DataRace) and is
//!   discarded.
//! * **Eager work** — portable ops, uploads, downloads, and graph replays (each one unit of
//!   work on its stream: races inside a graph were checked when it was captured) — is checked
//!   against each block's access history as it runs ([`eager`]), in the order the device
//!   gives it ([`order`]): stream order, event waits, host waits. The mock runs streams
//!   synchronously, so that order is modelled, not observed. Work that races fails *before*
//!   it runs, so the memory shows the work that was ordered.
//!
//! Host callbacks touch memory the device cannot see: they are not checked. Each race found
//! is also logged ([`crate::MockBackend::race_reports`]) and counted
//! ([`crate::MockCounters::data_races`]).

mod access;
mod clock;
mod eager;
mod graph;
mod hash;
mod history;
mod order;
mod replay;
mod report;

pub(crate) use eager::{BlockHistory, Queued, QueuedOrder, RaceState};
pub(crate) use order::{EventClock, StreamClock};
pub(crate) use replay::ReplayAccesses;
pub use report::RaceReport;
