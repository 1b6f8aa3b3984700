//! The reference semantics that are not covered by the more specific test files.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, GraphState, NodeKind,
    Result,
};
use accel_graph_mock::MockBackend;

#[test]
fn capture_records_and_replay_runs() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 5]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))
        .unwrap()
        .unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![0.0; 5]);
    for k in 1..=3 {
        g.replay().unwrap();
        assert_eq!(b.download(&x).unwrap(), vec![k as f32; 5]);
    }
}

#[test]
fn the_default_stream_cannot_be_captured() {
    let b = MockBackend::new();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    assert!(matches!(
        g.capture_begin(),
        Err(GraphError::StreamNotCapturable)
    ));
    assert_eq!(g.state(), GraphState::Empty);
    assert_eq!(b.memory_stats().pools, 0, "no pool hold left behind");
}

#[test]
fn two_graphs_cannot_capture_one_stream() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let _c = b.use_stream(&s);
    let mut g1 = b.graph(GraphOptions::new()).unwrap();
    let mut g2 = b.graph(GraphOptions::new()).unwrap();
    g1.capture_begin().unwrap();
    match g2.capture_begin() {
        Err(GraphError::Driver { name, .. }) => assert_eq!(name, "CUDA_ERROR_ILLEGAL_STATE"),
        other => panic!("{other:?}"),
    }
    g1.capture_end().unwrap();
}

#[test]
fn replay_on_another_stream_and_on_the_default_stream() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let (s1, s2) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s1, &mut g, || b.scale(&x, 2.0))
        .unwrap()
        .unwrap();
    {
        let _c = b.use_stream(&s2);
        g.replay().unwrap();
    }
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![4.0]);
}

#[test]
fn replay_into_a_capturing_stream_is_unsupported() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let s = b.new_stream().unwrap();
    let mut inner = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut inner, || b.scale(&x, 2.0))
        .unwrap()
        .unwrap();
    let mut outer = b.graph(GraphOptions::new()).unwrap();
    let r = b.capture_on(&s, &mut outer, || inner.replay()).unwrap();
    assert!(matches!(r, Err(GraphError::Unsupported { .. })), "{r:?}");
    assert_eq!(b.download(&x).unwrap(), vec![1.0]);
}

#[test]
fn keep_graph_and_introspection() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0; 3]).unwrap();
    let y = b.alloc_from(&[0.0; 3]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new().keep_graph(true)).unwrap();
    let k = 5;
    b.capture_on(&s, &mut g, || -> Result<()> {
        for _ in 0..k {
            b.add_scalar(&x, 1.0)?;
        }
        b.copy(&y, &x)
    })
    .unwrap()
    .unwrap();
    assert_eq!(g.state(), GraphState::Captured);
    let t = g.nodes().unwrap();
    assert_eq!(t.count(NodeKind::Kernel), k);
    assert_eq!(t.count(NodeKind::Memcpy), 1);
    assert!(t.is_chain());
    assert_eq!(b.counters().instantiations, 0);
    g.replay().unwrap(); // lazy instantiate
    assert_eq!(g.state(), GraphState::Ready);
    g.instantiate().unwrap(); // again: fine
    assert_eq!(b.counters().instantiations, 2);
    assert_eq!(b.download(&y).unwrap(), vec![6.0; 3]);
}

#[test]
fn without_keep_graph_the_raw_graph_is_gone_unless_debug_mode() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g, || b.fill(&x, 0.0))
        .unwrap()
        .unwrap();
    assert!(matches!(g.nodes(), Err(GraphError::RawGraphUnavailable)));
    let dir = std::env::temp_dir().join(format!("accel-graph-mock-sem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("g.dot");
    assert!(matches!(
        g.debug_dump(&path),
        Err(GraphError::DebugModeNotEnabled)
    ));
    let mut d = b.graph(GraphOptions::new()).unwrap();
    d.enable_debug_mode();
    b.capture_on(&s, &mut d, || b.fill(&x, 0.0))
        .unwrap()
        .unwrap();
    d.debug_dump(&path).unwrap();
    let dot = std::fs::read_to_string(&path).unwrap();
    assert!(dot.contains("Memset") && dot.contains("fill"), "{dot}");
    assert_eq!(d.nodes().unwrap().count(NodeKind::Memset), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn host_callbacks_are_captured_and_replayed() {
    let b = MockBackend::new();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    b.host_callback(Arc::new(move || {
        h.fetch_add(1, Ordering::SeqCst);
    }))
    .unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new().keep_graph(true)).unwrap();
    let h = Arc::clone(&hits);
    b.capture_on(&s, &mut g, || {
        b.host_callback(Arc::new(move || {
            h.fetch_add(10, Ordering::SeqCst);
        }))
    })
    .unwrap()
    .unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(g.nodes().unwrap().count(NodeKind::Host), 1);
    g.replay().unwrap();
    g.replay().unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 21);
}

#[test]
fn a_host_callback_may_use_the_backend() {
    let b = MockBackend::new();
    let x = Arc::new(b.alloc_from(&[0.0]).unwrap());
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    let (b2, x2) = (b.clone(), Arc::clone(&x));
    b.capture_on(&s, &mut g, || {
        b.host_callback(Arc::new(move || {
            b2.add_scalar(&x2, 1.0).unwrap();
        }))
    })
    .unwrap()
    .unwrap();
    g.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![1.0]);
}

