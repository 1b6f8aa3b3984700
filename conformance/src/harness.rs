//! The libtest-compatible entry point behind [`crate::conformance_main!`].

use std::{process::ExitCode, sync::Arc};

use accel_graph_api::{Backend, GraphError};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

use crate::{Outcome, Target, cases, report::run_case};

/// Runs the suite as a `harness = false` test binary: one libtest trial per case, so
/// `cargo test` lists them, honours name filters and closes with `N passed; N failed;
/// N ignored`. Use it through [`crate::conformance_main!`].
///
/// `factory` opens an instance of the backend under test. It is called once for the instance
/// every case runs on, and again whenever a case needs another instance of the same device
/// (see [`Target::another_instance`]).
///
/// * If the factory fails (no device, no driver), every case is reported ignored and the
///   reason is printed once: `skipped: backend cuda unavailable: ...`.
/// * A case whose requirement the backend lacks is ignored, with the reason printed.
/// * Cases run one at a time on the main thread (see [`trials`]).
/// * With [`crate::crash::CRASH_BACKTRACE_ENV`] set, a fault prints the faulting thread's
///   backtrace before the process dies of it.
/// * Run with [`crate::lifetimes::CHILD_FLAG`] first, the binary is a child process of the
///   buffer-lifetime cases ([`crate::lifetimes::child_main`]).
pub fn run_trials<B: Backend>(
    factory: impl Fn() -> Result<B, GraphError> + Send + Sync + 'static,
) -> ExitCode {
    // A child process of the buffer-lifetime cases: run its programs and nothing else.
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some(crate::lifetimes::CHILD_FLAG) {
        return crate::lifetimes::child_main(factory, &raw[1..]);
    }
    crate::lifetimes::isolation::enable_children();
    crate::crash::install_if_asked();
    let mut args = Arguments::from_args();
    if args.test_threads.is_some_and(|n| n != 1) {
        eprintln!("accel-graph conformance: cases run one at a time (--test-threads ignored)");
    }
    args.test_threads = Some(1);
    libtest_mimic::run(&args, trials(factory)).exit_code()
}

/// The suite as libtest trials, one per case, in suite order (what [`run_trials`] runs), on
/// the instances `factory` opens.
///
/// Run them one at a time (`test_threads = Some(1)`): a capture in `global` mode forbids
/// unsafe calls on every thread (and through every instance of the device), so concurrent
/// cases would disturb each other. Skip reasons (backend unavailable, missing capability) are
/// printed here, once, and reported again by each ignored trial.
pub fn trials<B: Backend>(
    factory: impl Fn() -> Result<B, GraphError> + Send + Sync + 'static,
) -> Vec<Trial> {
    match Target::from_factory(Arc::new(factory)) {
        Err(error) => {
            // Said once, in full; each trial only points back to it.
            println!("skipped: {error}");
            cases::<B>()
                .into_iter()
                .map(|case| {
                    Trial::ignorable_test(case.name, || {
                        Ok(Completion::ignored_with("backend unavailable, see above"))
                    })
                })
                .collect()
        }
        Ok(target) => {
            crate::report::print_banner(target.backend(), &target.capabilities());
            let all = cases::<B>();
            for case in &all {
                if let Some(reason) = case.skip_reason_on(&target) {
                    println!("skipped: {}: {reason}", case.name);
                }
            }
            all.into_iter()
                .map(|case| {
                    let target = target.clone();
                    Trial::ignorable_test(case.name, move || {
                        match run_case(&target, &case).outcome {
                            Outcome::Passed => Ok(Completion::Completed),
                            Outcome::Skipped(reason) => Ok(Completion::ignored_with(reason)),
                            Outcome::Failed(message) => Err(Failed::from(message)),
                        }
                    })
                })
                .collect()
        }
    }
}

/// Expands to the `fn main()` of a `harness = false` test target that runs the whole suite on
/// the backend `$factory` opens: an expression of type `Result<B, GraphError>`, evaluated
/// each time the suite needs an instance — once for the instance every case runs on, and again
/// for each case that opens another instance of the same device. It must therefore open a new
/// instance of the *same device* every time (not return a clone).
///
/// In `backend-x/Cargo.toml`:
///
/// ```toml
/// [dev-dependencies]
/// accel-graph-conformance = { workspace = true }
///
/// [[test]]
/// name = "conformance"
/// harness = false
/// ```
///
/// and `backend-x/tests/conformance.rs` (here for CUDA):
///
/// ```text
/// accel_graph_conformance::conformance_main!(accel_graph_cuda::CudaBackend::new(0));
/// ```
///
/// The mock's own run opens instances that share one simulated device, as CUDA instances of
/// one GPU share its capture-mode rules:
///
/// ```no_run
/// use accel_graph_mock::{MockBackend, MockConfig};
/// accel_graph_conformance::conformance_main!(MockBackend::with_config(MockConfig::shared(0)));
/// ```
///
/// Then `cargo test -p backend-x --test conformance` runs one test per case, and
/// `cargo test -p backend-x --test conformance -- 5.06` only the capture-mode cases.
#[macro_export]
macro_rules! conformance_main {
    ($factory:expr) => {
        fn main() -> ::std::process::ExitCode {
            $crate::run_trials(|| $factory)
        }
    };
}
