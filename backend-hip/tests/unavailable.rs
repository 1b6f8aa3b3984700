//! Without a usable HIP device the backend reports `BackendUnavailable` with the reason: HIP's
//! own error name and text when the runtime is linked, the missing feature otherwise.
//!
//! On a machine that does have a HIP device (or the HIP-on-CUDA shim loaded) the backend opens,
//! and the test checks that instead, so it asserts the right thing everywhere; there, it also
//! runs what the conformance suite does not reach: event queries and timing, an external event
//! recorded in a capture, and the DOT dump.

use accel_graph_api::GraphError;
#[cfg(feature = "runtime")]
use accel_graph_api::{
    AcceleratorGraph, Backend, BackendKind, EventOptions, GraphOptions, NodeKind, PortableOps,
};
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
fn an_ordinal_past_the_runtime_int_is_unavailable_never_a_panic_or_a_wrap() {
    // `usize::MAX as i32` is -1 and `2^32` wraps to device 0: both must be refused.
    let past_u32 = usize::try_from(1u64 << 32).unwrap_or(usize::MAX);
    for ordinal in [usize::MAX, past_u32, i32::MAX as usize + 1] {
        let err = HipBackend::new(ordinal).expect_err("no such device");
        assert!(
            matches!(err, GraphError::BackendUnavailable { backend: "hip", .. }),
            "{ordinal}: {err}"
        );
    }
}

#[test]
fn the_driver_types_are_the_same_in_both_builds() {
    // Compile-time checks: the same names and auto traits with and without `runtime`.
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<HipBackend>();
    send_sync::<accel_graph_hip::HipDevice>();
    send_sync::<accel_graph_hip::HStream>();
    send_sync::<accel_graph_hip::HEvent>();
    send_sync::<accel_graph_hip::HBlock>();
    send_sync::<accel_graph_hip::HipKernelModule>();
    send::<accel_graph_hip::HGraph>();
    send::<accel_graph_hip::HGraphExec>();
    send_sync::<accel_graph_hip::HipBuffer>();
    send_sync::<accel_graph_hip::HipStream>();
    send::<accel_graph_hip::HipGraph>();
}

#[cfg(feature = "runtime")]
#[test]
fn on_a_device_events_query_time_and_record_external_nodes() -> accel_graph_api::Result<()> {
    let Ok(backend) = HipBackend::new(0) else {
        // No device: `with_the_runtime_new_opens_a_device_or_names_the_hip_error` checks why.
        return Ok(());
    };
    println!(
        "{backend:?}: the runtime refuses hipMalloc during a capture: {:?}",
        backend.driver().runtime_refuses_capture_alloc()
    );
    let timing = EventOptions::new().enable_timing(true);
    let (start, end) = (
        backend.new_event_with(timing)?,
        backend.new_event_with(timing)?,
    );
    let x = backend.alloc_from(&vec![0.0; 1 << 20])?;
    let stream = backend.new_stream()?;
    {
        let _on_stream = backend.use_stream(&stream)?;
        backend.record_event(&start)?;
        backend.add_scalar(&x, 1.0)?;
        backend.record_event(&end)?;
    }
    backend.event_synchronize(&end)?;
    assert!(backend.event_query(&end)?);
    let ms = backend.elapsed_time(&start, &end)?;
    assert!(ms.is_finite() && ms >= 0.0, "{ms}");

    let external = backend.new_event_with(EventOptions::new().external(true))?;
    let mut graph = backend.graph(GraphOptions::new().keep_graph(true))?;
    backend.capture_on(&stream, &mut graph, || {
        backend.scale(&x, 2.0)?;
        backend.record_event(&external)
    })?;
    let nodes = graph.nodes()?;
    assert_eq!(nodes.count(NodeKind::Kernel), 1, "{nodes:?}");
    // A node of its own where the runtime has hipEventRecordWithFlags (the shim exports it;
    // ROCm 5.2 does not, and records it as an ordering point).
    let records = nodes.count(NodeKind::EventRecord);
    if backend.capabilities().device_name.contains("HIP-on-CUDA") {
        assert_eq!(records, 1, "{nodes:?}");
    }
    assert!(records <= 1, "{nodes:?}");
    graph.replay()?;
    backend.synchronize()?;
    assert!(backend.event_query(&external)?);
    assert!(backend.download(&x)?.iter().all(|&v| v == 2.0));

    let dot = std::env::temp_dir().join(format!("accel-graph-hip-{}.dot", std::process::id()));
    graph.debug_dump(&dot)?;
    let text = std::fs::read_to_string(&dot).map_err(|e| GraphError::io(&dot, e))?;
    let _ = std::fs::remove_file(&dot);
    assert!(text.contains("digraph"), "{text}");
    Ok(())
}
