//! The timed decode loop the benchmarks share: fill every sequence's cache to a context, then
//! time steps of one batch as a serving loop sees them (upload of the step's rows, replay or
//! eager run, download of its next tokens).

use std::time::Instant;

use accel_graph::{Backend, Result};

use crate::{DecodeElement, Engine, StepRow, init::prompt};

/// Feeds `sequences` sequences (slots `0..sequences`) `context` prompt tokens each, one token
/// per step at batch `sequences`, from [`prompt`]`(seed ^ 0xfeed, s, context, vocab)`; returns
/// each sequence's greedy next token after the last position.
///
/// ```
/// use accel_graph_decode::{Config, Engine, EngineOptions, timing};
/// let b = accel_graph::mock::MockBackend::new();
/// let mut e = Engine::<_, f32>::random(&b, Config::tiny(), 1, EngineOptions::new().buckets([2]))?;
/// let last = timing::fill(&mut e, 1, 2, 8)?;
/// assert_eq!(last.len(), 2);
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
pub fn fill<B: Backend, T: DecodeElement>(
    engine: &mut Engine<B, T>,
    seed: u64,
    sequences: usize,
    context: usize,
) -> Result<Vec<u32>> {
    let vocab = engine.model().config().vocab as u32;
    let prompts: Vec<Vec<u32>> = (0..sequences)
        .map(|s| prompt(seed ^ 0xfeed, s as u64, context, vocab))
        .collect();
    let mut last = vec![0u32; sequences];
    for p in 0..context {
        let rows: Vec<StepRow> = prompts
            .iter()
            .enumerate()
            .map(|(s, tokens)| StepRow::new(s as u32, tokens[p], p as u32))
            .collect();
        last = engine.step(&rows)?.tokens;
    }
    Ok(last)
}

/// Runs `warmup` then `steps` steps of the first `last.len()` sequences at `position`
/// (each fed its previous greedy token, starting from `last`) and returns the timed steps'
/// durations in microseconds, sorted ascending. Every step writes the same position, so the
/// cache stays as [`fill`] left it.
///
/// ```
/// use accel_graph_decode::{Config, Engine, EngineOptions, timing};
/// let b = accel_graph::mock::MockBackend::new();
/// let mut e = Engine::<_, f32>::random(&b, Config::tiny(), 1, EngineOptions::new().buckets([2]))?;
/// let last = timing::fill(&mut e, 1, 2, 8)?;
/// let us = timing::time_steps(&mut e, &last[..1], 8, 1, 3)?;
/// assert_eq!(us.len(), 3);
/// assert!(us.windows(2).all(|w| w[0] <= w[1]));
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
pub fn time_steps<B: Backend, T: DecodeElement>(
    engine: &mut Engine<B, T>,
    last: &[u32],
    position: u32,
    warmup: usize,
    steps: usize,
) -> Result<Vec<f64>> {
    let mut tokens = last.to_vec();
    let mut us = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        let rows: Vec<StepRow> = tokens
            .iter()
            .enumerate()
            .map(|(s, &token)| StepRow::new(s as u32, token, position))
            .collect();
        let start = Instant::now();
        let out = engine.step(&rows)?;
        if i >= warmup {
            us.push(start.elapsed().as_secs_f64() * 1e6);
        }
        tokens = out.tokens;
    }
    us.sort_by(f64::total_cmp);
    Ok(us)
}
