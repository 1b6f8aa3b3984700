//! `hipError_t` → [`DriverError`]: HIP's name and text for every failure, and the class the
//! driver layer maps it by.

use std::ffi::CStr;

use accel_graph_api::{GraphError, backend_kit::ErrorClass};
use accel_graph_driver::{DriverError, DriverResult};

use crate::ffi::{self, hipError_t};

/// The backend's name in errors.
pub(crate) const BACKEND: &str = "hip";

/// The runtime's symbolic name of `err` (e.g. `hipErrorInvalidValue`).
pub(crate) fn name_of(err: hipError_t) -> String {
    // SAFETY: hipGetErrorName accepts any code and returns a static NUL-terminated string (or
    // null, handled below).
    let ptr = unsafe { ffi::hipGetErrorName(err) };
    if ptr.is_null() {
        return format!("hipError({})", err as i64);
    }
    // SAFETY: non-null pointers from hipGetErrorName point to static C strings.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The runtime's description of `err`.
pub(crate) fn text_of(err: hipError_t) -> String {
    // SAFETY: as for `name_of`.
    let ptr = unsafe { ffi::hipGetErrorString(err) };
    if ptr.is_null() {
        return "(no description)".to_owned();
    }
    // SAFETY: non-null pointers from hipGetErrorString point to static C strings.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The [`DriverError`] of a failed `call`.
pub(crate) fn error(err: hipError_t, call: &str) -> DriverError {
    let name = name_of(err);
    DriverError::code(
        ErrorClass::of_name(&name),
        err as i64,
        name,
        format!("{call}: {}", text_of(err)),
    )
}

/// `Ok` for `hipSuccess`, else the error of `call`.
#[inline]
pub(crate) fn check(err: hipError_t, call: &str) -> DriverResult<()> {
    if err == hipError_t::hipSuccess {
        Ok(())
    } else {
        Err(error(err, call))
    }
}

/// A failed start-up `call` as `BackendUnavailable`, with HIP's name, code and text.
pub(crate) fn unavailable(err: hipError_t, call: &str) -> GraphError {
    GraphError::BackendUnavailable {
        backend: BACKEND,
        reason: format!(
            "{call} failed: {} ({}): {}",
            name_of(err),
            err as i64,
            text_of(err)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipError_t::*;

    fn class_of(err: hipError_t) -> ErrorClass {
        error(err, "op").class()
    }

    #[test]
    fn capture_errors_get_their_own_classes() {
        assert_eq!(
            class_of(hipErrorStreamCaptureUnsupported),
            ErrorClass::UnsafeDuringCapture
        );
        assert_eq!(
            class_of(hipErrorStreamCaptureImplicit),
            ErrorClass::UnsafeDuringCapture
        );
        assert_eq!(
            class_of(hipErrorStreamCaptureInvalidated),
            ErrorClass::CaptureInvalidated
        );
        assert_eq!(
            class_of(hipErrorStreamCaptureUnjoined),
            ErrorClass::CaptureUnjoined
        );
        assert_eq!(
            class_of(hipErrorStreamCaptureWrongThread),
            ErrorClass::CaptureWrongThread
        );
        assert_eq!(class_of(hipErrorOutOfMemory), ErrorClass::OutOfMemory);
    }

    #[test]
    fn sticky_errors_are_device_faults() {
        for err in [
            hipErrorIllegalAddress,
            hipErrorLaunchFailure,
            hipErrorLaunchTimeOut,
            hipErrorAssert,
            hipErrorECCNotCorrectable,
        ] {
            assert_eq!(class_of(err), ErrorClass::DeviceFault, "{err:?}");
        }
    }

    #[test]
    fn other_errors_keep_hip_names_and_texts() {
        assert!(check(hipSuccess, "op").is_ok());
        match error(hipErrorInvalidValue, "op") {
            DriverError::Code {
                class,
                code,
                name,
                message,
            } => {
                assert_eq!((class, code), (ErrorClass::Other, 1));
                assert_eq!(name, "hipErrorInvalidValue");
                assert!(
                    message.starts_with("op: ") && message.len() > 4,
                    "{message}"
                );
            }
            other => panic!("expected a coded error, got {other:?}"),
        }
    }

    #[test]
    fn unavailable_names_the_call_and_the_hip_error() {
        match unavailable(hipErrorInvalidDevice, "hipInit") {
            GraphError::BackendUnavailable { backend, reason } => {
                assert_eq!(backend, "hip");
                assert!(
                    reason.starts_with("hipInit failed: hipErrorInvalidDevice (101): "),
                    "{reason}"
                );
            }
            other => panic!("expected BackendUnavailable, got {other:?}"),
        }
    }
}
