//! Runs the conformance suite on one backend and prints its table and the closing line
//! `N passed, N failed, N skipped`. Exits non-zero if a case failed.

use accel_graph::{Backend, BackendJob, Result};
use accel_graph_examples::{BackendArg, backend_label, init_logging};
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

fn main() -> Result<()> {
    init_logging();
    let cli = Cli::parse();
    let failed = accel_graph::run_on(cli.backend.choice()?, Report)?;
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
