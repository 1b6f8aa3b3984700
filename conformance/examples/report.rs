//! Prints the conformance table of the mock backend.
//!
//! `cargo run -p accel-graph-conformance --example report`

fn main() -> std::process::ExitCode {
    let report = accel_graph_conformance::run_report(&accel_graph_mock::MockBackend::new());
    if report.all_passed() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
