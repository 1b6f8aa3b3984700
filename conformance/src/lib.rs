//! # accel-graph-conformance
//!
//! The executable specification of accel-graph: one suite of cases, generic over
//! [`accel_graph_api::Backend`], that every backend must pass with the same assertions. Each
//! case checks one point of the semantics (capture records without executing, replay equals
//! eager, `keep_graph`, every misuse as its own [`accel_graph_api::GraphError`], capture
//! modes, fork/join, pools, debug dumps, panic safety, empty captures, replay streams,
//! introspection) using only the public `Backend` / `AcceleratorGraph` API. Two randomized
//! cases run seeded, reproducible random programs (replay == eager, bit for bit) and random
//! API call sequences checked against a model of PyTorch's graph state machine.
//!
//! A case the backend cannot run (say, no host callbacks) is **skipped with the missing
//! capability named**, never counted as passed.
//!
//! ## Plugging a backend in
//!
//! Dev-depend on this crate and add a test target without the default harness:
//!
//! ```toml
//! [dev-dependencies]
//! accel-graph-conformance = { workspace = true }
//!
//! [[test]]
//! name = "conformance"
//! harness = false
//! ```
//!
//! with `tests/conformance.rs` holding one line, the backend's constructor (a
//! `Result<B, GraphError>`; an error such as `BackendUnavailable` marks every case ignored and
//! prints why):
//!
//! ```text
//! accel_graph_conformance::conformance_main!(accel_graph_cuda::CudaBackend::new(0));
//! ```
//!
//! `cargo test -p <backend> --test conformance` then lists one test per case, honours name
//! filters (`-- 5.06`) and closes with libtest's `N passed; N failed; N ignored`. The random
//! cases' sizes come from [`SuiteConfig::from_env`] (`ACCEL_GRAPH_CONFORMANCE_PROGRAMS`,
//! `ACCEL_GRAPH_CONFORMANCE_SEQUENCES`); GPU runs lower them.
//!
//! Outside a test harness, [`run_report`] runs everything and prints a table closing with
//! `N passed, N failed, N skipped`:
//!
//! ```no_run
//! let report = accel_graph_conformance::run_report(&accel_graph_mock::MockBackend::new());
//! assert_eq!(report.failed, 0);
//! ```
#![deny(missing_docs)]

mod case;
mod cases;
mod check;
mod config;
mod harness;
mod report;
pub mod utilities;
mod warnings;

pub use accel_graph_api;
pub use case::{Case, Requirement, requirements};
pub use config::{PROGRAMS_ENV, SEQUENCES_ENV, SuiteConfig};
pub use harness::{run_trials, trials};
pub use libtest_mimic;
pub use report::{CaseOutcome, Outcome, Report, run_case, run_report};

/// Every case of the suite, in a stable order, for backend `B`.
///
/// ```
/// use accel_graph_mock::MockBackend;
/// let cases = accel_graph_conformance::cases::<MockBackend>();
/// let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
/// names.sort();
/// names.dedup();
/// assert_eq!(names.len(), cases.len(), "case names are unique");
/// ```
pub fn cases<B: accel_graph_api::Backend>() -> Vec<Case<B>> {
    cases::all::<B>()
}
