//! The collective cases (conformance §17) on wgpu: WebGPU has no collectives, so every case
//! is reported skipped with that reason (or with the missing adapter's, without one).

accel_graph_conformance::collectives_main!(accel_graph_wgpu::WgpuBackend::new, [1, 2]);
