//! Benchmarks the decode engine's step, graphed and eager, in a line format shared with the
//! PyTorch side (`decode/bench/torch_decode.py`); measures pre-capturing a serving engine's
//! batch sizes at start-up; prints greedy tokens from a fixed prompt; writes weight dumps.
//!
//! ```text
//! decode_bench [--backend B] [--config small] [--dtype bf16] [--seed 1] [--weights DIR]
//!              [--batches 1,2,4,8,16,32,64] [--context 512] [--max-len N]
//!              [--warmup 20] [--steps 200] [--eager-steps 100] [--modes graph,eager]
//!              [--phases startup,bench,tokens] [--startup-max-batch 256]
//!              [--tokens 32] [--prompt-len 16] [--dump-logits FILE] [--attention-chunk N]
//!              [--trace]
//! decode_bench --dump-weights DIR [--config small] [--dtype bf16] [--seed 1] [--prompt-len 16]
//! ```
//!
//! Phases, each in this process, one engine at a time:
//!
//! * `startup`: an engine of buckets 1, 2, 4, then every 8 up to `--startup-max-batch` (35
//!   buckets for 256) with a cache of that many sequences of `--max-len` positions; after one
//!   eager step has set up the libraries, all its buckets are pre-captured (largest first, into
//!   one pool). Prints `startup impl=accel ... graphs=35 seconds=... pool_bytes=...` with the
//!   backend's reserved bytes and the device's used bytes (CUDA: `cuMemGetInfo`) before and after.
//! * `bench`: per mode (graph, eager) an engine of buckets `--batches` whose cache holds
//!   `--context` positions of every sequence (filled token by token through the decode step at
//!   the largest batch); then per batch `--warmup` steps and `--steps` (`--eager-steps`) timed
//!   ones, each at position `--context` (so each attends to `context + 1` positions), each timed
//!   as a serving loop sees it: upload of the step's inputs, the replay (or eager work), the
//!   download of its next tokens. Prints `bench impl=accel mode=graph ... batch=8
//!   median_us=... p10_us=... p90_us=...`.
//! * `tokens`: batch 1, the fixed prompt (the dump's, else sequence 0 of
//!   `init::prompt(seed, ..)`) fed token by token, then greedy tokens: prints `tokens impl=accel
//!   ... tokens=a,b,c`. `--dump-logits FILE` writes the logits of every prompt step (`[prompt,
//!   vocab]` little-endian `f32`) for `torch_decode.py --check`.
//!
//! `--dump-weights DIR` writes the model of `--config`, `--dtype` and `--seed` (with the prompt of
//! `--prompt-len` tokens) as a weight dump (`accel_graph_decode::dump`) and exits: no device.
//! `--weights DIR` runs the model of a dump (its config and dtype) instead of a preset.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Instant,
};

use accel_graph::{Backend, BackendJob, GraphError, Result, half::bf16};
use accel_graph_decode::{
    Config, DecodeElement, Engine, EngineOptions, Model, StepRow,
    cli::{
        BackendArg, CliError, Dtype, ModelArgs, ModelChoice, bad, cache_len, exit_code,
        init_logging, quantile,
    },
    dump::{self, DumpHeader, DumpInfo},
    model::{HostWeights, KvCache, StepBuffers, Tensor},
    timing,
};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Graph,
    Eager,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    Startup,
    Bench,
    Tokens,
}

#[derive(Debug, Clone, Parser)]
#[command(
    about = "Benchmark the Llama decode engine's step (graphed and eager), its start-up \
                   pre-capture and its greedy tokens, in lines shared with the PyTorch side"
)]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    #[command(flatten)]
    model: ModelArgs,
    /// Write the model's weight dump into this directory and exit.
    #[arg(long)]
    dump_weights: Option<PathBuf>,
    /// Batch sizes of the bench phase (each a bucket), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    batches: Vec<usize>,
    /// Positions of every sequence in the cache before the timed steps (each timed step
    /// attends to context + 1).
    #[arg(long, default_value_t = 512)]
    context: usize,
    /// Positions of the key/value cache (default: what the phases need, rounded up to 64).
    #[arg(long)]
    max_len: Option<usize>,
    /// Untimed steps per batch before the timed ones.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Timed steps per batch, graphed.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Timed steps per batch, eager.
    #[arg(long, default_value_t = 100)]
    eager_steps: usize,
    /// Modes of the bench phase.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "graph,eager")]
    modes: Vec<Mode>,
    /// Phases to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "startup,bench,tokens"
    )]
    phases: Vec<Phase>,
    /// Largest batch of the start-up phase: buckets 1, 2, 4, then every 8 up to it.
    #[arg(long, default_value_t = 256)]
    startup_max_batch: usize,
    /// Greedy tokens generated after the prompt in the tokens phase.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Write the logits of every prompt step of the tokens phase here (raw little-endian f32).
    #[arg(long)]
    dump_logits: Option<PathBuf>,
    /// Positions per chunk of split attention (flash-decoding), instead of the model's.
    #[arg(long)]
    attention_chunk: Option<usize>,
    /// Steps of at most this many rows take the fused small-batch projections (0: every
    /// step runs the backend's GEMMs), instead of the model's default.
    #[arg(long)]
    fused_rows: Option<usize>,
    /// Steps of at most this many rows launch their kernels to overlap the kernel before each
    /// (programmatic dependent launch; 0: none), instead of the model's default.
    #[arg(long)]
    overlap_rows: Option<usize>,
    /// Print tracing spans (captures, instantiations, warm-ups) as they close.
    #[arg(long)]
    trace: bool,
}

