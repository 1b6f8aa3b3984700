//! The engine's buckets on the mock: padding, lazy capture, pre-capture largest first into one
//! pool, eager fallback when a capture fails (a fault injected into the mock), the telemetry
//! that reports each, and steps whose rows change from step to step.

mod common;

use accel_graph::{
    GraphError, Result,
    mock::{FaultSite, MockBackend},
};
use accel_graph_decode::{BucketState, Config, StepMode, StepRow, model::Reference};
use common::{SEED, engine, options, rows, run_engine, run_reference};

#[test]
fn steps_run_in_the_smallest_bucket_that_holds_them() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options())?;
    let picks: Vec<Option<usize>> = [0, 1, 2, 3, 5, 8, 9]
        .iter()
        .map(|&n| e.bucket_for(n))
        .collect();
    assert_eq!(
        picks,
        [None, Some(1), Some(2), Some(4), Some(8), Some(8), None]
    );
    assert_eq!(e.slots(), 8);
    let c = Config::tiny();
    for (n, bucket) in [(3, 4), (5, 8), (1, 1), (3, 4)] {
        let out = e.step(&rows(&c, 0, n, &[]))?;
        assert_eq!((out.bucket, out.tokens.len()), (bucket, n));
    }
    let s = e.summary();
    let four = s.bucket(4).expect("bucket 4 ran");
    assert_eq!((four.rows, four.padded_rows, four.replays), (6, 2, 2));
    let eight = s.bucket(8).expect("bucket 8 ran");
    assert_eq!((eight.rows, eight.padded_rows), (5, 3));
    assert_eq!(s.bucket(1).map(|t| t.padded_rows), Some(0));
    assert!(
        s.bucket(2).is_none(),
        "bucket 2 never ran, so it was never made"
    );
    Ok(())
}

#[test]
fn buckets_are_captured_lazily_on_their_first_step() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options())?;
    assert!(e.summary().buckets.is_empty());
    let c = Config::tiny();
    let first = e.step(&rows(&c, 0, 1, &[]))?;
    assert_eq!(first.mode, StepMode::Replayed);
    let s = e.summary();
    assert_eq!(s.buckets.len(), 1);
    let one = &s.buckets[0];
    assert_eq!(
        (one.bucket, one.state, one.replays),
        (1, BucketState::Captured, 1)
    );
    assert!(one.capture.is_some() && one.instantiate.is_some());
    assert!(
        one.pool_growth_bytes > 0,
        "activations come from the graph pool"
    );
    assert!(e.graph(1).is_some() && e.graph(2).is_none());
    // A second step of the same size replays the same graph: no new capture.
    e.step(&rows(&c, 1, 1, &first.tokens))?;
    assert_eq!(
        e.summary()
            .bucket(1)
            .map(|t| (t.replays, t.capture_failures)),
        Some((2, 0))
    );
    Ok(())
}

#[test]
fn precapture_goes_largest_first_and_smaller_buckets_reuse_the_pool() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options())?;
    let mut order = Vec::new();
    let captured = e.precapture_with(&[1, 4, 8, 2], |p| {
        order.push((p.bucket, p.captured, p.done, p.total))
    })?;
    assert_eq!(captured, 4);
    assert_eq!(
        order,
        [
            (8, true, 1, 4),
            (4, true, 2, 4),
            (2, true, 3, 4),
            (1, true, 4, 4)
        ]
    );
    let s = e.summary();
    let growth: Vec<usize> = [8, 4, 2, 1]
        .iter()
        .map(|&k| s.bucket(k).map_or(usize::MAX, |t| t.pool_growth_bytes))
        .collect();
    assert!(
        growth[0] > 0,
        "the largest bucket takes its activations from the pool"
    );
    assert!(
        growth[1..].iter().all(|&g| g == 0),
        "smaller buckets reuse them: {growth:?}"
    );
    assert_eq!(s.pool_reserved_bytes, growth[0]);
    for k in [1, 2, 4, 8] {
        assert_eq!(
            accel_graph::AcceleratorGraph::pool(e.graph(k).expect("captured"))?,
            e.pool()
        );
    }
    // Pre-captured buckets replay from their first step.
    let c = Config::tiny();
    assert_eq!(e.step(&rows(&c, 0, 2, &[]))?.mode, StepMode::Replayed);
    // Made with the option, the engine pre-captures as it is made.
    let e2 = engine::<_, f32>(&b, options().precapture([2, 8]))?;
    let states: Vec<_> = e2
        .summary()
        .buckets
        .iter()
        .map(|t| (t.bucket, t.state))
        .collect();
    assert_eq!(
        states,
        [(2, BucketState::Captured), (8, BucketState::Captured)]
    );
    Ok(())
}

