//! Failures reported by wgpu itself (device polling, buffer mapping). Errors of the capture
//! emulation use CUDA's names through [`accel_graph_api::EmulatedCudaError`].

use accel_graph_api::GraphError;

/// A failure reported by wgpu itself (device polling, buffer mapping).
pub(crate) fn wgpu(name: &str, message: impl Into<String>) -> GraphError {
    GraphError::Driver {
        backend: "wgpu",
        code: -1,
        name: name.to_owned(),
        message: message.into(),
    }
}
