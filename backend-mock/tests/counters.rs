//! Counters: eager ops, captured ops, replays, nodes replayed, allocations, instantiations.

use std::sync::Arc;

use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions};
use accel_graph_mock::{MockBackend, MockCounters};

#[test]
fn counters_follow_the_work() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 3]).unwrap();
    let y = b.alloc(3).unwrap();
    b.fill(&y, 1.0).unwrap();
    b.axpy(&x, 2.0, &y).unwrap();
    b.host_callback(Arc::new(|| {})).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new().keep_graph(true)).unwrap();
    b.capture_on(&s, &mut g, || -> accel_graph_api::Result<()> {
        let _tmp = b.alloc(3)?;
        b.add_scalar(&x, 1.0)?;
        b.scale(&x, 2.0)?;
        b.copy(&y, &x)
    })
    .unwrap()
    .unwrap();
    assert_eq!(b.counters().instantiations, 0, "keep_graph: not yet");
    for _ in 0..4 {
        g.replay().unwrap();
    }
    assert_eq!(
        b.counters(),
        MockCounters {
            eager_ops: 3,
            captured_ops: 3,
            replays: 4,
            nodes_replayed: 12,
            allocations: 3,
            instantiations: 1,
        }
    );
    let clone = b.clone();
    clone.reset_counters();
    assert_eq!(b.counters(), MockCounters::default());
}

#[test]
fn counters_are_per_instance() {
    let a = MockBackend::new();
    let b = MockBackend::new();
    let x = a.alloc_from(&[0.0]).unwrap();
    a.add_scalar(&x, 1.0).unwrap();
    assert_eq!(a.counters().eager_ops, 1);
    assert_eq!(b.counters(), MockCounters::default());
}