type BenchResult<T> = std::result::Result<T, CliError>;

/// The start-up buckets: 1, 2, 4, then every 8 up to `max` (35 for 256).
fn startup_sizes(max: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = [1, 2, 4].into_iter().filter(|&s| s <= max).collect();
    sizes.extend((8..=max).step_by(8));
    sizes
}

/// What the phases run on: the model's sizes (with the cache's `max_len`), its name, its
/// prompt and where its weights come from.
struct Plan {
    args: Args,
    config: Config,
    name: String,
    prompt: Vec<u32>,
}

impl Plan {
    /// The model with `host`'s weights, its fused and overlapped rows as `--fused-rows` and
    /// `--overlap-rows` ask.
    fn model<B: Backend, T: DecodeElement>(
        &self,
        backend: &B,
        host: &HostWeights<T>,
    ) -> BenchResult<Model<B, T>> {
        let mut model = Model::from_host(backend, self.config, host)?;
        if let Some(rows) = self.args.fused_rows {
            model.set_fused_rows(rows)?;
        }
        if let Some(rows) = self.args.overlap_rows {
            model.set_overlap_rows(rows)?;
        }
        Ok(model)
    }

    fn new(args: Args, header: Option<&DumpHeader>) -> BenchResult<Self> {
        let ModelChoice {
            mut config,
            name,
            prompt,
        } = args.model.resolve(header)?;
        if args.batches.is_empty() || args.batches.contains(&0) || args.context == 0 {
            return Err(bad(
                "--batches must be at least 1 each, --context at least 1",
            ));
        }
        if prompt.is_empty() {
            return Err(bad("the prompt is empty (--prompt-len 0)"));
        }
        config.max_len = cache_len(args.context, prompt.len(), args.tokens, args.max_len)?;
        config.attention_chunk = args.attention_chunk.unwrap_or(config.attention_chunk);
        config.validate()?;
        Ok(Plan {
            args,
            config,
            name,
            prompt,
        })
    }
}

struct Job {
    plan: Plan,
    dtype: Dtype,
}

impl BackendJob for Job {
    type Output = BenchResult<()>;
    fn run<B: Backend>(self, backend: &B) -> BenchResult<()> {
        match self.dtype {
            Dtype::F32 => run::<B, f32>(backend, &self.plan),
            Dtype::Bf16 => run::<B, bf16>(backend, &self.plan),
        }
    }
}

/// Bytes of device memory in use by the whole device, where the backend tells (CUDA).
fn device_used<B: Backend>(backend: &B) -> Option<usize> {
    let any: &dyn std::any::Any = backend;
    any.downcast_ref::<accel_graph::cuda::CudaBackend>()
        .and_then(|c| c.mem_get_info().ok())
        .map(|(free, total)| total.saturating_sub(free))
}

fn show(v: Option<usize>) -> String {
    v.map_or_else(|| "na".to_owned(), |v| v.to_string())
}

