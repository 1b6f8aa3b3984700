//! Compiles only when accel-graph-cuda and candle-core share one cudarc: the streams both
//! hand out are the same type.

use accel_graph_cuda::CudaBackend;
use candle_core::CudaDevice;

/// Whether candle's device and the accel-graph backend work in the same CUDA context (both
/// retain the device's primary context, so work on either stream can be ordered against the
/// other with events).
pub fn same_context(candle: &CudaDevice, backend: &CudaBackend) -> bool {
    let theirs = candle.cuda_stream();
    // SAFETY: the stream is only read (its context's handle), nothing is launched on it.
    let ours = unsafe { backend.current_cuda_stream() };
    theirs.context().cu_ctx() == ours.context().cu_ctx()
}
