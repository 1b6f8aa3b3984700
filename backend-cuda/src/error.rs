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

/// The [`DriverError`] of a failed `call`.
pub(crate) fn error(code: CUresult, call: &str) -> DriverError {
    let (name, message) = describe(code);
    DriverError::code(
        ErrorClass::of_name(&name),
        code as i64,
        name,
        format!("{call}: {message}"),
    )
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
