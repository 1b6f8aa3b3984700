//! HIP error codes turned into [`GraphError`]s, with the runtime's own names and texts.

use std::ffi::CStr;

use accel_graph_api::{CaptureErrorMode, GraphError};

use super::ffi::{self, hipError_t};

/// Backend name used in errors.
pub(crate) const BACKEND: &str = "hip";

/// The numeric value of a HIP error code.
pub(crate) fn code_of(err: hipError_t) -> i32 {
    err as i32
}

/// True for `hipSuccess`.
pub(crate) fn is_success(err: hipError_t) -> bool {
    code_of(err) == 0
}

/// The runtime's symbolic name of `err` (e.g. `hipErrorInvalidValue`).
pub(crate) fn name_of(err: hipError_t) -> String {
    // SAFETY: hipGetErrorName accepts any code and returns a static NUL-terminated string (or
    // null, handled below).
    let ptr = unsafe { ffi::hipGetErrorName(err) };
    if ptr.is_null() {
        return format!("hipError({})", code_of(err));
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
        return String::from("(no description)");
    }
    // SAFETY: non-null pointers from hipGetErrorString point to static C strings.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// A plain driver error: `GraphError::Driver` with the runtime's name and text.
pub(crate) fn driver(err: hipError_t, operation: &str) -> GraphError {
    GraphError::Driver {
        backend: BACKEND,
        code: i64::from(code_of(err)),
        name: name_of(err),
        message: format!("{operation}: {}", text_of(err)),
    }
}

/// What a failed call was doing, for the errors that need it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallSite<'a> {
    /// The backend operation (`"alloc"`, `"synchronize"`, ...) and the HIP call.
    pub(crate) operation: &'a str,
    /// The capture mode that forbade the call, should the runtime refuse it during capture.
    pub(crate) mode: CaptureErrorMode,
    /// Bytes requested, for allocations.
    pub(crate) requested_bytes: usize,
}

/// Maps a HIP error to the `GraphError` the API promises, as the CUDA backend does:
/// capture-unsafe calls, invalidated and unjoined captures, wrong threads and out-of-memory get
/// their own variants; everything else is a `Driver` error naming the HIP code.
pub(crate) fn map(err: hipError_t, site: CallSite<'_>) -> GraphError {
    use ffi::hipError_t::*;
    match err {
        hipErrorOutOfMemory => GraphError::OutOfMemory {
            backend: BACKEND,
            requested_bytes: site.requested_bytes,
        },
        hipErrorStreamCaptureUnsupported | hipErrorStreamCaptureImplicit => {
            GraphError::UnsafeDuringCapture {
                operation: format!("{} ({})", site.operation, name_of(err)),
                mode: site.mode,
            }
        }
        hipErrorStreamCaptureInvalidated => GraphError::CaptureInvalidated {
            reason: format!("{}: {}", site.operation, text_of(err)),
        },
        hipErrorStreamCaptureUnjoined => GraphError::CaptureUnjoined,
        hipErrorStreamCaptureWrongThread => GraphError::WrongThread,
        _ => driver(err, site.operation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffi::hipError_t::*;

    fn site() -> CallSite<'static> {
        CallSite {
            operation: "op",
            mode: CaptureErrorMode::ThreadLocal,
            requested_bytes: 64,
        }
    }

    #[test]
    fn capture_errors_get_their_own_variants() {
        assert!(matches!(
            map(hipErrorStreamCaptureUnsupported, site()),
            GraphError::UnsafeDuringCapture {
                mode: CaptureErrorMode::ThreadLocal,
                ..
            }
        ));
        assert!(matches!(
            map(hipErrorStreamCaptureImplicit, site()),
            GraphError::UnsafeDuringCapture { .. }
        ));
        assert!(matches!(
            map(hipErrorStreamCaptureInvalidated, site()),
            GraphError::CaptureInvalidated { .. }
        ));
        assert!(matches!(
            map(hipErrorStreamCaptureUnjoined, site()),
            GraphError::CaptureUnjoined
        ));
        assert!(matches!(
            map(hipErrorStreamCaptureWrongThread, site()),
            GraphError::WrongThread
        ));
        assert!(matches!(
            map(hipErrorOutOfMemory, site()),
            GraphError::OutOfMemory {
                backend: "hip",
                requested_bytes: 64
            }
        ));
    }

    #[test]
    fn other_errors_are_driver_errors_with_hip_names() {
        match map(hipErrorInvalidValue, site()) {
            GraphError::Driver {
                backend,
                code,
                name,
                message,
            } => {
                assert_eq!((backend, code), ("hip", 1));
                assert_eq!(name, "hipErrorInvalidValue");
                assert!(message.starts_with("op: "), "{message}");
            }
            other => panic!("expected a driver error, got {other:?}"),
        }
    }
}
