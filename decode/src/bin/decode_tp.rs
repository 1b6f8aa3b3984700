//! Tensor-parallel decode against one device: the graphed decode step's latency per batch with
//! the model split over `--tp N` ranks and on one device (TP=1), and whether the split model's
//! greedy tokens from a fixed prompt are the one-device model's — in `decode_bench`'s line
//! format, shared with the PyTorch side (`decode/bench/torch_tp_decode.py`).
//!
//! ```text
//! decode_tp [--backend cuda|mock|auto] [--tp 2] [--config small] [--dtype bf16] [--seed 1]
//!           [--weights DIR] [--batches 1,8,32] [--context 512] [--max-len N] [--warmup 20]
//!           [--steps 200] [--tokens 32] [--prompt-len 16] [--timeout 300] [--trace]
//! ```
//!
//! Ranks are **threads of this process**, rank `r` on device `r` (one CUDA backend per GPU,
//! NCCL communicators: build with the `nccl` feature), meeting in memory; on the mock, `--tp`
//! simulated devices sharing one capture domain, as CUDA ranks that are threads do. Each rank
//! captures its bucket graphs in `thread_local` mode, with the two all-reduces per layer
//! inside them. Every device is opened before any rank starts, so a missing one is an error
//! at once; a rank that fails later leaves the others waiting at most `--timeout` seconds.
//!
//! Run, one engine at a time: TP=1 on device 0, then TP=N (each rank its engine):
//!
//! * bench: an engine of buckets `--batches` (pre-captured), the cache of every sequence
//!   filled to `--context` positions token by token at the largest batch, then per batch
//!   `--warmup` and `--steps` timed graphed steps at position `--context`, each timed as a
//!   serving loop sees it (upload of the step's inputs, replay, download of its next tokens).
//!   Prints `bench impl=accel mode=graph tp=N config=... batch=8 ... median_us=...` (rank
//!   0's times; every rank's step waits for the others' all-reduces).
//! * tokens: batch 1, the prompt (the dump's, else sequence 0 of `init::prompt(seed, ..)`) fed
//!   token by token, then `--tokens` greedy tokens: `tokens impl=accel tp=N ... tokens=...`.
//!
//! Then `compare impl=accel tp=N ... same_tokens=yes|no first_difference=... ranks_agree=...
//! prompt_logits_max_abs_diff=... relative=... same_argmax=...`: the split model against the
//! one-device model (sums split over ranks round differently; in `bf16` a near-tie may flip a
//! token).

use std::{
    process::ExitCode,
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use accel_graph::{
    Backend, BackendChoice, BackendKind, GraphError, Result,
    collective::CommOptions,
    cuda::CudaBackend,
    half::bf16,
    mock::{MockBackend, MockConfig},
};
use accel_graph_decode::{
    Config, DecodeElement, Engine, EngineOptions, Model, StepRow,
    cli::{
        BackendArg, CliError, Dtype, ModelArgs, ModelChoice, bad, cache_len, exit_code,
        init_logging, quantile,
    },
    dump::DumpHeader,
    model::HostWeights,
    timing,
    tp::TpThreads,
};
use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(
    about = "Tensor-parallel decode (ranks as threads, one device each) against one device: \
             graphed step latency per batch and greedy tokens, in lines shared with PyTorch"
)]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    #[command(flatten)]
    model: ModelArgs,
    /// Ranks (devices 0..N).
    #[arg(long, default_value_t = 2)]
    tp: usize,
    /// Batch sizes (each a bucket), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    batches: Vec<usize>,
    /// Positions of every sequence in the cache before the timed steps.
    #[arg(long, default_value_t = 512)]
    context: usize,
    /// Positions of the key/value cache (default: what the phases need, rounded up to 64).
    #[arg(long)]
    max_len: Option<usize>,
    /// Untimed steps per batch before the timed ones.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Timed steps per batch.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Greedy tokens generated after the prompt.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Longest wait, in seconds, for another rank (joining, a collective on the mock).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Print tracing spans (captures, instantiations, warm-ups) as they close.
    #[arg(long)]
    trace: bool,
}

type TpResult<T> = std::result::Result<T, CliError>;

/// What the runs share: the model's sizes (with the cache's `max_len`), its name and prompt.
struct Plan {
    args: Args,
    config: Config,
    name: String,
    prompt: Vec<u32>,
    batches: Vec<usize>,
}

