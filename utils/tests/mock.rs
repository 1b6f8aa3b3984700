//! Mock-only checks of the seed utilities: what the mock's counters and fault injection let a
//! test see beyond the checks of the conformance suite (its §7 cases, which every backend
//! runs), and a few details those cases leave open (capture order, the shared stream and mode
//! of the full-iteration wrapper, vLLM's default sizes).

use std::{
    cell::Cell,
    panic::{AssertUnwindSafe, catch_unwind},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, DeviceBuffer, GraphError, GraphState, PortableOps,
    Result,
};
use accel_graph_mock::{FaultSite, MockBackend};
use accel_graph_utils::{
    BucketedCacheOptions, BucketedGraphCache, Callable, CaptureSizes, FullGraphWrapper,
    GraphedCallableOptions, Stage, make_graphed_callable, make_graphed_callables,
    release_shared_resources, shared_capture_stream,
};

type Buf = accel_graph_mock::MockBuffer;

/// `y = 2x + 1` in three portable ops.
fn double_plus_one(b: &MockBackend, x: &[&Buf]) -> Result<Vec<Buf>> {
    let y = b.alloc(x[0].len())?;
    b.copy(&y, x[0])?;
    b.scale(&y, 2.0)?;
    b.add_scalar(&y, 1.0)?;
    Ok(vec![y])
}

#[test]
fn a_graphed_call_is_one_replay_plus_copies_of_foreign_inputs() -> Result<()> {
    let backend = MockBackend::new();
    let sample = vec![backend.alloc_from(&[0.0; 8])?];
    let mut g = make_graphed_callable(
        &backend,
        double_plus_one,
        sample,
        GraphedCallableOptions::new(),
    )?;
    let c = backend.counters();
    // 3 warmup calls of 3 ops run eagerly; the capture records 3 ops.
    assert_eq!((c.eager_ops, c.captured_ops, c.replays), (9, 3, 0));

    backend.reset_counters();
    let x = backend.alloc_from(&[1.0; 8])?;
    drop(g.call(&[&x])?);
    let c = backend.counters();
    assert_eq!((c.eager_ops, c.replays, c.nodes_replayed), (1, 1, 3)); // the copy-in, then one replay

    backend.reset_counters();
    let static_x = g.static_inputs()[0].clone();
    drop(g.call(&[&static_x])?);
    let c = backend.counters();
    assert_eq!((c.eager_ops, c.replays), (0, 1)); // the static input itself: no copy
    Ok(())
}

#[test]
fn graphs_are_captured_in_order_on_one_pool_and_release_it() -> Result<()> {
    let backend = MockBackend::new();
    let order = std::cell::RefCell::new(Vec::new());
    let make = |name: &'static str| -> Box<dyn Callable<MockBackend> + '_> {
        let order = &order;
        Box::new(move |b: &MockBackend, x: &[&Buf]| {
            if b.is_capturing(&b.current_stream())? {
                order.borrow_mut().push(name);
            }
            double_plus_one(b, x)
        })
    };
    let samples = vec![
        vec![backend.alloc(4)?],
        vec![backend.alloc(4)?],
        vec![backend.alloc(4)?],
    ];
    let graphed = make_graphed_callables(
        &backend,
        vec![make("fwd1"), make("fwd2"), make("bwd2")],
        samples,
        GraphedCallableOptions::new().warmup_iters(1),
    )?;
    assert_eq!(*order.borrow(), ["fwd1", "fwd2", "bwd2"]);
    let pool = graphed[0].pool()?;
    assert!(pool.is_user());
    assert!(graphed.iter().all(|g| g.pool().ok() == Some(pool)));
    assert_eq!(graphed[2].index(), 2);
    assert!(backend.memory_stats().pool_reserved_bytes > 0);
    drop(graphed);
    assert_eq!(
        backend.memory_stats().pool_reserved_bytes,
        0,
        "pool memory must be released"
    );
    assert!(backend.memory_stats().pools.is_empty());
    Ok(())
}

