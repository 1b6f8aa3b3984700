//! Compiles only when accel-graph-cuda and cubecl-cuda build in one dependency graph: one
//! cudarc, with link and version features that both crates accept.

use accel_graph_cuda::CudaBackend;
use cubecl_cuda::{CudaDevice, CudaRuntime};
use cubecl_runtime::{client::Client, runtime::Runtime};

/// Device `ordinal` on both sides: cubecl's compute client, and accel-graph's backend where
/// the driver is usable.
pub fn open_both(ordinal: usize) -> (Client, Option<CudaBackend>) {
    let client = CudaRuntime::client(&CudaDevice::new(ordinal));
    (client, CudaBackend::new(ordinal).ok())
}
