//! Driver results → [`DriverError`]: CUDA's name and text for every failure, and the class the
//! driver layer maps it by.

use accel_graph_api::backend_kit::ErrorClass;
use accel_graph_driver::{DriverError, DriverResult};
use cudarc::driver::sys::{self, CUresult};

/// The backend's name in errors.
pub(crate) const BACKEND: &str = "cuda";

/// `CUDA_ERROR_...` name and description of a driver result.
pub(crate) fn describe(code: CUresult) -> (String, String) {
    let err = cudarc::driver::DriverError(code);
    let name = err
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{code:?}"));
    let message = err
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown driver error".to_owned());
    (name, message)
}

/// What kind of failure `code` is.
fn class(code: CUresult) -> ErrorClass {
    use CUresult as R;
    match code {
        R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => {
            ErrorClass::UnsafeDuringCapture
        }
        R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => ErrorClass::CaptureInvalidated,
        R::CUDA_ERROR_STREAM_CAPTURE_UNJOINED => ErrorClass::CaptureUnjoined,
        R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD => ErrorClass::CaptureWrongThread,
        R::CUDA_ERROR_OUT_OF_MEMORY => ErrorClass::OutOfMemory,
        // Sticky errors: the context is corrupted and every later call returns them.
        R::CUDA_ERROR_ILLEGAL_ADDRESS
        | R::CUDA_ERROR_LAUNCH_FAILED
        | R::CUDA_ERROR_HARDWARE_STACK_ERROR
        | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | R::CUDA_ERROR_MISALIGNED_ADDRESS
        | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
        | R::CUDA_ERROR_INVALID_PC
        | R::CUDA_ERROR_ASSERT
        | R::CUDA_ERROR_ECC_UNCORRECTABLE => ErrorClass::DeviceFault,
        _ => ErrorClass::Other,
    }
}

/// The [`DriverError`] of a failed `call`.
pub(crate) fn error(code: CUresult, call: &str) -> DriverError {
    let (name, message) = describe(code);
    DriverError::code(class(code), code as i64, name, format!("{call}: {message}"))
}

/// `Ok` for `CUDA_SUCCESS`, else the error of `call`.
#[inline]
pub(crate) fn check(code: CUresult, call: &str) -> DriverResult<()> {
    if code == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(error(code, call))
    }
}

/// Converts an error of cudarc's `result` layer.
pub(crate) fn from_cudarc(err: cudarc::driver::DriverError, call: &str) -> DriverError {
    error(err.0, call)
}
