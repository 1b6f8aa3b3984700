//! Collectives on wgpu: none. WebGPU has no communication between devices (no collectives,
//! no memory shared between adapters), so every communicator is refused with the reason,
//! and the collective conformance cases are skipped with it.

use crate::WgpuDevice;

accel_graph_driver::no_collectives!(
    WgpuDevice,
    "collectives on the wgpu backend: WebGPU has no communication between devices (no \
     collective operations, no memory shared between adapters)"
);
