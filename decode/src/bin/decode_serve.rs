//! Serves random prompts through the decode engine and reports throughput and per-bucket
//! telemetry.
//!
//! ```text
//! decode_serve [--backend auto|mock|cuda|hip|wgpu] [--config tiny|small|medium]
//!              [--dtype f32|bf16] [--batch 8] [--prompt-len 16] [--steps 64]
//!              [--precapture] [--eager] [--buckets 1,2,4,8,16,32,64] [--max-len N]
//!              [--attention-chunk 64] [--seed 1] [--trace]
//! ```
//!
//! Each of `--batch` sequences gets `--prompt-len` random prompt tokens, fed one at a time
//! through the decode step (prefill token by token: the engine has no prompt kernel), then
//! `--steps` greedy tokens are generated. Printed: the model and memory, prefill and decode
//! tokens per second (the decode figure counts generated tokens of all sequences over the
//! decode phase's wall time, each step's upload of its inputs and download of its tokens
//! included), the first sequence's tokens, and the per-bucket summary. Errors are printed as
//! `error: <message>` with exit code 1.

use std::{process::ExitCode, time::Instant};

use accel_graph::{Backend, BackendJob, GraphError, Result, half::bf16};
use accel_graph_decode::{
    Config, DecodeElement, Engine, EngineOptions, Model, StepRow,
    cli::{BackendArg, Dtype, exit_code, init_logging},
    init::prompt,
};
use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(about = "Serve random prompts through the Llama decode engine (graph per bucket)")]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    /// Model preset: tiny, small (0.35 B parameters) or medium (1.45 B).
    #[arg(long, default_value = "tiny")]
    config: String,
    /// Element type of weights, activations and cache.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Sequences decoded together (rows of each step).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Random prompt tokens per sequence, fed one per step.
    #[arg(long, default_value_t = 16)]
    prompt_len: usize,
    /// Tokens generated per sequence.
    #[arg(long, default_value_t = 64)]
    steps: usize,
    /// Capture every bucket before serving (largest first, with a progress bar), instead of
    /// each on its first step.
    #[arg(long)]
    precapture: bool,
    /// Run every step eagerly (no graphs): the baseline.
    #[arg(long)]
    eager: bool,
    /// Batch buckets, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    buckets: Vec<usize>,
    /// Positions of the key/value cache (default: prompt length + steps).
    #[arg(long)]
    max_len: Option<usize>,
    /// Positions per chunk of split attention (flash-decoding) (default: the preset's, 64;
    /// at least --max-len: one pass).
    #[arg(long)]
    attention_chunk: Option<usize>,
    /// Seed of the weights and prompts.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print tracing spans (captures, instantiations, warm-ups) as they close.
    #[arg(long)]
    trace: bool,
}

struct Serve(Args);