#[test]
fn a_failing_capture_leaves_nothing_capturing() -> Result<()> {
    let backend = MockBackend::new();
    let calls = Cell::new(0);
    // Fails on its 4th call: the capture after 3 warmup calls.
    let flaky = |b: &MockBackend, x: &[&Buf]| {
        calls.set(calls.get() + 1);
        if calls.get() == 4 {
            return Err(GraphError::Unsupported {
                what: "flaky".into(),
            });
        }
        double_plus_one(b, x)
    };
    let sample = vec![backend.alloc(4)?];
    let err =
        make_graphed_callable(&backend, flaky, sample, GraphedCallableOptions::new()).unwrap_err();
    assert!(matches!(err, GraphError::Unsupported { .. }));
    assert!(!backend.any_capture_active());

    // A panic inside the capture unwinds through make_graphed_callables cleanly.
    let panicky = |b: &MockBackend, x: &[&Buf]| {
        if b.is_capturing(&b.current_stream())? {
            panic!("boom");
        }
        double_plus_one(b, x)
    };
    let sample = vec![backend.alloc(4)?];
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        make_graphed_callable(&backend, panicky, sample, GraphedCallableOptions::new())
    }));
    assert!(unwound.is_err());
    assert!(!backend.any_capture_active());

    // An instantiation fault surfaces as the error, and the backend keeps working.
    backend.inject_fault(FaultSite::Instantiate, 1);
    let sample = vec![backend.alloc(4)?];
    let err = make_graphed_callable(
        &backend,
        double_plus_one,
        sample,
        GraphedCallableOptions::new(),
    )
    .unwrap_err();
    assert!(matches!(err, GraphError::InjectedFault { .. }));
    assert!(!backend.any_capture_active());
    let sample = vec![backend.alloc_from(&[1.0; 4])?];
    let mut g = make_graphed_callable(
        &backend,
        double_plus_one,
        sample,
        GraphedCallableOptions::new(),
    )?;
    let x = backend.alloc_from(&[2.0; 4])?;
    assert_eq!(backend.download(&g.call(&[&x])?[0])?, vec![5.0; 4]);
    Ok(())
}

#[test]
fn full_graph_captures_on_the_shared_stream_in_thread_local_mode() -> Result<()> {
    let backend = MockBackend::new();
    let seen = Cell::new(None);
    let step = |b: &MockBackend, _: Stage, mbs: &[&[&Buf]]| {
        if b.is_capturing(&b.current_stream())? {
            seen.set(Some(b.current_stream()));
        }
        double_plus_one(b, mbs[0])
    };
    let mut wrapper = FullGraphWrapper::new(&backend, step)?.warmup_steps(0);
    let x = backend.alloc_from(&[1.0; 4])?;
    let out = wrapper.run(Stage::Training, &[&[&x]])?;
    assert_eq!(backend.download(&out[0])?, vec![3.0; 4]);
    let graph = wrapper.graph(Stage::Training).expect("captured");
    assert_eq!(graph.capture_error_mode(), CaptureErrorMode::ThreadLocal);
    assert_eq!(graph.state(), GraphState::Ready);
    drop(wrapper);
    assert_eq!(seen.take(), Some(shared_capture_stream(&backend)?));
    release_shared_resources(&backend);
    Ok(())
}

