//! The accel-graph conformance suite on the CUDA backend (device 0). Without a driver or GPU
//! every case is reported ignored with the reason.

accel_graph_conformance::conformance_main!(accel_graph_cuda::CudaBackend::new(0));
