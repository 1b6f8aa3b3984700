//! A panic inside `capture(|| ...)` leaves nothing capturing and nothing leaked; dropping a
//! graph mid-capture ends the capture.

use std::panic::{AssertUnwindSafe, catch_unwind};

use accel_graph_api::{AcceleratorGraph, Backend, CaptureExt, GraphOptions, GraphState};
use accel_graph_mock::MockBackend;

#[test]
fn panic_inside_capture() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 4]).unwrap();
    let (main, side) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let fork = b.new_event().unwrap();
    let baseline = b.memory_stats();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    let out = catch_unwind(AssertUnwindSafe(|| {
        b.capture_on(&main, &mut g, || {
            let _tmp = b.alloc(64).unwrap(); // from the graph's pool
            b.add_scalar(&x, 1.0).unwrap();
            b.record_event(&fork).unwrap();
            let _s = b.use_stream(&side);
            b.wait_event(&fork).unwrap(); // side joins, never joined back
            b.scale(&x, 2.0).unwrap();
            panic!("user code panicked mid-capture");
        })
    }));
    assert!(out.is_err());
    assert_eq!(g.state(), GraphState::Empty);
    assert!(!b.is_capturing(&main).unwrap());
    assert!(!b.is_capturing(&side).unwrap());
    assert!(!b.any_capture_active());
    assert_eq!(b.memory_stats(), baseline, "nothing leaked");
    assert_eq!(b.current_stream(), b.default_stream());
    // The backend and the graph work.
    b.capture_on(&main, &mut g, || b.add_scalar(&x, 1.0))
        .unwrap()
        .unwrap();
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![1.0; 4]);
}

#[test]
fn panic_inside_capture_ext_capture() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let _cur = b.use_stream(&s);
    let mut g = b.graph(GraphOptions::new()).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| g.capture(|| panic!("boom"))));
    assert!(r.is_err());
    assert!(!b.is_capturing(&s).unwrap());
    assert_eq!(b.memory_stats(), Default::default());
}

#[test]
fn dropping_a_graph_mid_capture_ends_it() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let _cur = b.use_stream(&s);
    let mut g = b.graph(GraphOptions::new()).unwrap();
    g.capture_begin().unwrap();
    let tmp = b.alloc(16).unwrap();
    b.fill(&tmp, 1.0).unwrap();
    drop(g);
    assert!(!b.is_capturing(&s).unwrap());
    drop(tmp);
    assert_eq!(b.memory_stats(), Default::default());
    // The stream can be captured again.
    let mut g2 = b.graph(GraphOptions::new()).unwrap();
    g2.capture_begin().unwrap();
    g2.capture_end().unwrap();
}

#[test]
fn reset_mid_capture_ends_it() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let _cur = b.use_stream(&s);
    let mut g = b.graph(GraphOptions::new()).unwrap();
    g.capture_begin().unwrap();
    g.reset();
    assert!(!b.is_capturing(&s).unwrap());
    assert_eq!(g.state(), GraphState::Empty);
    g.capture_begin().unwrap();
    g.capture_end().unwrap();
}
