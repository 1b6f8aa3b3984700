//! The shared conformance suite on the wgpu backend (lavapipe in CI, any adapter elsewhere:
//! `ACCEL_GRAPH_WGPU_ADAPTER` picks one). Without an adapter every case is reported skipped
//! with the reason.
//!
//! Every eager op is a queue submit, which costs tens of microseconds on lavapipe, so the
//! randomized cases run fewer programs and sequences here than on the mock unless the
//! environment asks for a number.

/// Differential programs when `ACCEL_GRAPH_CONFORMANCE_PROGRAMS` is unset.
const WGPU_PROGRAMS: &str = "200";
/// State-machine sequences when `ACCEL_GRAPH_CONFORMANCE_SEQUENCES` is unset.
const WGPU_SEQUENCES: &str = "2000";

fn lower_defaults() {
    for (name, value) in [
        (accel_graph_conformance::PROGRAMS_ENV, WGPU_PROGRAMS),
        (accel_graph_conformance::SEQUENCES_ENV, WGPU_SEQUENCES),
    ] {
        if std::env::var_os(name).is_none() {
            // SAFETY: runs first thing in `main`, before the suite or wgpu start any thread, so
            // no other thread can read the environment concurrently.
            unsafe { std::env::set_var(name, value) };
        }
    }
}

accel_graph_conformance::conformance_main!({
    lower_defaults();
    accel_graph_wgpu::WgpuBackend::new()
});
