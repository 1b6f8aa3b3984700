//! The mock's emulation of CUDA's stream capture beyond what the conformance suite checks:
//! CUDA's error names for isolation, merge and illegal-state errors, event semantics outside
//! capture, and what the software capture does not support.

use accel_graph_api::prelude::*;
use accel_graph_mock::MockBackend;

fn driver_name(e: &GraphError) -> Option<&str> {
    match e {
        GraphError::Driver { name, .. } => Some(name),
        _ => None,
    }
}

#[test]
fn two_graphs_cannot_capture_one_stream() -> Result<()> {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let _c = b.use_stream(&s)?;
    let mut g1 = b.graph(GraphOptions::new())?;
    let mut g2 = b.graph(GraphOptions::new())?;
    g1.capture_begin()?;
    let e = g2.capture_begin().unwrap_err();
    assert_eq!(driver_name(&e), Some("CUDA_ERROR_ILLEGAL_STATE"), "{e:?}");
    g1.capture_end()?;
    Ok(())
}

#[test]
fn a_fork_without_work_needs_no_join() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let (main, side) = (b.new_stream()?, b.new_stream()?);
    let fork = b.new_event()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&main, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        b.record_event(&fork)?;
        let _s = b.use_stream(&side)?;
        b.wait_event(&fork)
    })?;
    assert!(!b.is_capturing(&side)?);
    Ok(())
}

#[test]
fn waiting_outside_capture_on_a_captured_event_is_isolation() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let main = b.new_stream()?;
    let ev = b.new_event()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&main, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        b.record_event(&ev)
    })?;
    let err = b.wait_event(&ev).unwrap_err();
    assert_eq!(
        driver_name(&err),
        Some("CUDA_ERROR_STREAM_CAPTURE_ISOLATION")
    );
    assert!(matches!(
        b.event_synchronize(&ev),
        Err(GraphError::Driver { .. })
    ));
    // Recording again outside capture makes it an ordinary event.
    b.record_event(&ev)?;
    b.wait_event(&ev)?;
    b.event_synchronize(&ev)?;
    Ok(())
}

#[test]
fn events_outside_capture_are_no_ops() -> Result<()> {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let ev = b.new_event()?;
    b.wait_event(&ev)?; // never recorded
    b.record_event(&ev)?;
    let _s = b.use_stream(&s)?;
    b.wait_event(&ev)?;
    b.event_synchronize(&ev)?;
    Ok(())
}

#[test]
fn waiting_in_capture_on_an_event_from_outside_invalidates() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let main = b.new_stream()?;
    let ev = b.new_event()?;
    b.record_event(&ev)?; // on the default stream, no capture
    let mut g = b.graph(GraphOptions::new())?;
    let _current = b.use_stream(&main)?;
    g.capture_begin()?;
    let e = b.wait_event(&ev).unwrap_err();
    assert_eq!(driver_name(&e), Some("CUDA_ERROR_STREAM_CAPTURE_ISOLATION"));
    let e = b.add_scalar(&x, 1.0).unwrap_err();
    assert!(matches!(e, GraphError::CaptureInvalidated { .. }));
    assert!(matches!(
        g.capture_end(),
        Err(GraphError::CaptureInvalidated { .. })
    ));
    assert!(!b.is_capturing(&main)?);
    Ok(())
}

#[test]
fn two_captures_cannot_merge() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    let ev = b.new_event()?;
    let mut g1 = b.graph(GraphOptions::new())?;
    let mut g2 = b.graph(GraphOptions::new())?;
    {
        let _a = b.use_stream(&s1)?;
        g1.capture_begin()?;
        b.add_scalar(&x, 1.0)?;
        b.record_event(&ev)?;
    }
    {
        let _b = b.use_stream(&s2)?;
        g2.capture_begin()?;
        let e = b.wait_event(&ev).unwrap_err();
        assert_eq!(driver_name(&e), Some("CUDA_ERROR_STREAM_CAPTURE_MERGE"));
        assert!(matches!(
            g2.capture_end(),
            Err(GraphError::CaptureInvalidated { .. })
        ));
    }
    let _a = b.use_stream(&s1)?;
    g1.capture_end()?;
    g1.replay()?;
    assert_eq!(b.download(&x)?, vec![2.0]);
    Ok(())
}

#[test]
fn the_default_stream_cannot_join_a_capture() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let main = b.new_stream()?;
    let ev = b.new_event()?;
    let mut g = b.graph(GraphOptions::new())?;
    {
        let _m = b.use_stream(&main)?;
        g.capture_begin()?;
        b.add_scalar(&x, 1.0)?;
        b.record_event(&ev)?;
    }
    // This thread's current stream is the default one, which cannot join.
    let e = b.wait_event(&ev).unwrap_err();
    assert_eq!(driver_name(&e), Some("CUDA_ERROR_STREAM_CAPTURE_ISOLATION"));
    assert!(!b.is_capturing(&b.default_stream())?);
    // The capture is not harmed.
    let _m = b.use_stream(&main)?;
    g.capture_end()?;
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![2.0]);
    Ok(())
}

/// A replay into a capturing stream records the graph as one child node of the capture: it
/// runs nothing then, and the outer graph's replays run it.
#[test]
fn replay_into_a_capturing_stream_is_a_child_node() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let s = b.new_stream()?;
    let mut inner = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut inner, || b.scale(&x, 2.0))?;
    let mut outer = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut outer, || inner.replay())?;
    assert_eq!(outer.state(), GraphState::Captured);
    assert_eq!(outer.nodes()?.count(accel_graph_api::NodeKind::Graph), 1);
    assert_eq!(b.download(&x)?, vec![1.0]);
    outer.replay()?;
    assert_eq!(b.download(&x)?, vec![2.0]);
    Ok(())
}
