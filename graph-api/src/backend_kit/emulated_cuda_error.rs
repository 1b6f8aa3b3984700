//! CUDA's error codes and names for the situations software backends (mock, wgpu) emulate, so
//! a test written on one backend reads the same error on every other; and [`ErrorClass`], the
//! few kinds of driver failure the API gives variants of their own.

use std::fmt;

/// What kind of failure a driver error is: the driver layer turns each class into its
/// [`crate::GraphError`] variant, and everything else into `GraphError::Driver` with the
/// driver's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The call is not permitted while a stream is capturing (`..._CAPTURE_UNSUPPORTED`,
    /// `..._CAPTURE_IMPLICIT`).
    UnsafeDuringCapture,
    /// The capture was invalidated by an earlier error.
    CaptureInvalidated,
    /// Forked work was not joined back before the end of capture.
    CaptureUnjoined,
    /// The capture was ended from a thread that may not end it.
    CaptureWrongThread,
    /// Device memory is exhausted.
    OutOfMemory,
    /// The device context is unusable from now on (an illegal address in a kernel...).
    DeviceFault,
    /// Anything else.
    Other,
}

/// A CUDA driver error a software backend reports where the CUDA driver would.
///
/// ```
/// use accel_graph_api::backend_kit::{EmulatedCudaError, ErrorClass};
/// let e = EmulatedCudaError::CaptureIsolation;
/// assert_eq!((e.code(), e.name()), (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"));
/// assert_eq!(EmulatedCudaError::CaptureInvalidated.class(), ErrorClass::CaptureInvalidated);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmulatedCudaError {
    /// `CUDA_ERROR_INVALID_VALUE`.
    InvalidValue,
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    OutOfMemory,
    /// `CUDA_ERROR_ILLEGAL_STATE`: e.g. a capture begun on a stream that is capturing already.
    IllegalState,
    /// `CUDA_ERROR_NOT_READY`: work is still pending.
    NotReady,
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`: a kernel touched memory it may not (sticky).
    IllegalAddress,
    /// `CUDA_ERROR_NOT_PERMITTED`: e.g. a runtime call from inside a host function.
    NotPermitted,
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`: an operation the capture cannot take part in.
    CaptureUnsupported,
    /// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`: the capture was invalidated earlier.
    CaptureInvalidated,
    /// `CUDA_ERROR_STREAM_CAPTURE_MERGE`: a wait would merge two separate captures.
    CaptureMerge,
    /// `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`: forked work not joined back.
    CaptureUnjoined,
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
            EmulatedCudaError::InvalidValue => 1,
            EmulatedCudaError::OutOfMemory => 2,
            EmulatedCudaError::IllegalState => 401,
            EmulatedCudaError::NotReady => 600,
            EmulatedCudaError::IllegalAddress => 700,
            EmulatedCudaError::NotPermitted => 800,
            EmulatedCudaError::CaptureUnsupported => 900,
            EmulatedCudaError::CaptureInvalidated => 901,
            EmulatedCudaError::CaptureMerge => 902,
            EmulatedCudaError::CaptureUnjoined => 904,
            EmulatedCudaError::CaptureIsolation => 905,
            EmulatedCudaError::CapturedEvent => 907,
        }
    }

    /// CUDA's symbolic name.
    pub fn name(self) -> &'static str {
        match self {
            EmulatedCudaError::InvalidValue => "CUDA_ERROR_INVALID_VALUE",
            EmulatedCudaError::OutOfMemory => "CUDA_ERROR_OUT_OF_MEMORY",
            EmulatedCudaError::IllegalState => "CUDA_ERROR_ILLEGAL_STATE",
            EmulatedCudaError::NotReady => "CUDA_ERROR_NOT_READY",
            EmulatedCudaError::IllegalAddress => "CUDA_ERROR_ILLEGAL_ADDRESS",
            EmulatedCudaError::NotPermitted => "CUDA_ERROR_NOT_PERMITTED",
            EmulatedCudaError::CaptureUnsupported => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            EmulatedCudaError::CaptureInvalidated => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            EmulatedCudaError::CaptureMerge => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
            EmulatedCudaError::CaptureUnjoined => "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
            EmulatedCudaError::CaptureIsolation => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
            EmulatedCudaError::CapturedEvent => "CUDA_ERROR_CAPTURED_EVENT",
        }
    }

    /// The class the driver layer maps it by.
    pub fn class(self) -> ErrorClass {
        match self {
            EmulatedCudaError::OutOfMemory => ErrorClass::OutOfMemory,
            EmulatedCudaError::IllegalAddress => ErrorClass::DeviceFault,
            EmulatedCudaError::CaptureUnsupported => ErrorClass::UnsafeDuringCapture,
            EmulatedCudaError::CaptureInvalidated => ErrorClass::CaptureInvalidated,
            EmulatedCudaError::CaptureUnjoined => ErrorClass::CaptureUnjoined,
            EmulatedCudaError::InvalidValue
            | EmulatedCudaError::IllegalState
            | EmulatedCudaError::NotReady
            | EmulatedCudaError::NotPermitted
            | EmulatedCudaError::CaptureMerge
            | EmulatedCudaError::CaptureIsolation
            | EmulatedCudaError::CapturedEvent => ErrorClass::Other,
        }
    }
}

impl fmt::Display for EmulatedCudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
