//! Prints the conformance table of the mock backend.
//!
//! `cargo run -p accel-graph-conformance --example report`

use accel_graph_mock::{MockBackend, MockConfig};

fn main() -> std::process::ExitCode {
    let report = accel_graph_conformance::run_report_with(|| {
        MockBackend::with_config(MockConfig::shared(0))
    });
    match report {
        Ok(report) if report.all_passed() => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("the mock backend could not be opened: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
