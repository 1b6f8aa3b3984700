//! Driver results → [`GraphError`]: each capture-related CUDA error becomes the variant the
//! mock backend reports for the same misuse, everything else a `Driver` error with CUDA's name.

use accel_graph_api::{CaptureErrorMode, GraphError, Result};
use cudarc::driver::{DriverError, sys};

/// The backend's name in errors.
pub(crate) const BACKEND: &str = "cuda";

/// `CUDA_ERROR_...` name and description of a driver result.
pub(crate) fn describe(code: sys::CUresult) -> (String, String) {
    let err = DriverError(code);
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

/// A plain `Driver` error for `code`, naming the call that failed.
pub(crate) fn driver(code: sys::CUresult, call: &str) -> GraphError {
    let (name, message) = describe(code);
    GraphError::Driver {
        backend: BACKEND,
        code: code as i64,
        name,
        message: format!("{call}: {message}"),
    }
}

/// What a failing call was, so capture errors can name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallSite<'a> {
    /// The driver call (`cuMemAlloc`...).
    pub call: &'a str,
    /// The API operation that made it (`alloc`, `synchronize`...).
    pub operation: &'a str,
    /// Bytes requested, for out-of-memory errors.
    pub bytes: usize,
    /// Mode of the capture that may have forbidden the call.
    pub mode: CaptureErrorMode,
    /// The operation is an unsafe call (blocking synchronisation, blocking copy, plain
    /// allocation): refused during a capture even when the capture is already invalidated.
    pub unsafe_call: bool,
}

/// Maps a driver result to `Ok` or the matching [`GraphError`] variant.
pub(crate) fn check(code: sys::CUresult, site: CallSite<'_>) -> Result<()> {
    use sys::CUresult as R;
    match code {
        R::CUDA_SUCCESS => Ok(()),
        R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => {
            Err(GraphError::UnsafeDuringCapture {
                operation: format!("{} ({})", site.operation, site.call),
                mode: site.mode,
            })
        }
        R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if site.unsafe_call => {
            Err(GraphError::UnsafeDuringCapture {
                operation: format!("{} ({})", site.operation, site.call),
                mode: site.mode,
            })
        }
        R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => Err(GraphError::CaptureInvalidated {
            reason: format!(
                "{} ({}) reported CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: an earlier call during \
                 this capture failed",
                site.operation, site.call
            ),
        }),
        R::CUDA_ERROR_STREAM_CAPTURE_UNJOINED => Err(GraphError::CaptureUnjoined),
        R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD => Err(GraphError::WrongThread),
        R::CUDA_ERROR_OUT_OF_MEMORY => Err(GraphError::OutOfMemory {
            backend: BACKEND,
            requested_bytes: site.bytes,
        }),
        other => Err(driver(other, site.call)),
    }
}

/// Shorthand for calls that are not capture-sensitive: any failure is a `Driver` error (capture
/// errors still get their own variants).
pub(crate) fn check_call(code: sys::CUresult, call: &str) -> Result<()> {
    check(
        code,
        CallSite {
            call,
            operation: call,
            bytes: 0,
            mode: CaptureErrorMode::Global,
            unsafe_call: false,
        },
    )
}

/// Converts a cudarc error (from its safe API) to a [`GraphError`].
pub(crate) fn from_cudarc(err: DriverError, call: &str) -> GraphError {
    match check_call(err.0, call) {
        Err(e) => e,
        Ok(()) => driver(err.0, call),
    }
}
