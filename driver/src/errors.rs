//! The error table, written once: a failed driver call becomes the [`GraphError`] variant the
//! API promises for it, whichever driver made it.

use accel_graph_api::{
    CaptureConflict, GraphError,
    backend_kit::{ErrorClass, capture_rules::CaptureRules},
};

use crate::api::DriverError;

/// What a failed call was, for the error it becomes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallSite<'a> {
    /// The API operation (`alloc`, `synchronize`, `capture_end`...).
    pub(crate) operation: &'a str,
    /// Bytes requested, for out-of-memory errors.
    pub(crate) bytes: usize,
    /// The operation is an unsafe call (blocking synchronization, blocking copy, plain
    /// allocation): an invalidated capture refuses it as unsafe, not merely as invalidated.
    pub(crate) unsafe_call: bool,
}

impl<'a> CallSite<'a> {
    /// A call that is not an unsafe call and allocates nothing.
    pub(crate) fn op(operation: &'a str) -> Self {
        CallSite {
            operation,
            bytes: 0,
            unsafe_call: false,
        }
    }

    /// An unsafe call.
    pub(crate) fn unsafe_call(operation: &'a str) -> Self {
        CallSite {
            operation,
            bytes: 0,
            unsafe_call: true,
        }
    }
}

/// Maps `error` of the call at `site` of backend `backend`; `rules` name the capture mode that
/// forbade a refused call.
pub(crate) fn to_graph_error(
    error: DriverError,
    site: CallSite<'_>,
    rules: &CaptureRules,
    backend: &'static str,
) -> GraphError {
    let (class, code, name, message) = match error {
        DriverError::Api(e) => return e,
        DriverError::Code {
            class,
            code,
            name,
            message,
        } => (class, code, name, message),
    };
    let unsafe_during_capture = || {
        let (mode, conflict) = rules.forbidding();
        GraphError::UnsafeDuringCapture {
            operation: format!("{} ({name})", site.operation),
            mode,
            conflict,
        }
    };
    match class {
        ErrorClass::UnsafeDuringCapture => unsafe_during_capture(),
        ErrorClass::CaptureInvalidated if site.unsafe_call => unsafe_during_capture(),
        ErrorClass::CaptureInvalidated => GraphError::CaptureInvalidated {
            reason: format!("{} reported {name}: {message}", site.operation),
        },
        ErrorClass::CaptureUnjoined => GraphError::CaptureUnjoined,
        ErrorClass::CaptureWrongThread => GraphError::WrongThread,
        ErrorClass::OutOfMemory => GraphError::OutOfMemory {
            backend,
            requested_bytes: site.bytes,
        },
        ErrorClass::DeviceFault => GraphError::DeviceFault {
            backend,
            name: name.into_owned(),
            message,
        },
        ErrorClass::Other => GraphError::Driver {
            backend,
            code,
            name: name.into_owned(),
            message: format!("{}: {message}", site.operation),
        },
    }
}

/// The error for an unsafe call that waits for a stream which is itself capturing: it can
/// never finish, so it conflicts with the capture in every mode (and invalidates it).
pub(crate) fn waits_for_capturing_stream(
    operation: &str,
    mode: accel_graph_api::CaptureErrorMode,
) -> GraphError {
    GraphError::UnsafeDuringCapture {
        operation: format!("{operation} on a capturing stream"),
        mode,
        conflict: CaptureConflict::EveryMode,
    }
}
