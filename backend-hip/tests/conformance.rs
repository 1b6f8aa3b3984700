//! The accel-graph conformance suite on the HIP backend. Without a HIP device (or without the
//! `runtime` feature) every case is reported skipped with the reason.

accel_graph_conformance::conformance_main!(accel_graph_hip::HipBackend::new(0));
