//! Errors the mock reports with CUDA's names, so tests written on the mock read like CUDA.

use accel_graph_api::GraphError;

/// `CUDA_ERROR_ILLEGAL_STATE`: e.g. a capture begun on a stream that is capturing already.
pub(crate) fn illegal_state(message: impl Into<String>) -> GraphError {
    driver(401, "CUDA_ERROR_ILLEGAL_STATE", message)
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

fn driver(code: i64, name: &str, message: impl Into<String>) -> GraphError {
    GraphError::Driver {
        backend: "mock",
        code,
        name: name.to_owned(),
        message: message.into(),
    }
}
