//! What the tests share: a scenario of sequences decoded step by step — prompts fed token by
//! token through the decode step, then greedy generation — run on an engine or on the host
//! reference.
#![allow(dead_code)]

pub mod tp;

use accel_graph::{Backend, Result};
use accel_graph_decode::{
    Config, DecodeElement, Engine, EngineOptions, StepMode, StepRow,
    init::prompt,
    model::{DEFAULT_OVERLAP_ROWS, Model, Reference, ReferenceStep},
};

/// The weights' seed of every test.
pub const SEED: u64 = 11;
/// Prompt tokens per sequence.
pub const PROMPT: usize = 5;

/// The bits of `v`, so that comparisons are bit for bit (even a NaN would have to match).
pub fn bits<T: DecodeElement>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}

/// A fresh directory under the system's temporary one, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// Buckets of the tests: steps of 3 rows pad to 4, of 5 rows to 8.
pub fn options() -> EngineOptions {
    EngineOptions::new().buckets([1, 2, 4, 8])
}

/// Tokens and final logits of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run<T> {
    /// Each step's next tokens, row by row.
    pub tokens: Vec<Vec<u32>>,
    /// The last step's logits.
    pub logits: Vec<T>,
}

/// The rows of step `t` of `batch` sequences (slot `s` for sequence `s`): a prompt token
/// while there is one, else the sequence's last generated token.
pub fn rows(config: &Config, t: usize, batch: usize, last: &[u32]) -> Vec<StepRow> {
    (0..batch)
        .map(|s| {
            let p = prompt(SEED, s as u64, PROMPT, config.vocab as u32);
            let token = if t < PROMPT { p[t] } else { last[s] };
            StepRow::new(s as u32, token, t as u32)
        })
        .collect()
}

/// `steps` steps of `batch` sequences on an engine; also returns how many steps replayed.
pub fn run_engine<B: Backend, T: DecodeElement>(
    engine: &mut Engine<B, T>,
    batch: usize,
    steps: usize,
) -> Result<(Run<T>, usize)> {
    let config = *engine.model().config();
    let mut last = vec![0u32; batch];
    let mut tokens = Vec::new();
    let mut replays = 0;
    for t in 0..steps {
        let out = engine.step(&rows(&config, t, batch, &last))?;
        replays += usize::from(out.mode == StepMode::Replayed);
        last.clone_from(&out.tokens);
        tokens.push(out.tokens);
    }
    Ok((
        Run {
            tokens,
            logits: engine.last_logits()?,
        },
        replays,
    ))
}

/// The same on the host reference.
pub fn run_reference<T: DecodeElement>(config: Config, batch: usize, steps: usize) -> Run<T> {
    let mut reference = Reference::<T>::random(config, SEED, batch);
    run_host(&config, batch, steps, |rows| reference.step(rows))
}

/// `steps` steps of `batch` sequences through a host model's `step`.
pub fn run_host<T: DecodeElement>(
    config: &Config,
    batch: usize,
    steps: usize,
    mut step: impl FnMut(&[StepRow]) -> Result<ReferenceStep<T>>,
) -> Run<T> {
    let mut last = vec![0u32; batch];
    let mut tokens = Vec::new();
    let mut logits = Vec::new();
    for t in 0..steps {
        let ReferenceStep {
            tokens: next,
            logits: l,
        } = step(&rows(config, t, batch, &last)).expect("valid rows");
        last.clone_from(&next);
        tokens.push(next);
        logits = l;
    }
    Run { tokens, logits }
}

/// A fresh engine over the tests' model.
pub fn engine<B: Backend, T: DecodeElement>(
    backend: &B,
    options: EngineOptions,
) -> Result<Engine<B, T>> {
    Engine::random(backend, Config::tiny(), SEED, options)
}

/// An engine over the tests' weights for `config` whose steps of at most `fused_rows` rows
/// take the fused small-batch projections (0: none).
pub fn engine_fused<B: Backend, T: DecodeElement>(
    backend: &B,
    config: Config,
    options: EngineOptions,
    fused_rows: usize,
) -> Result<Engine<B, T>> {
    engine_overlapped(backend, config, options, fused_rows, DEFAULT_OVERLAP_ROWS)
}

