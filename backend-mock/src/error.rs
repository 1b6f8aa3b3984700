//! The mock's own errors: what a simulated device reports where a GPU would block or break.

use accel_graph_api::{GraphError, backend_kit::EmulatedCudaError};
use accel_graph_driver::DriverError;

/// The error of a call that would block forever on a stalled stream (CUDA would wait for the
/// long-running work; the simulation cannot, so it says why).
pub(crate) fn stalled(operation: &str) -> DriverError {
    DriverError::emulated(
        EmulatedCudaError::NotReady,
        format!("{operation}: a stalled mock stream would never finish (resume it first)"),
    )
}

/// The error for a configuration whose address space cannot hold an allocation.
pub(crate) fn invalid_config(reason: String) -> GraphError {
    GraphError::BackendUnavailable {
        backend: "mock",
        reason,
    }
}

/// The error once an injected device fault made the device unusable.
pub(crate) fn device_fault() -> DriverError {
    DriverError::emulated(
        EmulatedCudaError::IllegalAddress,
        "an earlier replay hit an illegal address (injected device fault)",
    )
}
