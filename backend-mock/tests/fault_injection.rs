//! Fault injection: the n-th alloc / instantiate / replay fails once, with a typed error; an
//! injected device fault breaks the device for good.

use accel_graph_api::{MemoryStats, prelude::*};
use accel_graph_mock::{FaultSite, MockBackend, MockBuffer, MockGraph};

fn captured(b: &MockBackend, keep: bool) -> (MockGraph, MockBuffer) {
    let x = b.alloc_from(&[0.0]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new().keep_graph(keep)).unwrap();
    b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0)).unwrap();
    (g, x)
}

#[test]
fn nth_alloc_fails_once() {
    let b = MockBackend::new();
    b.inject_fault(FaultSite::Alloc, 3);
    assert!(b.alloc::<f32>(4).is_ok());
    assert!(b.alloc::<f32>(4).is_ok());
    let err = b.alloc::<f32>(4).unwrap_err();
    assert!(matches!(
        err,
        GraphError::InjectedFault {
            operation: "alloc",
            count: 3
        }
    ));
    assert!(b.alloc::<f32>(4).is_ok());
    assert_eq!(b.counters().allocations, 3);
    assert_eq!(
        b.memory_stats().live_buffers,
        0,
        "nothing leaked by the failure"
    );
}

#[test]
fn alloc_fault_inside_capture_leaves_the_capture_usable() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.inject_fault(FaultSite::Alloc, 1);
    {
        let _current = b.use_stream(&s).unwrap();
        g.capture_begin().unwrap();
        assert!(matches!(
            b.alloc::<f32>(8),
            Err(GraphError::InjectedFault { .. })
        ));
        // The failed allocation did not invalidate the capture.
        b.add_scalar(&x, 1.0).unwrap();
        g.capture_end().unwrap();
    }
    assert_eq!(g.state(), GraphState::Ready);
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![1.0]);
}

#[test]
fn alloc_fault_in_a_scoped_capture_discards_it() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.inject_fault(FaultSite::Alloc, 1);
    let err = b.capture_on(&s, &mut g, || b.alloc::<f32>(8)).unwrap_err();
    assert!(matches!(err, GraphError::InjectedFault { .. }));
    assert_eq!(g.state(), GraphState::Empty);
    assert!(!b.is_capturing(&s).unwrap());
    assert_eq!(b.memory_stats(), MemoryStats::default());
}

#[test]
fn instantiate_fault_at_capture_end_discards_the_graph() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.inject_fault(FaultSite::Instantiate, 1);
    let err = b
        .capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))
        .unwrap_err();
    assert!(matches!(
        err,
        GraphError::InjectedFault {
            operation: "instantiate",
            ..
        }
    ));
    assert_eq!(g.state(), GraphState::Empty);
    assert!(!b.is_capturing(&s).unwrap());
    // Usable again.
    b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0)).unwrap();
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![1.0]);
}

#[test]
fn explicit_instantiate_fault_keeps_the_raw_graph() {
    let b = MockBackend::new();
    let (mut g, x) = captured(&b, true);
    b.inject_fault(FaultSite::Instantiate, 1);
    assert!(matches!(
        g.instantiate(),
        Err(GraphError::InjectedFault { .. })
    ));
    assert_eq!(g.state(), GraphState::Captured);
    g.instantiate().unwrap();
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![1.0]);
    assert_eq!(b.counters().instantiations, 1);
}

#[test]
fn nth_replay_fails_and_does_not_run() {
    let b = MockBackend::new();
    let (mut g, x) = captured(&b, false);
    b.inject_fault(FaultSite::Replay, 2);
    g.replay().unwrap();
    assert!(matches!(
        g.replay(),
        Err(GraphError::InjectedFault {
            operation: "replay",
            count: 2
        })
    ));
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![2.0]);
    assert_eq!(b.counters().replays, 2);
}

#[test]
fn a_device_fault_breaks_the_device_for_good() {
    let b = MockBackend::new();
    let (mut g, x) = captured(&b, false);
    b.inject_fault(FaultSite::DeviceFault, 1);
    assert!(matches!(g.replay(), Err(GraphError::DeviceFault { .. })));
    // Every later call reports it again.
    assert!(matches!(
        b.alloc::<f32>(1),
        Err(GraphError::DeviceFault { .. })
    ));
    assert!(matches!(
        b.download(&x),
        Err(GraphError::DeviceFault { .. })
    ));
    assert!(matches!(g.replay(), Err(GraphError::DeviceFault { .. })));
}

#[test]
fn disarming_works() {
    let b = MockBackend::new();
    b.inject_fault(FaultSite::Alloc, 1);
    b.inject_fault(FaultSite::Replay, 1);
    b.clear_faults();
    assert!(b.alloc::<f32>(1).is_ok());
    b.inject_fault(FaultSite::Alloc, 1);
    b.inject_fault(FaultSite::Alloc, 0);
    assert!(b.alloc::<f32>(1).is_ok());
}