/// [`engine_fused`] whose steps of at most `overlap_rows` rows launch their kernels to overlap
/// the kernel before each.
pub fn engine_overlapped<B: Backend, T: DecodeElement>(
    backend: &B,
    config: Config,
    options: EngineOptions,
    fused_rows: usize,
    overlap_rows: usize,
) -> Result<Engine<B, T>> {
    let mut model = Model::random(backend, config, SEED)?;
    model.set_fused_rows(fused_rows)?;
    model.set_overlap_rows(overlap_rows)?;
    Engine::new(model, options)
}

/// The tiny model 10,752 wide: the fused projections' warps go round their runs of 16 bytes
/// many times per row (where the presets' rows take one to three rounds).
pub fn wide() -> Config {
    Config {
        hidden: 10_752,
        ..Config::tiny()
    }
}

/// The tiny model 60 wide with 100 intermediate columns: no 16-byte runs, so the fused
/// projections read one element at a time.
pub fn odd() -> Config {
    Config {
        hidden: 60,
        intermediate: 100,
        ..Config::tiny()
    }
}

/// The tiny model with a cache of 600 positions: attention runs split over three chunks of
/// 256 (flash-decoding), as a long cache of a preset does.
pub fn long() -> Config {
    Config {
        max_len: 600,
        ..Config::tiny()
    }
}

/// The tiny model with attention split into chunks of 16 positions: its cache of 64
/// positions runs in four (flash-decoding), cheaply enough for the mock.
pub fn chunked() -> Config {
    Config {
        attention_chunk: 16,
        ..Config::tiny()
    }
}

/// How a device engine compares with the host reference when fed the reference's tokens
/// (teacher forcing, so that one flipped near-tie does not change every later input).
#[derive(Debug, Clone, Copy)]
pub struct Agreement {
    /// Largest |logit − reference| over every step and row, relative to the largest |logit|.
    pub worst_relative: f64,
    /// Rows whose greedy token equals the reference's.
    pub same_tokens: usize,
    /// Rows compared.
    pub rows: usize,
}

/// Runs `steps` steps of `batch` sequences eagerly and graphed on `backend`, asserts that the
/// two give the same bits, and measures them against the reference. The eager engine launches
/// every kernel in stream order, the graphed one every kernel to overlap the kernel before it
/// (where the device can): the same arithmetic, so the same bits.
pub fn device_agreement<B: Backend, T: DecodeElement>(
    backend: &B,
    config: Config,
    batch: usize,
    steps: usize,
    fused_rows: usize,
) -> Result<Agreement> {
    let mut reference = Reference::<T>::random(config, SEED, batch);
    // A batch past the usual buckets gets one of its own (padded to a power of two).
    let options = || match batch {
        0..=8 => options(),
        _ => options().buckets([1, 2, 4, 8, batch.next_power_of_two()]),
    };
    let in_order = options().graphs(false);
    let mut eager = engine_overlapped::<B, T>(backend, config, in_order, fused_rows, 0)?;
    let mut graphed =
        engine_overlapped::<B, T>(backend, config, options(), fused_rows, usize::MAX)?;
    let mut last = vec![0u32; batch];
    let mut agreement = Agreement {
        worst_relative: 0.0,
        same_tokens: 0,
        rows: 0,
    };
    for t in 0..steps {
        let step = rows(&config, t, batch, &last);
        let want = reference.step(&step)?;
        let e = eager.step(&step)?;
        let g = graphed.step(&step)?;
        assert_eq!(g.mode, StepMode::Replayed);
        let (el, gl) = (eager.last_logits()?, graphed.last_logits()?);
        assert_eq!(
            bits(&gl),
            bits(&el),
            "step {t}: graphed logits differ from eager ones"
        );
        assert_eq!(g.tokens, e.tokens, "step {t}");
        let scale = want
            .logits
            .iter()
            .fold(0.0f64, |m, v| m.max(f64::from(v.to_f32().abs())));
        for (a, b) in gl.iter().zip(&want.logits) {
            let d = f64::from((a.to_f32() - b.to_f32()).abs()) / scale;
            agreement.worst_relative = agreement.worst_relative.max(d);
        }
        agreement.same_tokens += g
            .tokens
            .iter()
            .zip(&want.tokens)
            .filter(|(a, b)| a == b)
            .count();
        agreement.rows += batch;
        last = want.tokens;
    }
    Ok(agreement)
}
