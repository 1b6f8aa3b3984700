//! Without a usable HIP device the backend reports `BackendUnavailable` with the reason: HIP's
//! own error name and text when the runtime is linked, the missing feature otherwise.
//!
//! On a machine that does have a HIP device (or the HIP-on-CUDA shim loaded) the backend opens,
//! and the test checks that instead, so it asserts the right thing everywhere.

use accel_graph_api::GraphError;
#[cfg(feature = "runtime")]
use accel_graph_api::{Backend, BackendKind};
use accel_graph_hip::HipBackend;

#[cfg(not(feature = "runtime"))]
#[test]
fn without_the_runtime_feature_the_reason_names_the_feature() {
    match HipBackend::new(0) {
        Err(GraphError::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "hip");
            assert!(reason.contains("`runtime` feature"), "{reason}");
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
}

#[cfg(feature = "runtime")]
#[test]
fn with_the_runtime_new_opens_a_device_or_names_the_hip_error() {
    match HipBackend::new(0) {
        Err(GraphError::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "hip");
            eprintln!("HipBackend::new(0): {reason}");
            // HIP's own error name and description, e.g. "hipInit failed: hipErrorNoDevice
            // (100): no ROCm-capable device is detected".
            assert!(reason.contains("hipError"), "{reason}");
            assert!(reason.contains("failed:"), "{reason}");
            assert!(
                reason
                    .split("): ")
                    .nth(1)
                    .is_some_and(|t| !t.trim().is_empty()),
                "{reason}"
            );
        }
        Ok(backend) => {
            assert_eq!(backend.kind(), BackendKind::Hip);
            assert!(!backend.capabilities().device_name.is_empty());
        }
        Err(other) => panic!("expected BackendUnavailable, got {other}"),
    }
}

#[test]
fn a_negative_ordinal_is_unavailable_never_a_panic() {
    let err = HipBackend::new(-1).expect_err("no device -1");
    assert!(
        matches!(err, GraphError::BackendUnavailable { backend: "hip", .. }),
        "{err}"
    );
}