#[test]
fn a_failed_capture_runs_its_bucket_eagerly_and_is_reported() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options())?;
    // The next graph instantiation fails: bucket 4's, on its first step.
    b.inject_fault(FaultSite::Instantiate, 1);
    let batch = 3;
    let steps = 10;
    let (run, replays) = run_engine(&mut e, batch, steps)?;
    assert_eq!(replays, 0);
    assert_eq!(
        run,
        run_reference::<f32>(Config::tiny(), batch, steps),
        "eager results are the reference's"
    );
    let t = e.bucket_telemetry(4).expect("bucket 4 ran").clone();
    assert_eq!(t.state, BucketState::Failed);
    assert_eq!(
        (t.capture_failures, t.eager_steps, t.replays),
        (1, steps as u64, 0)
    );
    let message = t.last_failure.expect("the failure is kept");
    assert!(message.contains("instantiate"), "{message}");
    assert!(e.graph(4).is_none());
    // Other buckets still capture (the fault was one-shot), and the failure shows.
    let c = Config::tiny();
    assert_eq!(e.step(&rows(&c, 0, 1, &[]))?.mode, StepMode::Replayed);
    let s = e.summary();
    assert_eq!(
        (s.capture_failures(), s.eager_steps(), s.replays()),
        (1, steps as u64, 1)
    );
    let table = s.to_string();
    assert!(
        table.contains("FAILED") && table.contains("last capture failure"),
        "{table}"
    );
    // A failure while pre-capturing is reported the same way, not returned.
    b.inject_fault(FaultSite::Instantiate, 2);
    let e2 = engine::<_, f32>(&b, options().precapture_all())?;
    let states: Vec<_> = e2
        .summary()
        .buckets
        .iter()
        .map(|t| (t.bucket, t.state))
        .collect();
    assert_eq!(
        states,
        [
            (1, BucketState::Captured),
            (2, BucketState::Captured),
            (4, BucketState::Failed),
            (8, BucketState::Captured)
        ]
    );
    Ok(())
}

#[test]
fn a_capture_that_fails_inside_its_body_is_discarded_and_the_bucket_runs_eagerly() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options().warmup_iters(0))?;
    // Bucket 2's first step makes its three static buffers (per-step input, logits, next
    // tokens), then captures the step, whose first allocation (an activation, from the
    // graph's pool) fails: the capture is discarded, no stream stays capturing.
    b.inject_fault(FaultSite::Alloc, 4);
    let (run, replays) = run_engine(&mut e, 2, 6)?;
    assert_eq!(replays, 0);
    assert_eq!(run, run_reference::<f32>(Config::tiny(), 2, 6));
    let t = e.bucket_telemetry(2).expect("bucket 2 ran");
    assert_eq!(
        (t.state, t.capture_failures, t.eager_steps),
        (BucketState::Failed, 1, 6)
    );
    assert!(
        t.last_failure
            .as_deref()
            .is_some_and(|m| m.contains("alloc")),
        "{t:?}"
    );
    assert!(!accel_graph::Backend::is_capturing(&b, e.run_stream())?);
    Ok(())
}

#[test]
fn graphs_off_runs_every_step_eagerly() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options().graphs(false))?;
    let (_, replays) = run_engine(&mut e, 2, 3)?;
    assert_eq!(replays, 0);
    let t = e.bucket_telemetry(2).expect("bucket 2 ran");
    assert_eq!(
        (t.state, t.eager_steps, t.capture),
        (BucketState::Eager, 3, None)
    );
    assert!(matches!(
        e.capture_bucket(2),
        Err(GraphError::ArgumentMismatch(_))
    ));
    assert_eq!(e.summary().pool_reserved_bytes, 0);
    Ok(())
}

#[test]
fn rows_may_change_from_step_to_step() -> Result<()> {
    // Sequences keep their cache slot while the batch around them changes size and order:
    // each step equals the reference's for the same rows, bit for bit, whatever the bucket.
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options())?;
    let mut reference = Reference::<f32>::random(Config::tiny(), SEED, 8);
    let mut next = [1u32, 2, 3, 4, 5, 6];
    let mut len = [0u32; 6];
    let schedule: [&[usize]; 6] = [
        &[0, 1, 2],
        &[2, 0],
        &[5, 4, 3, 1, 0],
        &[3],
        &[0, 1, 2, 3, 4, 5],
        &[4, 2],
    ];
    for (t, live) in schedule.iter().enumerate() {
        let step: Vec<StepRow> = live
            .iter()
            .map(|&s| StepRow::new(s as u32, next[s], len[s]))
            .collect();
        let got = e.step(&step)?;
        let want = reference.step(&step)?;
        assert_eq!(got.tokens, want.tokens, "step {t}");
        assert_eq!(e.last_logits()?, want.logits, "step {t}");
        for (i, &s) in live.iter().enumerate() {
            next[s] = got.tokens[i];
            len[s] += 1;
            assert_eq!(e.slot_len(s as u32), Some(len[s]));
        }
    }
    // Rewinding a slot to position 0 starts a new sequence there.
    let restart = [StepRow::new(0, 42, 0)];
    assert_eq!(e.step(&restart)?.tokens, reference.step(&restart)?.tokens);
    assert_eq!(e.slot_len(0), Some(1));
    Ok(())
}
