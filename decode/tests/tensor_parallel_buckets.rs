//! The engine's buckets on each rank of a tensor-parallel model (mock, threads as ranks):
//! pre-capture into each rank's pool, eager fallback when a capture fails on one rank — alone
//! (its instantiation) or for every rank (a failure inside the captured body discards the
//! peers' captures too) — with results still equal to the host reference of the partitioning.

mod common;

use accel_graph::{GraphError, Result, mock::FaultSite};
use accel_graph_decode::{BucketState, Config, StepMode};
use common::{
    bits, options, run_engine,
    tp::{run_ranks, run_tp_reference},
};

#[test]
fn every_rank_precaptures_its_buckets_into_its_pool() -> Result<()> {
    let per_rank = run_ranks(Config::tiny(), 2, |rank| {
        let engine = rank.engine_random::<f32>(common::SEED, options().precapture_all())?;
        let summary = engine.summary();
        let states: Vec<_> = summary
            .buckets
            .iter()
            .map(|t| (t.bucket, t.state))
            .collect();
        let growth: Vec<usize> = summary
            .buckets
            .iter()
            .rev()
            .map(|t| t.pool_growth_bytes)
            .collect();
        let mut engine = engine;
        let (run, replays) = run_engine(&mut engine, 3, 8)?;
        Ok((states, growth, run, replays))
    })?;
    let reference = run_tp_reference::<f32>(Config::tiny(), 2, 3, 8);
    for (rank, (states, growth, run, replays)) in per_rank.into_iter().enumerate() {
        assert!(
            states.iter().all(|&(_, s)| s == BucketState::Captured),
            "rank {rank}: {states:?}"
        );
        assert_eq!(states.len(), 4);
        assert!(
            growth[0] > 0,
            "rank {rank}: the largest bucket fills the pool"
        );
        assert!(
            growth[1..].iter().all(|&g| g == 0),
            "rank {rank}: smaller buckets reuse it: {growth:?}"
        );
        assert_eq!(replays, 8);
        assert_eq!(run.tokens, reference.tokens);
        assert_eq!(bits(&run.logits), bits(&reference.logits));
    }
    Ok(())
}

#[test]
fn an_instantiation_failing_on_one_rank_leaves_that_rank_eager_and_the_results_exact() -> Result<()>
{
    let (batch, steps) = (3, 10);
    let per_rank = run_ranks(Config::tiny(), 2, |rank| {
        let mut engine = rank.engine_random::<f32>(common::SEED, options())?;
        if rank.rank() == 1 {
            // After the ranks compared their captures: only this rank's graph is missing.
            rank.backend().inject_fault(FaultSite::Instantiate, 1);
        }
        let (run, replays) = run_engine(&mut engine, batch, steps)?;
        let t = engine.bucket_telemetry(4).cloned();
        Ok((run, replays, t))
    })?;
    let reference = run_tp_reference::<f32>(Config::tiny(), 2, batch, steps);
    let states: Vec<_> = per_rank
        .iter()
        .map(|(_, replays, t)| (*replays, t.as_ref().map(|t| t.state)))
        .collect();
    // Rank 0 replays its graph while rank 1 runs the same step eagerly: their all-reduces
    // still meet in order.
    assert_eq!(
        states,
        [
            (steps, Some(BucketState::Captured)),
            (0, Some(BucketState::Failed))
        ]
    );
    for (run, _, _) in &per_rank {
        assert_eq!(run.tokens, reference.tokens);
        assert_eq!(bits(&run.logits), bits(&reference.logits));
    }
    Ok(())
}

#[test]
fn a_capture_failing_inside_one_ranks_body_is_discarded_on_every_rank() -> Result<()> {
    let (batch, steps) = (2, 6);
    let per_rank = run_ranks(Config::tiny(), 2, |rank| {
        let mut engine = rank.engine_random::<f32>(common::SEED, options().warmup_iters(0))?;
        if rank.rank() == 1 {
            // Bucket 2's first step makes its three static buffers, then captures the step,
            // whose first allocation (an activation, from the graph's pool) fails.
            rank.backend().inject_fault(FaultSite::Alloc, 4);
        }
        let (run, replays) = run_engine(&mut engine, batch, steps)?;
        let t = engine.bucket_telemetry(2).cloned();
        Ok((run, replays, t))
    })?;
    let reference = run_tp_reference::<f32>(Config::tiny(), 2, batch, steps);
    for (rank, (run, replays, t)) in per_rank.iter().enumerate() {
        let t = t.as_ref().expect("bucket 2 ran");
        // Rank 0's capture was fine, but a graph whose peer has none would hang at replay.
        // Rank 1's capture failed before it recorded an all-reduce, so the library could not
        // know it belonged to the communicator: the engine tells the peers, and rank 0
        // discards its capture at once (not after the timeout) and runs eagerly too.
        assert_eq!(
            (*replays, t.state, t.eager_steps),
            (0, BucketState::Failed, steps as u64),
            "rank {rank}: {:?}",
            t.last_failure
        );
        if rank == 0 {
            let why = t.last_failure.as_deref().unwrap_or_default();
            assert!(why.contains("rank 1 discarded its capture"), "{why}");
        }
        assert_eq!(run.tokens, reference.tokens);
        assert_eq!(bits(&run.logits), bits(&reference.logits));
    }
    Ok(())
}

#[test]
fn a_bad_step_is_refused_on_every_rank_and_the_ranks_go_on() -> Result<()> {
    let c = Config::tiny();
    let per_rank = run_ranks(c, 2, |rank| {
        let mut engine = rank.engine_random::<f32>(common::SEED, options())?;
        // A token past the vocabulary: refused before any work, so no rank waits for another.
        let bad = engine.step(&[accel_graph_decode::StepRow::new(0, 999, 0)]);
        let good = engine.step(&common::rows(&c, 0, 1, &[]))?;
        Ok((bad.err(), good.mode))
    })?;
    for (bad, mode) in per_rank {
        assert!(
            matches!(bad, Some(GraphError::ArgumentMismatch(_))),
            "{bad:?}"
        );
        assert_eq!(mode, StepMode::Replayed);
    }
    Ok(())
}