impl Plan {
    fn new(args: Args, header: Option<&DumpHeader>) -> TpResult<Self> {
        let ModelChoice {
            mut config,
            name,
            prompt,
        } = args.model.resolve(header)?;
        let mut batches = args.batches.clone();
        batches.sort_unstable();
        batches.dedup();
        if batches.is_empty() || batches[0] == 0 || args.context == 0 || args.steps == 0 {
            return Err(bad(
                "--batches must be at least 1 each, --context and --steps at least 1",
            ));
        }
        if prompt.is_empty() {
            return Err(bad("the prompt is empty (--prompt-len 0)"));
        }
        config.max_len = cache_len(args.context, prompt.len(), args.tokens, args.max_len)?;
        // Sizes that do not split are refused here, before any device is opened.
        TpThreads::new(config, args.tp)?;
        Ok(Plan {
            args,
            config,
            name,
            prompt,
            batches,
        })
    }
}

/// One batch's timed steps, in microseconds, sorted.
struct Timed {
    batch: usize,
    us: Vec<f64>,
}

/// What one engine (TP=1) or one rank measured.
struct Measured {
    bench: Vec<Timed>,
    tokens: Vec<u32>,
    /// The logits of every prompt step, `[prompt, vocab]`.
    prompt_logits: Vec<f32>,
}

/// The bench and tokens runs on engines made by `make` (one at a time).
fn measure<B: Backend, T: DecodeElement>(
    plan: &Plan,
    mut make: impl FnMut(EngineOptions) -> Result<Engine<B, T>>,
) -> Result<Measured> {
    let (args, batches) = (&plan.args, &plan.batches);
    let largest = batches.last().copied().unwrap_or(1);
    let bench = {
        let options = EngineOptions::new()
            .buckets(batches.iter().copied())
            .slots(largest)
            .precapture_all();
        let mut engine = make(options)?;
        if engine.summary().capture_failures() > 0 {
            eprintln!("warning: a bucket failed to capture and runs eagerly");
        }
        // Fill `context` positions of every sequence, one token per step at the largest batch.
        let last = timing::fill(&mut engine, args.model.seed, largest, args.context)?;
        let mut bench = Vec::with_capacity(batches.len());
        for &batch in batches {
            let us = timing::time_steps(
                &mut engine,
                &last[..batch],
                args.context as u32,
                args.warmup,
                args.steps,
            )?;
            bench.push(Timed { batch, us });
        }
        bench
    };
    let mut engine = make(EngineOptions::new().buckets([1]).slots(1))?;
    let p = plan.prompt.len();
    let mut prompt_logits = Vec::new();
    let mut generated = Vec::with_capacity(args.tokens);
    let mut next = 0u32;
    for pos in 0..p + args.tokens.max(1) - 1 {
        let token = if pos < p { plan.prompt[pos] } else { next };
        next = engine.step(&[StepRow::new(0, token, pos as u32)])?.tokens[0];
        if pos < p {
            prompt_logits.extend(engine.last_logits()?.iter().map(|v| v.to_f32()));
        }
        if pos + 1 >= p {
            generated.push(next);
        }
    }
    generated.truncate(args.tokens);
    Ok(Measured {
        bench,
        tokens: generated,
        prompt_logits,
    })
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn print_measured<T: DecodeElement>(plan: &Plan, tp: usize, m: &Measured) {
    for t in &m.bench {
        let mean = t.us.iter().sum::<f64>() / t.us.len().max(1) as f64;
        println!(
            "bench impl=accel mode=graph tp={tp} config={} dtype={} batch={} context={} \
             steps={} median_us={:.1} p10_us={:.1} p90_us={:.1} mean_us={mean:.1} min_us={:.1}",
            plan.name,
            T::NAME,
            t.batch,
            plan.args.context,
            t.us.len(),
            quantile(&t.us, 0.5),
            quantile(&t.us, 0.1),
            quantile(&t.us, 0.9),
            t.us.first().copied().unwrap_or(f64::NAN)
        );
    }
    println!(
        "tokens impl=accel tp={tp} config={} dtype={} n={} prompt={} tokens={}",
        plan.name,
        T::NAME,
        m.tokens.len(),
        list(&plan.prompt),
        list(&m.tokens)
    );
}

/// The split model (`split`, every rank's) against the one-device model (`one`).
fn compare<T: DecodeElement>(plan: &Plan, one: &Measured, split: &[Measured]) -> bool {
    let Some(rank0) = split.first() else {
        return false;
    };
    let same = rank0.tokens == one.tokens;
    let first = rank0
        .tokens
        .iter()
        .zip(&one.tokens)
        .position(|(a, b)| a != b)
        .map_or_else(|| "none".to_owned(), |i| i.to_string());
    let ranks_agree = split
        .iter()
        .all(|m| m.tokens == rank0.tokens && m.prompt_logits == rank0.prompt_logits);
    let vocab = plan.config.vocab;
    let diff = rank0
        .prompt_logits
        .iter()
        .zip(&one.prompt_logits)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    let scale = one.prompt_logits.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let argmax = |row: &[f32]| {
        row.iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv { (i, v) } else { (bi, bv) }
            })
            .0
    };
    let same_argmax = rank0
        .prompt_logits
        .chunks(vocab)
        .zip(one.prompt_logits.chunks(vocab))
        .filter(|(a, b)| argmax(a) == argmax(b))
        .count();
    println!(
        "compare impl=accel tp={} config={} dtype={} same_tokens={} first_difference={first} \
         ranks_agree={} prompt_logits_max_abs_diff={diff:.6e} max_abs_logit={scale:.6e} \
         relative={:.3e} same_argmax={same_argmax}/{}",
        split.len(),
        plan.name,
        T::NAME,
        if same { "yes" } else { "no" },
        if ranks_agree { "yes" } else { "no" },
        diff / scale.max(f32::MIN_POSITIVE),
        plan.prompt.len()
    );
    ranks_agree
}

