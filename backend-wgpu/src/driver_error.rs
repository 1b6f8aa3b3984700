//! Errors of the capture emulation, named as CUDA names them (as the mock does), so a test
//! reads the same on every backend.

use accel_graph_api::GraphError;

/// `CUDA_ERROR_ILLEGAL_STATE`: e.g. a capture begun on a stream that is capturing already.
pub(crate) fn illegal_state(message: impl Into<String>) -> GraphError {
    driver(401, "CUDA_ERROR_ILLEGAL_STATE", message)
}

/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`: an operation the capture cannot take part in.
pub(crate) fn capture_unsupported(message: impl Into<String>) -> GraphError {
    driver(900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", message)
}

/// `CUDA_ERROR_STREAM_CAPTURE_MERGE`: a wait would merge two separate captures.
pub(crate) fn capture_merge(message: impl Into<String>) -> GraphError {
    driver(902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", message)
}

/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: a dependency across a capture's boundary.
pub(crate) fn capture_isolation(message: impl Into<String>) -> GraphError {
    driver(905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", message)
}

/// `CUDA_ERROR_CAPTURED_EVENT`: an operation not permitted on an event recorded in a capture.
pub(crate) fn captured_event(message: impl Into<String>) -> GraphError {
    driver(907, "CUDA_ERROR_CAPTURED_EVENT", message)
}

/// A failure reported by wgpu itself (device polling, buffer mapping).
pub(crate) fn wgpu(name: &str, message: impl Into<String>) -> GraphError {
    driver(-1, name, message)
}

fn driver(code: i64, name: &str, message: impl Into<String>) -> GraphError {
    GraphError::Driver {
        backend: "wgpu",
        code,
        name: name.to_owned(),
        message: message.into(),
    }
}
