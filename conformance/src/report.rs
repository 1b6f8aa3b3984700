//! Running the suite outside a test harness: one table, one closing line.

use std::{
    panic::{self, AssertUnwindSafe},
    time::{Duration, Instant},
};

use accel_graph_api::Backend;

use crate::{Case, cases};

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The backend behaved as specified.
    Passed,
    /// It did not: what differed (a panic counts, with its message).
    Failed(String),
    /// The case was not run: the missing capability.
    Skipped(String),
}

impl Outcome {
    /// `passed`, `FAILED` or `skipped`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed(_) => "FAILED",
            Outcome::Skipped(_) => "skipped",
        }
    }

    /// The failure message or skip reason (empty when passed).
    pub fn reason(&self) -> &str {
        match self {
            Outcome::Passed => "",
            Outcome::Failed(reason) | Outcome::Skipped(reason) => reason,
        }
    }
}

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// The case's name.
    pub name: &'static str,
    /// Its section.
    pub section: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it ran (zero when skipped).
    pub duration: Duration,
}

/// The result of a whole run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every case, in suite order.
    pub outcomes: Vec<CaseOutcome>,
    /// Cases passed.
    pub passed: usize,
    /// Cases failed.
    pub failed: usize,
    /// Cases skipped (never counted as passed).
    pub skipped: usize,
}

impl Report {
    /// True when no case failed.
    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }

    /// The closing line: `N passed, N failed, N skipped`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }

    /// The table (`case | outcome | reason`), one row per case, without the closing line.
    pub fn table(&self) -> String {
        let width = self
            .outcomes
            .iter()
            .map(|o| o.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = format!(
            "{:<width$} | {:<7} | {:>8} | reason\n",
            "case", "outcome", "time"
        );
        out.push_str(&format!(
            "{}-+-{}-+-{}-+-------\n",
            "-".repeat(width),
            "-".repeat(7),
            "-".repeat(8)
        ));
        for o in &self.outcomes {
            let time = if matches!(o.outcome, Outcome::Skipped(_)) {
                String::new()
            } else {
                format!("{:.1}ms", o.duration.as_secs_f64() * 1e3)
            };
            // One line per row: multi-line failure messages are joined.
            let reason = o.outcome.reason().replace('\n', " / ");
            out.push_str(&format!(
                "{:<width$} | {:<7} | {:>8} | {}\n",
                o.name,
                o.outcome.label(),
                time,
                reason
            ));
        }
        out
    }

    fn push(&mut self, outcome: CaseOutcome) {
        match outcome.outcome {
            Outcome::Passed => self.passed += 1,
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Skipped(_) => self.skipped += 1,
        }
        self.outcomes.push(outcome);
    }
}

/// Runs one case on `backend`: skipped when its requirement fails, failed on `Err` or panic.
pub fn run_case<B: Backend>(backend: &B, case: &Case<B>) -> CaseOutcome {
    let start = Instant::now();
    let outcome = match case.skip_reason(&backend.capabilities()) {
        Some(reason) => Outcome::Skipped(reason),
        None => match panic::catch_unwind(AssertUnwindSafe(|| (case.run)(backend))) {
            Ok(Ok(())) => Outcome::Passed,
            Ok(Err(message)) => Outcome::Failed(message),
            Err(payload) => Outcome::Failed(format!("panicked: {}", panic_message(&*payload))),
        },
    };
    let duration = if matches!(outcome, Outcome::Skipped(_)) {
        Duration::ZERO
    } else {
        start.elapsed()
    };
    CaseOutcome {
        name: case.name,
        section: case.section,
        outcome,
        duration,
    }
}

/// Runs every case on `backend`, one after the other on the calling thread, prints the table
/// and the closing line `N passed, N failed, N skipped`, and returns the report.
///
/// ```no_run
/// let report = accel_graph_conformance::run_report(&accel_graph_mock::MockBackend::new());
/// assert!(report.all_passed());
/// ```
pub fn run_report<B: Backend>(backend: &B) -> Report {
    let caps = backend.capabilities();
    print_banner(backend, &caps);
    let mut report = Report::default();
    for case in cases::<B>() {
        report.push(run_case(backend, &case));
    }
    print!("{}", report.table());
    println!("{}", report.summary());
    report
}

/// The first line of every run: backend, device and the sizes of the randomized cases.
pub(crate) fn print_banner<B: Backend>(backend: &B, caps: &accel_graph_api::Capabilities) {
    println!(
        "accel-graph conformance: backend {} on {} ({:?})",
        backend.kind(),
        caps.device_name,
        crate::SuiteConfig::from_env()
    );
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_owned()
    }
}