fn run<B: Backend, T: DecodeElement>(backends: &[B], plan: &Plan) -> TpResult<()> {
    let (args, config) = (&plan.args, plan.config);
    let start = Instant::now();
    let host: HostWeights<T> = args.model.host_weights(&config)?;
    let first = &backends[0];
    println!(
        "model impl=accel tp={} config={} dtype={} params={} layers={} hidden={} heads={} \
         kv_heads={} head_dim={} intermediate={} vocab={} max_len={} backend={} device={} \
         launch=threads load_seconds={:.3}",
        args.tp,
        plan.name,
        T::NAME,
        config.num_params(),
        config.layers,
        config.hidden,
        config.heads,
        config.kv_heads,
        config.head_dim,
        config.intermediate,
        config.vocab,
        config.max_len,
        first.kind(),
        first.capabilities().device_name.replace(' ', "_"),
        start.elapsed().as_secs_f64()
    );

    let start = Instant::now();
    let one = measure::<B, T>(plan, |options| {
        Engine::new(Model::from_host(first, config, &host)?, options)
    })?;
    first.synchronize()?;
    first.empty_cache()?;
    print_measured::<T>(plan, 1, &one);
    println!(
        "phase impl=accel config={} name=tp1 seconds={:.3}",
        plan.name,
        start.elapsed().as_secs_f64()
    );

    let start = Instant::now();
    let comm = CommOptions::new()
        .name("decode-tp")
        .timeout(Duration::from_secs(args.timeout));
    let split = TpThreads::new(config, args.tp)?.comm_options(comm).run(
        |rank| Ok(backends[rank].clone()),
        |rank| measure::<B, T>(plan, |options| rank.engine(&host, options)),
    )?;
    print_measured::<T>(plan, args.tp, &split[0]);
    println!(
        "phase impl=accel config={} name=tp{} seconds={:.3}",
        plan.name,
        args.tp,
        start.elapsed().as_secs_f64()
    );
    if compare::<T>(plan, &one, &split) {
        Ok(())
    } else {
        Err(bad("the ranks sampled different tokens or logits"))
    }
}

/// Opens devices `0..n` of `kind` before any rank starts.
fn open_all<B>(n: usize, open: impl Fn(usize) -> Result<B>) -> Result<Vec<B>> {
    (0..n).map(open).collect()
}

fn dispatch<B: Backend>(backends: &[B], plan: &Plan, dtype: Dtype) -> TpResult<()> {
    match dtype {
        Dtype::F32 => run::<B, f32>(backends, plan),
        Dtype::Bf16 => run::<B, bf16>(backends, plan),
    }
}

fn main_inner(args: Args) -> TpResult<()> {
    let header = args.model.header()?;
    let dtype = args.model.dtype(header.as_ref())?;
    let choice = args.backend.choice()?;
    let plan = Plan::new(args, header.as_ref())?;
    let tp = plan.args.tp;
    // The mock's ranks share one simulated capture domain, as CUDA ranks that are threads of
    // one process do.
    static MOCK_DEVICE: AtomicU32 = AtomicU32::new(1);
    let mock = || {
        let device = MOCK_DEVICE.fetch_add(1, Ordering::Relaxed);
        open_all(tp, |_| MockBackend::with_config(MockConfig::shared(device)))
    };
    match choice {
        BackendChoice::Only(BackendKind::Mock) => dispatch(&mock()?, &plan, dtype),
        BackendChoice::Only(BackendKind::Cuda) => {
            dispatch(&open_all(tp, CudaBackend::new)?, &plan, dtype)
        }
        BackendChoice::Auto => match open_all(tp, CudaBackend::new) {
            Ok(cuda) => dispatch(&cuda, &plan, dtype),
            Err(e) => {
                tracing::info!(reason = %e, "CUDA skipped: running on the mock");
                dispatch(&mock()?, &plan, dtype)
            }
        },
        BackendChoice::Only(other) => Err(CliError::Graph(GraphError::Unsupported {
            what: format!("decode_tp runs on cuda (NCCL) or mock: {other} has no collectives"),
        })),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.trace);
    exit_code(main_inner(args))
}