impl BackendJob for Serve {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        match self.0.dtype {
            Dtype::F32 => serve::<B, f32>(backend, &self.0),
            Dtype::Bf16 => serve::<B, bf16>(backend, &self.0),
        }
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn serve<B: Backend, T: DecodeElement>(backend: &B, args: &Args) -> Result<()> {
    if args.batch == 0 || args.prompt_len == 0 {
        return Err(GraphError::ArgumentMismatch(
            "--batch and --prompt-len must be at least 1".to_owned(),
        ));
    }
    let total = args.prompt_len + args.steps;
    let mut config = Config::preset(&args.config)?;
    config.max_len = args.max_len.unwrap_or(total);
    if let Some(chunk) = args.attention_chunk {
        config.attention_chunk = chunk;
    }
    if total > config.max_len {
        return Err(GraphError::ArgumentMismatch(format!(
            "--prompt-len + --steps ({total}) exceed --max-len ({})",
            config.max_len
        )));
    }
    config.validate()?;
    println!(
        "model: {} ({} parameters, {} layers, hidden {}, {} heads / {} kv heads of {}), {}, \
         max_len {}, attention in {} chunk(s)",
        args.config,
        config.num_params(),
        config.layers,
        config.hidden,
        config.heads,
        config.kv_heads,
        config.head_dim,
        T::NAME,
        config.max_len,
        config.attention_splits()
    );
    println!(
        "backend: {} ({})",
        backend.kind(),
        backend.capabilities().device_name
    );

    let sizes = accel_graph::utils::CaptureSizes::new(args.buckets.iter().copied())?;
    let bucket = sizes.bucket_for(args.batch).ok_or_else(|| {
        GraphError::ArgumentMismatch(format!(
            "--batch {} exceeds the largest bucket ({})",
            args.batch,
            sizes.largest()
        ))
    })?;
    let start = Instant::now();
    let model = Model::<B, T>::random(backend, config, args.seed)?;
    println!(
        "weights: {:.1} MiB generated and uploaded in {:.2} s",
        mib(model.bytes()),
        start.elapsed().as_secs_f64()
    );
    let options = EngineOptions::new()
        .buckets(args.buckets.iter().copied())
        .graphs(!args.eager)
        .progress(true);
    let options = if args.precapture && !args.eager {
        options.precapture_all()
    } else {
        options
    };
    let start = Instant::now();
    let mut engine = Engine::new(model, options)?;
    println!(
        "engine: {} cache slots, buckets {:?}, made in {:.2} s{}",
        engine.slots(),
        engine.buckets(),
        start.elapsed().as_secs_f64(),
        if args.precapture && !args.eager {
            " (pre-captured)"
        } else {
            ""
        }
    );

    let prompts: Vec<Vec<u32>> = (0..args.batch)
        .map(|s| prompt(args.seed, s as u64, args.prompt_len, config.vocab as u32))
        .collect();
    let mut last = vec![0u32; args.batch];
    let mut generated: Vec<u32> = Vec::with_capacity(args.steps);
    let row = |s: usize, token: u32, pos: usize| StepRow::new(s as u32, token, pos as u32);

    // Prefill, one token per step through the decode step.
    let start = Instant::now();
    for t in 0..args.prompt_len {
        let rows: Vec<StepRow> = prompts
            .iter()
            .enumerate()
            .map(|(s, p)| row(s, p[t], t))
            .collect();
        last = engine.step(&rows)?.tokens;
    }
    let prefill = start.elapsed();
    // Decode.
    let start = Instant::now();
    for t in 0..args.steps {
        let rows: Vec<StepRow> = (0..args.batch)
            .map(|s| row(s, last[s], args.prompt_len + t))
            .collect();
        last = engine.step(&rows)?.tokens;
        generated.push(last[0]);
    }
    let decode = start.elapsed();

    let per_s = |tokens: usize, d: std::time::Duration| tokens as f64 / d.as_secs_f64().max(1e-12);
    println!(
        "prefill: {} tokens in {:.3} s, {:.1} tokens/s (first step includes the bucket's \
         capture unless pre-captured)",
        args.batch * args.prompt_len,
        prefill.as_secs_f64(),
        per_s(args.batch * args.prompt_len, prefill)
    );
    if args.steps > 0 {
        println!(
            "decode: {} tokens in {:.3} s, {:.1} tokens/s, {:.3} ms per step",
            args.batch * args.steps,
            decode.as_secs_f64(),
            per_s(args.batch * args.steps, decode),
            decode.as_secs_f64() * 1e3 / args.steps as f64
        );
        let shown: Vec<String> = generated.iter().take(16).map(u32::to_string).collect();
        println!(
            "sequence 0 generated: {}{}",
            shown.join(" "),
            if generated.len() > 16 { " ..." } else { "" }
        );
    }
    println!(
        "result: backend={} dtype={} config={} batch={} bucket={} prompt_len={} steps={} \
         mode={} prefill_tok_s={:.1} decode_tok_s={:.1} step_ms={:.4}",
        backend.kind(),
        T::NAME,
        args.config,
        args.batch,
        bucket,
        args.prompt_len,
        args.steps,
        if args.eager { "eager" } else { "graph" },
        per_s(args.batch * args.prompt_len, prefill),
        per_s(args.batch * args.steps, decode),
        decode.as_secs_f64() * 1e3 / args.steps.max(1) as f64
    );
    print!("{}", engine.summary());
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.trace);
    let result = args
        .backend
        .choice()
        .and_then(|choice| accel_graph::run_on(choice, Serve(args)));
    exit_code(result.and_then(|r| r))
}