#[test]
fn vllm_default_sizes_capture_largest_first_into_one_pool() -> Result<()> {
    let backend = MockBackend::new();
    let order = std::cell::RefCell::new(Vec::new());
    let model = |b: &MockBackend, x: &[&Buf]| {
        if b.is_capturing(&b.current_stream())? {
            order.borrow_mut().push(x[0].len() / 4);
        }
        double_plus_one(b, x)
    };
    let mut cache = BucketedGraphCache::new(
        &backend,
        model,
        CaptureSizes::vllm_default(),
        vec![4],
        BucketedCacheOptions::new(),
    )?;
    assert_eq!(cache.capture_all()?, 35);
    assert_eq!(order.borrow().first(), Some(&256));
    assert_eq!(order.borrow().last(), Some(&1));
    // Each bucket's temporaries and outputs come from the one pool.
    assert_eq!(backend.memory_stats().pools.len(), 1);
    let run = cache.run(&[&vec![1.0; 4 * 100]])?;
    assert_eq!(run.bucket(), Some(104));
    assert_eq!(run.download(0)?, vec![3.0; 400]);
    drop(run);
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.pads, stats.padded_elements), (1, 1, 16));
    assert_eq!(
        stats.to_string(),
        "runs 1, hits 1, captures 35, padded runs 1 (16 padding elements), eager fallbacks 0, \
         instantiations 35, updates 0"
    );
    cache.reset();
    assert!(cache.captured_buckets().is_empty());
    assert_eq!(backend.memory_stats().pool_reserved_bytes, 0);
    Ok(())
}

/// `capture_all` instantiates on a second thread while the next bucket captures (the default)
/// or in line: the same buckets, counters and replays either way, with the progress reported
/// per captured bucket, largest first.
#[test]
fn capture_all_instantiating_in_the_background_equals_in_line() -> Result<()> {
    let sizes = CaptureSizes::new([1, 2, 4, 8, 16])?;
    let mut results = Vec::new();
    for background in [true, false] {
        let backend = MockBackend::new();
        let mut cache = BucketedGraphCache::new(
            &backend,
            double_plus_one,
            sizes.clone(),
            vec![4],
            BucketedCacheOptions::new().background_instantiate(background),
        )?;
        let mut seen = Vec::new();
        assert_eq!(cache.capture_all_with_progress(|p| seen.push(p.bucket))?, 5);
        assert_eq!(seen, vec![16, 8, 4, 2, 1]);
        assert_eq!(cache.captured_buckets(), vec![1, 2, 4, 8, 16]);
        let mut outputs = Vec::new();
        for rows in [1usize, 3, 16] {
            let input: Vec<f32> = (0..rows * 4).map(|i| i as f32).collect();
            let run = cache.run(&[&input])?;
            outputs.push(run.download(0)?);
        }
        let stats = cache.stats();
        assert_eq!(
            (stats.captures, stats.instantiations, stats.hits),
            (5, 5, 3)
        );
        assert_eq!(cache.capture_all()?, 0, "nothing left to capture");
        results.push(outputs);
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0][0], vec![1.0, 3.0, 5.0, 7.0]);
    Ok(())
}

/// A step that fails for one bucket while others instantiate in the background: the error
/// comes back, the buckets instantiated before it stay usable, and the failed one is captured
/// again (and fails again) when it is first run.
#[test]
fn a_failing_bucket_in_a_background_capture_all_keeps_the_others() -> Result<()> {
    let backend = MockBackend::new();
    let step = |b: &MockBackend, x: &[&Buf]| {
        if x[0].len() == 4 * 2 {
            return Err(GraphError::ArgumentMismatch(
                "bucket 2 fails on purpose".into(),
            ));
        }
        double_plus_one(b, x)
    };
    let mut cache = BucketedGraphCache::new(
        &backend,
        step,
        CaptureSizes::new([1, 2, 4, 8])?,
        vec![4],
        BucketedCacheOptions::new(),
    )?;
    assert!(matches!(
        cache.capture_all(),
        Err(GraphError::ArgumentMismatch(_))
    ));
    assert_eq!(cache.captured_buckets(), vec![4, 8]);
    assert_eq!(cache.run(&[&[1.0; 16]])?.download(0)?, vec![3.0; 16]);
    assert!(cache.run(&[&[1.0; 8]]).is_err());
    assert!(!backend.is_capturing(&backend.current_stream())?);
    Ok(())
}
