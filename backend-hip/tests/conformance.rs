//! The accel-graph conformance suite on the HIP backend (device 0; cases that need a second
//! instance open device 0 again). Without a HIP device, or without the `runtime` feature, every
//! case is reported ignored with the reason.

accel_graph_conformance::conformance_main!(accel_graph_hip::HipBackend::new(0));
