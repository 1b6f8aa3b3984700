//! Multi-stream capture: events fork work onto other streams and join it back.

use accel_graph_api::{
    AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState, NodeKind, Result,
};
use accel_graph_mock::MockBackend;

fn driver_name(e: &GraphError) -> Option<&str> {
    match e {
        GraphError::Driver { name, .. } => Some(name),
        _ => None,
    }
}

#[test]
fn fork_join_captures_work_on_both_streams() {
    let b = MockBackend::new();
    let (x, y) = (b.alloc_from(&[1.0]).unwrap(), b.alloc_from(&[1.0]).unwrap());
    let (main, side) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let (fork, join) = (b.new_event().unwrap(), b.new_event().unwrap());
    let mut g = b.graph(GraphOptions::new().keep_graph(true)).unwrap();
    b.capture_on(&main, &mut g, || -> Result<()> {
        b.add_scalar(&x, 1.0)?; // node 0
        b.record_event(&fork)?;
        {
            let _s = b.use_stream(&side);
            b.wait_event(&fork)?;
            assert!(
                b.is_capturing(&side)?,
                "the wait pulls side into the capture"
            );
            b.scale(&y, 10.0)?; // node 1, after node 0
            b.record_event(&join)?;
        }
        b.scale(&x, 3.0)?; // node 2, after node 0
        b.wait_event(&join)?;
        b.add_scalar(&x, 0.5) // node 3, after nodes 1 and 2
    })
    .unwrap()
    .unwrap();
    assert!(!b.is_capturing(&side).unwrap());
    assert!(!b.is_capturing(&main).unwrap());
    let t = g.nodes().unwrap();
    assert_eq!(t.count(NodeKind::Kernel), 4);
    assert_eq!(t.edges, vec![(0, 1), (0, 2), (1, 3), (2, 3)]);
    assert_eq!(b.download(&x).unwrap(), vec![1.0], "captured, not run");
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![6.5]);
    assert_eq!(b.download(&y).unwrap(), vec![10.0]);
}

#[test]
fn a_fork_never_joined_fails_capture_end_and_frees_every_stream() {
    let b = MockBackend::new();
    let y = b.alloc_from(&[1.0]).unwrap();
    let (main, side) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let fork = b.new_event().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    let err = b
        .capture_on(&main, &mut g, || -> Result<()> {
            b.record_event(&fork)?;
            let _s = b.use_stream(&side);
            b.wait_event(&fork)?;
            b.scale(&y, 10.0)
        })
        .unwrap_err();
    assert!(matches!(err, GraphError::CaptureUnjoined), "{err:?}");
    assert_eq!(g.state(), GraphState::Empty);
    assert!(!b.is_capturing(&main).unwrap());
    assert!(!b.is_capturing(&side).unwrap());
    assert!(!b.any_capture_active());
    assert_eq!(b.memory_stats().pools, 0, "the pool hold was released");
    // Both streams can capture again.
    let mut g2 = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&side, &mut g2, || b.scale(&y, 2.0))
        .unwrap()
        .unwrap();
}

#[test]
fn a_fork_without_work_needs_no_join() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let (main, side) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let fork = b.new_event().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&main, &mut g, || -> Result<()> {
        b.add_scalar(&x, 1.0)?;
        b.record_event(&fork)?;
        let _s = b.use_stream(&side);
        b.wait_event(&fork)
    })
    .unwrap()
    .unwrap();
    assert!(!b.is_capturing(&side).unwrap());
}

#[test]
fn waiting_outside_capture_on_a_captured_event_is_isolation() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let main = b.new_stream().unwrap();
    let ev = b.new_event().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&main, &mut g, || -> Result<()> {
        b.add_scalar(&x, 1.0)?;
        b.record_event(&ev)
    })
    .unwrap()
    .unwrap();
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
    b.record_event(&ev).unwrap();
    b.wait_event(&ev).unwrap();
    b.event_synchronize(&ev).unwrap();
}

#[test]
fn events_outside_capture_are_no_ops() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let ev = b.new_event().unwrap();
    b.wait_event(&ev).unwrap(); // never recorded
    b.record_event(&ev).unwrap();
    let _s = b.use_stream(&s);
    b.wait_event(&ev).unwrap();
    b.event_synchronize(&ev).unwrap();
}

#[test]
fn waiting_in_capture_on_an_event_from_outside_invalidates() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let main = b.new_stream().unwrap();
    let ev = b.new_event().unwrap();
    b.record_event(&ev).unwrap(); // on the default stream, no capture
    let mut g = b.graph(GraphOptions::new()).unwrap();
    let err = b
        .capture_on(&main, &mut g, || -> Result<()> {
            let e = b.wait_event(&ev).unwrap_err();
            assert_eq!(driver_name(&e), Some("CUDA_ERROR_STREAM_CAPTURE_ISOLATION"));
            let e = b.add_scalar(&x, 1.0).unwrap_err();
            assert!(matches!(e, GraphError::CaptureInvalidated { .. }));
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, GraphError::CaptureInvalidated { .. }));
    assert!(!b.is_capturing(&main).unwrap());
}

#[test]
fn two_captures_cannot_merge() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let (s1, s2) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let ev = b.new_event().unwrap();
    let mut g1 = b.graph(GraphOptions::new()).unwrap();
    let mut g2 = b.graph(GraphOptions::new()).unwrap();
    {
        let _a = b.use_stream(&s1);
        g1.capture_begin().unwrap();
        b.add_scalar(&x, 1.0).unwrap();
        b.record_event(&ev).unwrap();
    }
    {
        let _b = b.use_stream(&s2);
        g2.capture_begin().unwrap();
        let e = b.wait_event(&ev).unwrap_err();
        assert_eq!(driver_name(&e), Some("CUDA_ERROR_STREAM_CAPTURE_MERGE"));
        assert!(matches!(
            g2.capture_end(),
            Err(GraphError::CaptureInvalidated { .. })
        ));
    }
    let _a = b.use_stream(&s1);
    g1.capture_end().unwrap();
    g1.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![2.0]);
}

#[test]
fn the_default_stream_cannot_join_a_capture() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let main = b.new_stream().unwrap();
    let ev = b.new_event().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    {
        let _m = b.use_stream(&main);
        g.capture_begin().unwrap();
        b.add_scalar(&x, 1.0).unwrap();
        b.record_event(&ev).unwrap();
    }
    // This thread's current stream is the default one, which cannot join.
    let e = b.wait_event(&ev).unwrap_err();
    assert_eq!(driver_name(&e), Some("CUDA_ERROR_STREAM_CAPTURE_ISOLATION"));
    assert!(!b.is_capturing(&b.default_stream()).unwrap());
    // The capture is not harmed.
    let _m = b.use_stream(&main);
    g.capture_end().unwrap();
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![2.0]);
}
