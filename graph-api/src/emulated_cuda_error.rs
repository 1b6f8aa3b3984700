//! CUDA's error codes and names for the situations software backends (mock, wgpu) emulate, so a
//! test written on one backend reads the same error on every other.

use std::fmt;

use crate::GraphError;

/// A CUDA driver error a software backend reports where the CUDA driver would.
///
/// ```
/// use accel_graph_api::{EmulatedCudaError, GraphError};
/// let e = EmulatedCudaError::CaptureIsolation.error("mock", "wait across a capture boundary");
/// assert!(matches!(e, GraphError::Driver { code: 905, ref name, .. }
///     if name == "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmulatedCudaError {
    /// `CUDA_ERROR_ILLEGAL_STATE`: e.g. a capture begun on a stream that is capturing already.
    IllegalState,
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`: an operation the capture cannot take part in.
    CaptureUnsupported,
    /// `CUDA_ERROR_STREAM_CAPTURE_MERGE`: a wait would merge two separate captures.
    CaptureMerge,
    /// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: a dependency across a capture's boundary.
    CaptureIsolation,
    /// `CUDA_ERROR_CAPTURED_EVENT`: an operation not permitted on an event recorded in a
    /// capture.
    CapturedEvent,
}

impl EmulatedCudaError {
    /// CUDA's numeric code.
    pub fn code(self) -> i64 {
        match self {
            EmulatedCudaError::IllegalState => 401,
            EmulatedCudaError::CaptureUnsupported => 900,
            EmulatedCudaError::CaptureMerge => 902,
            EmulatedCudaError::CaptureIsolation => 905,
            EmulatedCudaError::CapturedEvent => 907,
        }
    }

    /// CUDA's symbolic name.
    pub fn name(self) -> &'static str {
        match self {
            EmulatedCudaError::IllegalState => "CUDA_ERROR_ILLEGAL_STATE",
            EmulatedCudaError::CaptureUnsupported => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            EmulatedCudaError::CaptureMerge => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
            EmulatedCudaError::CaptureIsolation => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
            EmulatedCudaError::CapturedEvent => "CUDA_ERROR_CAPTURED_EVENT",
        }
    }

    /// The [`GraphError::Driver`] that `backend` reports.
    pub fn error(self, backend: &'static str, message: impl Into<String>) -> GraphError {
        GraphError::Driver {
            backend,
            code: self.code(),
            name: self.name().to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for EmulatedCudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
