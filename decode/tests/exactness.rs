//! On the mock, the engine equals its host reference bit for bit — eagerly and through the
//! bucket graphs, for every batch size and its padding — in tokens at every step and in the
//! last step's logits.

mod common;

use accel_graph::{Result, half::bf16, mock::MockBackend};
use accel_graph_decode::{Config, DecodeElement, Engine};
use common::{
    Run, SEED, bits, chunked, engine_fused, odd, options, run_engine, run_reference, wide,
};

const STEPS: usize = 32;

fn eager_graphed_and_reference_agree<T: DecodeElement>(batch: usize) -> Result<()> {
    agree::<T>(Config::tiny(), batch, STEPS)
}

/// Both forms of the step — the fused small-batch projections and the GEMMs with RMSNorm and
/// SwiGLU apart — equal the reference.
fn agree<T: DecodeElement>(config: Config, batch: usize, steps: usize) -> Result<()> {
    let reference = run_reference::<T>(config, batch, steps);
    for fused_rows in [8, 0] {
        agree_with::<T>(config, batch, steps, fused_rows, &reference)?;
    }
    Ok(())
}

fn agree_with<T: DecodeElement>(
    config: Config,
    batch: usize,
    steps: usize,
    fused_rows: usize,
    reference: &Run<T>,
) -> Result<()> {
    let b = MockBackend::new();
    let mut eager = engine_fused::<_, T>(&b, config, options().graphs(false), fused_rows)?;
    let mut graphed = engine_fused::<_, T>(&b, config, options(), fused_rows)?;
    let (eager, eager_replays) = run_engine(&mut eager, batch, steps)?;
    let (graphed, replays) = run_engine(&mut graphed, batch, steps)?;
    assert_eq!((eager_replays, replays), (0, steps), "batch {batch}");
    assert_eq!(
        eager.tokens,
        reference.tokens,
        "{} batch {batch}: eager tokens",
        T::NAME
    );
    assert_eq!(
        graphed.tokens,
        reference.tokens,
        "{} batch {batch}: graphed tokens",
        T::NAME
    );
    // Bit for bit: compare the bits, so that even a NaN would have to match.
    assert_eq!(
        bits(&eager.logits),
        bits(&reference.logits),
        "batch {batch}: eager logits"
    );
    assert_eq!(
        bits(&graphed.logits),
        bits(&reference.logits),
        "batch {batch}: graphed logits"
    );
    assert_eq!(reference.logits.len(), batch * 256);
    // Greedy decoding of random weights still moves: not one token repeated throughout.
    let distinct: std::collections::HashSet<u32> =
        reference.tokens.iter().flatten().copied().collect();
    assert!(distinct.len() > 3, "tokens {:?}", reference.tokens);
    Ok(())
}

#[test]
fn f32_batch_1() -> Result<()> {
    eager_graphed_and_reference_agree::<f32>(1)
}

#[test]
fn f32_batch_3_padded_to_4() -> Result<()> {
    eager_graphed_and_reference_agree::<f32>(3)
}

#[test]
fn f32_batch_5_padded_to_8() -> Result<()> {
    eager_graphed_and_reference_agree::<f32>(5)
}

#[test]
fn bf16_batch_1() -> Result<()> {
    eager_graphed_and_reference_agree::<bf16>(1)
}

#[test]
fn bf16_batch_3_padded_to_4() -> Result<()> {
    eager_graphed_and_reference_agree::<bf16>(3)
}

#[test]
fn bf16_batch_5_padded_to_8() -> Result<()> {
    eager_graphed_and_reference_agree::<bf16>(5)
}

#[test]
fn attention_split_over_chunks() -> Result<()> {
    // 40 steps over chunks of 16 positions: the sequences' attention spans three chunks, and
    // the flash-decoding kernels (chunks, then their merge) equal the reference.
    let engine = Engine::<_, f32>::random(&MockBackend::new(), chunked(), SEED, options())?;
    assert_eq!(engine.model().launches_per_step(5), 10 * 2 + 4);
    assert_eq!(engine.model().launches_per_step(3), 6 * 2 + 3);
    agree::<f32>(chunked(), 3, 40)?;
    agree::<bf16>(chunked(), 3, 40)?;
    // The split changes the order of the sums only: the one-pass form agrees closely.
    let one_pass = run_reference::<f32>(Config::tiny(), 3, 40);
    let split = run_reference::<f32>(chunked(), 3, 40);
    let worst = one_pass
        .logits
        .iter()
        .zip(&split.logits)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst < 1e-5, "{worst}");
    Ok(())
}

#[test]
fn wide_rows_and_sizes_without_wide_loads() -> Result<()> {
    // On a GPU these take the fused projections' other paths (many passes of the runs over a
    // wide row; one element per load); on the mock both forms still equal the reference.
    agree::<f32>(wide(), 2, 3)?;
    agree::<bf16>(odd(), 5, 8)?;
    agree::<f32>(odd(), 1, 8)
}
