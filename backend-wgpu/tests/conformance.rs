//! The shared conformance suite on the wgpu backend (lavapipe in CI, any adapter elsewhere:
//! `ACCEL_GRAPH_WGPU_ADAPTER` picks one). Without an adapter every case is reported skipped
//! with the reason.
//!
//! Every eager op is a queue submit, which costs tens of microseconds on lavapipe, so the
//! randomized and stress cases run fewer programs, sequences, lifetimes and cycles here than on the mock
//! unless the environment asks for a number.

use std::sync::Once;

/// Differential programs when `ACCEL_GRAPH_CONFORMANCE_PROGRAMS` is unset.
const WGPU_PROGRAMS: &str = "200";
/// State-machine sequences when `ACCEL_GRAPH_CONFORMANCE_SEQUENCES` is unset.
const WGPU_SEQUENCES: &str = "2000";
/// Stress cycles when `ACCEL_GRAPH_CONFORMANCE_STRESS_CYCLES` is unset: at the suite's 1000
/// the stress alone takes minutes on lavapipe, where every global capture is retried many
/// times.
const WGPU_STRESS_CYCLES: &str = "200";
/// Random programs of each buffer-lifetime case (9.09, 9.10) when
/// `ACCEL_GRAPH_CONFORMANCE_LIFETIMES` is unset: their ownership logic is the shared front's,
/// which the mock runs at the suite's 10,000; here each program's submits cost milliseconds.
const WGPU_LIFETIMES: &str = "3000";
/// Elements of the stream-order program when `ACCEL_GRAPH_CONFORMANCE_STREAM_ORDER_ELEMENTS`
/// is unset: its fifty-odd eager submits over a million elements, at every replay, take long
/// on lavapipe, which runs a graph's nodes in order anyway.
const WGPU_STREAM_ORDER_ELEMENTS: &str = "65536";

/// The factory runs once per instance a case needs; the defaults are lowered on its first
/// call only.
static LOWER_DEFAULTS: Once = Once::new();

fn lower_defaults() {
    for (name, value) in [
        (accel_graph_conformance::PROGRAMS_ENV, WGPU_PROGRAMS),
        (accel_graph_conformance::SEQUENCES_ENV, WGPU_SEQUENCES),
        (
            accel_graph_conformance::STRESS_CYCLES_ENV,
            WGPU_STRESS_CYCLES,
        ),
        (accel_graph_conformance::LIFETIMES_ENV, WGPU_LIFETIMES),
        (
            accel_graph_conformance::STREAM_ORDER_ELEMENTS_ENV,
            WGPU_STREAM_ORDER_ELEMENTS,
        ),
    ] {
        if std::env::var_os(name).is_none() {
            // SAFETY: runs on the factory's first call, which the harness makes on the main
            // thread before any case runs and before wgpu is opened (the `new` below), so no
            // other thread can read the environment concurrently.
            unsafe { std::env::set_var(name, value) };
        }
    }
}

accel_graph_conformance::conformance_main!({
    LOWER_DEFAULTS.call_once(lower_defaults);
    accel_graph_wgpu::WgpuBackend::new(0)
});
