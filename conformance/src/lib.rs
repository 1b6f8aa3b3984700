//! # accel-graph-conformance
//!
//! The executable specification of accel-graph: one suite of cases, generic over
//! [`accel_graph_api::Backend`], that every backend must pass with the same assertions. Each
//! case checks one point of the semantics (capture records without executing, replay equals
//! eager, `keep_graph`, every misuse as its own [`accel_graph_api::GraphError`], capture
//! modes, fork/join, pools, debug dumps, panic safety, empty captures, replay streams,
//! introspection, memory-safe replay, hardening, PyTorch's own graph tests, stream order
//! across streams and threads), and the seed utilities of `accel-graph-utils` (graphed callables, the
//! full-iteration wrapper, shared resources, the bucketed cache), using only the public
//! `Backend` / `AcceleratorGraph` API. Two randomized cases run seeded, reproducible random
//! programs (replay == eager, bit for bit) and random API call sequences checked against a model
//! of PyTorch's graph state machine.
//!
//! Every case is a [`Case`] in one declared list ([`cases`]), named after the rule it checks
//! (`"5.06a ..."`); `docs/SEMANTICS.md` states each rule. A case the backend cannot run (say,
//! no host callbacks) is **skipped with the missing capability named**, never counted as passed.
//! After every case the harness checks that the backend holds the memory it held before and
//! that the current stream was restored ([`run_case`]).
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
//! with `tests/conformance.rs` holding one line: a *factory* of the backend, an expression of
//! type `Result<B, GraphError>` that opens a new instance of the device each time it is
//! evaluated (an error such as `BackendUnavailable` marks every case ignored and prints why):
//!
//! ```text
//! accel_graph_conformance::conformance_main!(accel_graph_cuda::CudaBackend::new(0));
//! ```
//!
//! Every case runs on one instance; cases about several instances of one device (objects and
//! pool ids of another instance are refused, a `global` capture forbids unsafe calls through
//! every instance, utilities keep their singletons per instance) open another one through
//! [`Target::another_instance`].
//!
//! `cargo test -p <backend> --test conformance` then lists one test per case, honours name
//! filters (`-- 5.06`) and closes with libtest's `N passed; N failed; N ignored`. The random
//! cases' sizes come from [`SuiteConfig::from_env`] (one environment variable per size,
//! [`PROGRAMS_ENV`] and the others); slower devices lower them.
//!
//! Outside a test harness, [`run_report_with`] (a factory) or [`run_report`] (one instance: the
//! cases that open another instance are skipped) runs everything and prints a table closing
//! with `N passed, N failed, N skipped`:
//!
//! ```no_run
//! let report = accel_graph_conformance::run_report(&accel_graph_mock::MockBackend::new());
//! assert_eq!(report.failed, 0);
//! ```
//!
//! ## Collectives (§17)
//!
//! The collective cases run with several ranks at once, one backend instance per rank, so they
//! have a harness of their own: [`collectives_main!`] runs them for a list of world sizes
//! (ranks as threads, rank `r` on the instance a factory opens for `r`), and [`run_as_rank`]
//! runs a case as one process's rank when ranks are processes.
#![deny(missing_docs)]

mod case;
mod cases;
mod check;
mod collectives;
mod config;
pub mod crash;
mod harness;
pub mod lifetimes;
mod report;
pub mod stress;
mod target;
mod warnings;

pub use accel_graph_api;
pub use case::{Case, CaseResult, Requirement, requirements};
pub use collectives::{
    CollectiveCase, RankCtx, RankFactory, collective_cases, collective_trials, run_as_rank,
    run_collective_case, run_collective_trials,
};
pub use config::{
    CAPTURE_RACE_ROUNDS_ENV, LIFETIMES_ENV, PROGRAMS_ENV, REPETITIONS_ENV, SEQUENCES_ENV,
    STREAM_ORDER_ELEMENTS_ENV, STRESS_CYCLES_ENV, SuiteConfig, TORCH_REPLAYS_ENV,
};
pub use harness::{run_trials, trials};
pub use libtest_mimic;
pub use report::{CaseOutcome, Outcome, Report, run_case, run_report, run_report_with};
pub use target::{Factory, Target};

/// Every case of the suite, in its declared order, for backend `B`.
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
    cases::suite::<B>()
}
