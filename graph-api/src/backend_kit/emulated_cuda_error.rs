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

impl ErrorClass {
    /// The class of a driver error by its symbolic name, for CUDA (`CUDA_ERROR_OUT_OF_MEMORY`),
    /// the CUDA runtime (`cudaErrorMemoryAllocation`) and HIP (`hipErrorOutOfMemory`) alike:
    /// the one table of the error kinds that get API variants of their own.
    ///
    /// ```
    /// use accel_graph_api::backend_kit::ErrorClass;
    /// assert_eq!(ErrorClass::of_name("CUDA_ERROR_ILLEGAL_ADDRESS"), ErrorClass::DeviceFault);
    /// assert_eq!(ErrorClass::of_name("hipErrorIllegalAddress"), ErrorClass::DeviceFault);
    /// assert_eq!(
    ///     ErrorClass::of_name("hipErrorStreamCaptureImplicit"),
    ///     ErrorClass::UnsafeDuringCapture
    /// );
    /// assert_eq!(ErrorClass::of_name("CUDA_ERROR_INVALID_VALUE"), ErrorClass::Other);
    /// ```
    pub fn of_name(name: &str) -> ErrorClass {
        let bare = ["CUDA_ERROR_", "cudaError", "hipError"]
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix))
            .unwrap_or(name);
        let key: String = bare
            .chars()
            .filter(|c| *c != '_')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        match key.as_str() {
            "streamcaptureunsupported" | "streamcaptureimplicit" => ErrorClass::UnsafeDuringCapture,
            "streamcaptureinvalidated" => ErrorClass::CaptureInvalidated,
            "streamcaptureunjoined" => ErrorClass::CaptureUnjoined,
            "streamcapturewrongthread" => ErrorClass::CaptureWrongThread,
            "outofmemory" | "memoryallocation" => ErrorClass::OutOfMemory,
            // Sticky errors: the context is corrupted and every later call returns them.
            "illegaladdress"
            | "launchfailed"
            | "launchfailure"
            | "launchtimeout"
            | "hardwarestackerror"
            | "illegalinstruction"
            | "misalignedaddress"
            | "invalidaddressspace"
            | "invalidpc"
            | "assert"
            | "eccuncorrectable"
            | "eccnotcorrectable" => ErrorClass::DeviceFault,
            _ => ErrorClass::Other,
        }
    }
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
        ErrorClass::of_name(self.name())
    }
}

impl fmt::Display for EmulatedCudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
