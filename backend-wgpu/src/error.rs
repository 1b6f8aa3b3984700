//! wgpu's own failures (device polls, buffer maps) as driver errors. Errors of the capture
//! emulation use CUDA's names, through [`accel_graph_driver::software`].

use accel_graph_api::{GraphError, backend_kit::ErrorClass};
use accel_graph_driver::DriverError;

/// wgpu reports no numeric codes; its failures carry this one.
const NO_CODE: i64 = -1;

/// A failure wgpu reported: `name` says what failed (`PollError`, `MapAsync`...).
pub(crate) fn wgpu_failure(name: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::code(ErrorClass::Other, NO_CODE, name, message)
}

/// A failed device poll.
pub(crate) fn poll_failure(error: wgpu::PollError) -> DriverError {
    wgpu_failure("PollError", error.to_string())
}

/// Device memory the adapter cannot give.
pub(crate) fn out_of_memory(bytes: usize, why: &str) -> DriverError {
    DriverError::code(
        ErrorClass::OutOfMemory,
        NO_CODE,
        "OutOfMemory",
        format!("a buffer of {bytes} bytes: {why}"),
    )
}

/// The error for a backend that cannot open (no adapter, no device).
pub(crate) fn unavailable(reason: impl Into<String>) -> GraphError {
    GraphError::BackendUnavailable {
        backend: "wgpu",
        reason: reason.into(),
    }
}

/// The error of a failed call this crate makes itself on a driver-layer object (a user
/// dispatch): the driver layer's error table is its own, so the few classes such a call can
/// meet are mapped here the same way — an invalidated capture, and wgpu's other failures.
pub(crate) fn to_graph_error(operation: &str, error: DriverError) -> GraphError {
    match error {
        DriverError::Api(e) => e,
        DriverError::Code {
            class: ErrorClass::CaptureInvalidated,
            name,
            message,
            ..
        } => GraphError::CaptureInvalidated {
            reason: format!("{operation} reported {name}: {message}"),
        },
        DriverError::Code {
            code,
            name,
            message,
            ..
        } => GraphError::Driver {
            backend: "wgpu",
            code,
            name: name.into_owned(),
            message: format!("{operation}: {message}"),
        },
    }
}