fn run<B: Backend, T: DecodeElement>(backend: &B, plan: &Plan) -> BenchResult<()> {
    let (args, config) = (&plan.args, &plan.config);
    let start = Instant::now();
    let host: HostWeights<T> = args.model.host_weights(config)?;
    println!(
        "model impl=accel config={} dtype={} params={} weight_bytes={} layers={} hidden={} \
         heads={} kv_heads={} head_dim={} intermediate={} vocab={} max_len={} \
         attention_splits={} fused_rows={} backend={} device={} load_seconds={:.3}",
        plan.name,
        T::NAME,
        config.num_params(),
        config.num_params() * T::BYTES,
        config.layers,
        config.hidden,
        config.heads,
        config.kv_heads,
        config.head_dim,
        config.intermediate,
        config.vocab,
        config.max_len,
        config.attention_splits(),
        args.fused_rows
            .unwrap_or(accel_graph_decode::model::default_fused_rows::<T>(
                config,
                backend.kind()
            )),
        backend.kind(),
        backend.capabilities().device_name.replace(' ', "_"),
        start.elapsed().as_secs_f64()
    );
    for &phase in &args.phases {
        let start = Instant::now();
        let name = match phase {
            Phase::Startup => {
                startup::<B, T>(backend, plan, &host)?;
                "startup"
            }
            Phase::Bench => {
                for &mode in &args.modes {
                    let start = Instant::now();
                    bench::<B, T>(backend, plan, &host, mode)?;
                    backend.synchronize()?;
                    backend.empty_cache()?;
                    println!(
                        "phase impl=accel config={} name=bench_{} seconds={:.3}",
                        plan.name,
                        mode_name(mode),
                        start.elapsed().as_secs_f64()
                    );
                }
                "bench"
            }
            Phase::Tokens => {
                tokens::<B, T>(backend, plan, &host)?;
                "tokens"
            }
        };
        backend.synchronize()?;
        backend.empty_cache()?;
        println!(
            "phase impl=accel config={} name={name} seconds={:.3}",
            plan.name,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Graph => "graph",
        Mode::Eager => "eager",
    }
}

/// One eager step of padding rows on a cache of its own for each form of the step — one row
/// (the fused projections, where the model takes them) and one row past [`Model::fused_rows`]
/// (the GEMMs): sets up the libraries (cuBLAS's handle, workspace and kernels on CUDA) before
/// anything is timed, as a server's first requests would.
fn warm_up<B: Backend, T: DecodeElement>(model: &Model<B, T>) -> Result<()> {
    let b = model.backend();
    for rows in [1, model.fused_rows() + 1] {
        let cache = KvCache::new(b, model.config(), rows)?;
        let io = StepBuffers::new(b, model.config(), rows)?;
        model.forward(&io, &cache)?;
    }
    b.synchronize()
}

fn startup<B: Backend, T: DecodeElement>(
    backend: &B,
    plan: &Plan,
    host: &HostWeights<T>,
) -> BenchResult<()> {
    let sizes = startup_sizes(plan.args.startup_max_batch);
    let model = plan.model(backend, host)?;
    warm_up(&model)?;
    let options = EngineOptions::new().buckets(sizes.iter().copied());
    let mut engine = Engine::new(model, options)?;
    backend.synchronize()?;
    let (reserved_before, used_before) =
        (backend.memory_stats().reserved_bytes, device_used(backend));
    let start = Instant::now();
    let captured = engine.precapture(&sizes, false)?;
    backend.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    let (reserved_after, used_after) =
        (backend.memory_stats().reserved_bytes, device_used(backend));
    let summary = engine.summary();
    println!(
        "startup impl=accel config={} dtype={} graphs={captured} sizes={} max_batch={} max_len={} \
         seconds={seconds:.4} pool_bytes={} cache_bytes={} reserved_before={reserved_before} \
         reserved_after={reserved_after} device_used_before={} device_used_after={}",
        plan.name,
        T::NAME,
        sizes.len(),
        sizes.last().copied().unwrap_or(0),
        plan.config.max_len,
        summary.pool_reserved_bytes,
        summary.cache_bytes,
        show(used_before),
        show(used_after)
    );
    if captured != sizes.len() {
        eprintln!(
            "warning: {} bucket(s) failed to capture",
            sizes.len() - captured
        );
    }
    Ok(())
}

fn bench<B: Backend, T: DecodeElement>(
    backend: &B,
    plan: &Plan,
    host: &HostWeights<T>,
    mode: Mode,
) -> BenchResult<()> {
    let args = &plan.args;
    let mut batches = args.batches.clone();
    batches.sort_unstable();
    batches.dedup();
    let largest = batches.last().copied().unwrap_or(1);
    let graphs = mode == Mode::Graph;
    let options = EngineOptions::new()
        .buckets(batches.iter().copied())
        .graphs(graphs)
        .slots(largest);
    let options = if graphs {
        options.precapture_all()
    } else {
        options
    };
    let model = plan.model(backend, host)?;
    let mut engine = Engine::new(model, options)?;
    // Fill `context` positions of every sequence, one token per step at the largest batch.
    let start = Instant::now();
    let last = timing::fill(&mut engine, args.model.seed, largest, args.context)?;
    println!(
        "phase impl=accel config={} name=fill_{} context={} batch={largest} seconds={:.3}",
        plan.name,
        mode_name(mode),
        args.context,
        start.elapsed().as_secs_f64()
    );
    let steps = if graphs { args.steps } else { args.eager_steps };
    for &batch in &batches {
        let us = timing::time_steps(
            &mut engine,
            &last[..batch],
            args.context as u32,
            args.warmup,
            steps,
        )?;
        let mean = us.iter().sum::<f64>() / us.len().max(1) as f64;
        println!(
            "bench impl=accel mode={} config={} dtype={} batch={batch} context={} steps={steps} \
             median_us={:.1} p10_us={:.1} p90_us={:.1} mean_us={mean:.1} min_us={:.1}",
            mode_name(mode),
            plan.name,
            T::NAME,
            args.context,
            quantile(&us, 0.5),
            quantile(&us, 0.1),
            quantile(&us, 0.9),
            us.first().copied().unwrap_or(f64::NAN)
        );
    }
    let summary = engine.summary();
    if summary.capture_failures() > 0 {
        eprintln!(
            "warning: {} capture failure(s): those buckets ran eagerly",
            summary.capture_failures()
        );
    }
    Ok(())
}

fn tokens<B: Backend, T: DecodeElement>(
    backend: &B,
    plan: &Plan,
    host: &HostWeights<T>,
) -> BenchResult<()> {
    let (args, config) = (&plan.args, &plan.config);
    let model = plan.model(backend, host)?;
    let mut engine = Engine::new(model, EngineOptions::new().buckets([1]).slots(1))?;
    let p = plan.prompt.len();
    let mut logits: Vec<f32> = Vec::new();
    let mut generated = Vec::with_capacity(args.tokens);
    let mut next = 0u32;
    for pos in 0..p + args.tokens.max(1) - 1 {
        let token = if pos < p { plan.prompt[pos] } else { next };
        next = engine.step(&[StepRow::new(0, token, pos as u32)])?.tokens[0];
        if pos < p && args.dump_logits.is_some() {
            logits.extend(engine.last_logits()?.iter().map(|v| v.to_f32()));
        }
        if pos + 1 >= p {
            generated.push(next);
        }
    }
    generated.truncate(args.tokens);
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    println!(
        "tokens impl=accel config={} dtype={} n={} prompt={} tokens={}",
        plan.name,
        T::NAME,
        generated.len(),
        list(&plan.prompt),
        list(&generated)
    );
    if let Some(path) = &args.dump_logits {
        dump::write_f32s(path, &logits)?;
        println!(
            "logits impl=accel config={} dtype={} steps={p} vocab={} file={}",
            plan.name,
            T::NAME,
            config.vocab,
            path.display()
        );
    }
    Ok(())
}

/// `--dump-weights DIR`: the model of the preset, dtype and seed, generated tensor by tensor
/// on the host and written as it goes.
fn dump_weights(args: &Args, dir: &Path) -> BenchResult<()> {
    let config = Config::preset(&args.model.config)?;
    let info = DumpInfo::new()
        .preset(args.model.config.clone())
        .seed(args.model.seed)
        .prompt(args.model.seeded_prompt(&config));
    let start = Instant::now();
    let seed = args.model.seed;
    let header = match args.model.dtype.unwrap_or(Dtype::Bf16) {
        Dtype::F32 => dump::write_with(dir, &config, &info, |t: Tensor| {
            Ok::<_, GraphError>(t.random::<f32>(&config, seed))
        })?,
        Dtype::Bf16 => dump::write_with(dir, &config, &info, |t: Tensor| {
            Ok::<_, GraphError>(t.random::<bf16>(&config, seed))
        })?,
    };
    println!(
        "dump impl=accel config={} dtype={} dir={} tensors={} data_bytes={} seconds={:.3}",
        args.model.config,
        header.dtype,
        dir.display(),
        header.tensors.len(),
        header.data_bytes,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main_inner(args: Args) -> BenchResult<()> {
    if let Some(dir) = &args.dump_weights {
        return dump_weights(&args, dir);
    }
    let header = args.model.header()?;
    let dtype = args.model.dtype(header.as_ref())?;
    let choice = args.backend.choice()?;
    let plan = Plan::new(args, header.as_ref())?;
    accel_graph::run_on(choice, Job { plan, dtype })?
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.trace);
    exit_code(main_inner(args))
}
