//! Running the suite outside a test harness: one table, one closing line.

use std::{
    panic::{self, AssertUnwindSafe},
    time::{Duration, Instant},
};

use accel_graph_api::{Backend, GraphError, MemoryStats};

use crate::{Case, Target, cases};

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

/// Runs one case on `target`: skipped when its requirement fails (or it needs another
/// instance the target cannot open), failed on `Err` or panic, and failed too when it leaves
/// something behind: the backend must hold exactly the memory it held before the case (every
/// buffer and graph the case made is dropped by then), and the calling thread's current stream
/// must be the one it had.
pub fn run_case<B: Backend>(target: &Target<B>, case: &Case<B>) -> CaseOutcome {
    let start = Instant::now();
    let outcome = match case.skip_reason_on(target) {
        Some(reason) => Outcome::Skipped(reason),
        None => {
            let memory_before = target.memory_stats();
            let stream_before = target.current_stream();
            match panic::catch_unwind(AssertUnwindSafe(|| case.run(target))) {
                Ok(Ok(())) => match left_behind(target.backend(), &memory_before, &stream_before) {
                    None => Outcome::Passed,
                    Some(message) => Outcome::Failed(message),
                },
                Ok(Err(message)) => Outcome::Failed(message),
                Err(payload) => Outcome::Failed(format!("panicked: {}", panic_message(&*payload))),
            }
        }
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

/// What a passed case left behind, if anything: memory still held, or the current stream not
/// restored.
pub(crate) fn left_behind<B: Backend>(
    backend: &B,
    memory_before: &MemoryStats,
    stream_before: &B::Stream,
) -> Option<String> {
    let stream_after = backend.current_stream();
    if stream_after != *stream_before {
        return Some(format!(
            "the thread's current stream was not restored ({stream_after:?} instead of \
             {stream_before:?})"
        ));
    }
    let memory_after = backend.memory_stats();
    (memory_after != *memory_before).then(|| {
        format!(
            "memory not returned after everything was dropped: before {memory_before:?}, \
             after {memory_after:?}"
        )
    })
}

/// Runs every case on one instance, one after the other on the calling thread, prints the
/// table and the closing line `N passed, N failed, N skipped`, and returns the report. Cases
/// that open a second instance of the device are skipped; [`run_report_with`] runs them too.
///
/// ```no_run
/// let report = accel_graph_conformance::run_report(&accel_graph_mock::MockBackend::new());
/// assert!(report.all_passed());
/// ```
pub fn run_report<B: Backend>(backend: &B) -> Report {
    report_on(&Target::single(backend.clone()))
}

/// Runs every case on the instance `factory` opens (and on further instances it opens for the
/// cases that need another instance of the device), prints the table and the closing line,
/// and returns the report. If the factory fails, its error is returned and nothing runs.
///
/// ```no_run
/// use accel_graph_mock::{MockBackend, MockConfig};
/// let report = accel_graph_conformance::run_report_with(|| {
///     MockBackend::with_config(MockConfig::shared(0))
/// })?;
/// assert!(report.all_passed());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn run_report_with<B: Backend>(
    factory: impl Fn() -> Result<B, GraphError> + Send + Sync + 'static,
) -> Result<Report, GraphError> {
    Ok(report_on(&Target::open(factory)?))
}

fn report_on<B: Backend>(target: &Target<B>) -> Report {
    print_banner(target.backend(), &target.capabilities());
    let mut report = Report::default();
    for case in cases::<B>() {
        report.push(run_case(target, &case));
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
