//! The collective cases (conformance §17) on HIP: the backend has no RCCL, so every case is
//! reported skipped with that reason (or with the missing device's, without an AMD GPU).

accel_graph_conformance::collectives_main!(accel_graph_hip::HipBackend::new, [1, 2]);
