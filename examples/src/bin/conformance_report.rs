//! Runs the conformance suite on one backend and prints its table and the closing line
//! `N passed, N failed, N skipped`. Exits non-zero if a case failed.

use std::process::ExitCode;

use accel_graph::{Backend, BackendJob};
use accel_graph_examples::{BackendArg, backend_label, exit_code, init_logging};
use clap::Parser;

/// Print the conformance table of a backend.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
}

struct Report;

impl BackendJob for Report {
    type Output = usize;
    fn run<B: Backend>(self, backend: &B) -> usize {
        println!("conformance on {}", backend_label(backend));
        accel_graph_conformance::run_report(backend).failed
    }
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    match cli
        .backend
        .choice()
        .and_then(|choice| accel_graph::run_on(choice, Report))
    {
        Ok(0) => ExitCode::SUCCESS,
        // The table names the failed cases.
        Ok(_) => ExitCode::FAILURE,
        Err(e) => exit_code(Err(e)),
    }
}