#[test]
fn empty_capture_replays_as_a_no_op() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g, || ()).unwrap();
    g.replay().unwrap();
    assert_eq!(b.counters().nodes_replayed, 0);
}

#[test]
fn length_mismatches_are_typed_errors() {
    let b = MockBackend::new();
    let (x, y) = (b.alloc(2).unwrap(), b.alloc(3).unwrap());
    assert!(matches!(
        b.copy(&x, &y),
        Err(GraphError::LengthMismatch {
            op: "copy",
            expected: 2,
            got: 3
        })
    ));
    assert!(matches!(
        b.axpy(&x, 1.0, &y),
        Err(GraphError::LengthMismatch { op: "axpy", .. })
    ));
    assert!(matches!(
        b.upload(&x, &[1.0]),
        Err(GraphError::LengthMismatch { op: "upload", .. })
    ));
}

#[test]
fn objects_of_another_instance_are_foreign() {
    let a = MockBackend::new();
    let b = MockBackend::new();
    let xa = a.alloc(1).unwrap();
    let sa = a.new_stream().unwrap();
    let ea = a.new_event().unwrap();
    let foreign = |r: Result<()>, what: &str| match r {
        Err(GraphError::ForeignObject { what: w }) => assert_eq!(w, what),
        other => panic!("{other:?}"),
    };
    foreign(b.add_scalar(&xa, 1.0), "buffer");
    foreign(b.download(&xa).map(|_| ()), "buffer");
    foreign(b.record_event(&ea), "event");
    foreign(b.wait_event(&ea), "event");
    foreign(b.stream_synchronize(&sa), "stream");
    foreign(b.is_capturing(&sa).map(|_| ()), "stream");
    // A foreign stream made current: ops and capture fail, nothing panics.
    let _c = b.use_stream(&sa);
    let xb = b.alloc(1);
    assert!(matches!(
        xb,
        Err(GraphError::ForeignObject { what: "stream" })
    ));
    let mut g = b.graph(GraphOptions::new()).unwrap();
    assert!(matches!(
        g.capture_begin(),
        Err(GraphError::ForeignObject { .. })
    ));
}

#[test]
fn huge_allocations_fail_cleanly() {
    let b = MockBackend::new();
    assert!(matches!(
        b.alloc(usize::MAX),
        Err(GraphError::OutOfMemory { .. })
    ));
    assert!(matches!(
        b.alloc(usize::MAX / 8),
        Err(GraphError::OutOfMemory { .. })
    ));
    assert_eq!(b.memory_stats(), Default::default());
}

#[test]
fn misuse_of_the_graph_is_typed() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let _c = b.use_stream(&s);
    let mut g = b.graph(GraphOptions::new()).unwrap();
    assert!(matches!(g.replay(), Err(GraphError::NotCaptured { .. })));
    assert!(matches!(g.pool(), Err(GraphError::NotCaptured { .. })));
    assert!(matches!(g.capture_end(), Err(GraphError::NotCapturing)));
    g.capture_begin().unwrap();
    assert!(matches!(
        g.capture_begin(),
        Err(GraphError::AlreadyCapturing)
    ));
    g.capture_end().unwrap();
    assert!(matches!(
        g.capture_begin(),
        Err(GraphError::AlreadyCaptured)
    ));
    assert!(matches!(
        g.instantiate(),
        Err(GraphError::InstantiateRequiresKeepGraph)
    ));
    g.reset();
    g.capture_begin().unwrap();
    g.capture_end().unwrap();
}

#[test]
fn streams_and_backends_are_usable_from_many_threads() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 8]).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let s = b.new_stream().unwrap();
                let y = b.alloc_from(&[0.0; 8]).unwrap();
                // Thread-local captures: the other threads' allocations and downloads, made
                // while this thread captures, are allowed (a global capture would forbid them
                // and be invalidated, as on CUDA).
                let mut g = b
                    .graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))
                    .unwrap();
                b.capture_on(&s, &mut g, || b.add_scalar(&y, 1.0))
                    .unwrap()
                    .unwrap();
                for _ in 0..10 {
                    g.replay().unwrap();
                }
                assert_eq!(b.download(&y).unwrap(), vec![10.0; 8]);
                let _ = b.download(&x).unwrap();
            });
        }
    });
}
