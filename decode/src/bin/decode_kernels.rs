//! `decode_kernels`: the decode step's projections timed alone, on the model's own matrices,
//! each in both forms side by side in one run — the fused small-batch projection
//! (`model::kernels::linear`) against what the unfused step runs instead (RMSNorm's kernel, the
//! backend's GEMM, SwiGLU's kernel).
//!
//! ```text
//! decode_kernels [--backend mock|cuda|hip|wgpu|auto] [--config medium] [--dtype bf16]
//!                [--rows 1,2,4] [--launches 40] [--replays 20] [--copies 6] [--overlap]
//!                [--several-rows]
//! ```
//!
//! Each form is captured as a graph of `--launches` projections in a row, each on the next of
//! `--copies` copies of the weights (so a matrix has left the cache when it is read again, as
//! in a decode step, where every layer reads other weights), and the graph replayed
//! `--replays` times after one untimed replay. The time of one projection is the replays' wall
//! time over their projections: each pays its ramp-up and drain between its neighbours, as
//! inside a decode step's graph. The QKV projection is timed without RoPE (the fused step
//! stores it with RoPE in the same kernel, the unfused step in a kernel of its own). Prints,
//! for each projection and row count:
//!
//! ```text
//! kernel config=medium dtype=bf16 overlap=0 variant=one-row proj=gate_up rows=1 bytes=46137344 fused_us=14.6
//!     unfused_us=19.1 fused/unfused=0.764 fused_gbps=3160.2 unfused_gbps=2415.6
//! ```
//! (one line). On the mock the figures are the host's and say nothing of a GPU.

use std::{process::ExitCode, time::Instant};

use accel_graph::{AcceleratorGraph, Backend, BackendJob, Gemm, GraphOptions, Result, half::bf16};
use accel_graph_decode::{
    Config, DecodeElement,
    cli::{BackendArg, CliError, Dtype, bad, exit_code},
    model::kernels::{Kernels, Projections, linear::Variant},
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    about = "Time the decode step's projections alone: fused small-batch kernels \
                   against RMSNorm + GEMM + SwiGLU, on the model's matrices"
)]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    /// Model preset whose matrices are timed: tiny, small or medium.
    #[arg(long, default_value = "medium")]
    config: String,
    /// Element type.
    #[arg(long, value_enum, default_value = "bf16")]
    dtype: Dtype,
    /// Rows of `x` (the step's batch), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    rows: Vec<usize>,
    /// Projections per captured graph.
    #[arg(long, default_value_t = 40)]
    launches: usize,
    /// Timed replays of each graph.
    #[arg(long, default_value_t = 20)]
    replays: usize,
    /// Copies of each matrix the launches take in turn.
    #[arg(long, default_value_t = 6)]
    copies: usize,
    /// Launch the kernels (fused projections, RMSNorm, SwiGLU) to overlap the kernel before
    /// each (programmatic dependent launch, where the device has it); the GEMMs launch as the
    /// backend launches them.
    #[arg(long)]
    overlap: bool,
    /// Time the projections of several rows (`Kernels::rows`: tensor-core tiles for bf16 on a
    /// device that has them) at every row count, one row included; by default a row count
    /// takes the set a step of that many rows takes.
    #[arg(long)]
    several_rows: bool,
}

/// One of the step's projections: `n × k` weights, what the fused kernel adds to the product.
#[derive(Clone, Copy)]
struct Projection {
    name: &'static str,
    n: usize,
    k: usize,
    form: Form,
}

#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// `out = rmsnorm(x) · Wᵀ` (QKV, LM head).
    Norm,
    /// `out = x · Wᵀ + out` (output, down).
    Residual,
    /// `act = swiglu(rmsnorm(x) · [G; U]ᵀ)` (gate/up: `n` is the intermediate width, the
    /// weights `2n × k`).
    GateUp,
}

fn projections(c: &Config) -> [Projection; 5] {
    [
        Projection {
            name: "qkv",
            n: c.qkv_dim(),
            k: c.hidden,
            form: Form::Norm,
        },
        Projection {
            name: "out",
            n: c.hidden,
            k: c.q_dim(),
            form: Form::Residual,
        },
        Projection {
            name: "gate_up",
            n: c.intermediate,
            k: c.hidden,
            form: Form::GateUp,
        },
        Projection {
            name: "down",
            n: c.hidden,
            k: c.intermediate,
            form: Form::Residual,
        },
        Projection {
            name: "lm_head",
            n: c.vocab,
            k: c.hidden,
            form: Form::Norm,
        },
    ]
}

impl Projection {
    /// Rows of the weight matrix.
    fn weight_rows(&self) -> usize {
        if self.form == Form::GateUp {
            2 * self.n
        } else {
            self.n
        }
    }
}

/// The buffers one projection at one row count works on.
struct Operands<'w, B: Backend, T: DecodeElement> {
    weights: &'w [B::Buffer<T>],
    x: B::Buffer<T>,
    norm: B::Buffer<T>,
    /// The unfused step's normalized rows.
    h: B::Buffer<T>,
    /// The GEMM's output (gate and up products for SwiGLU).
    product: B::Buffer<T>,
    out: B::Buffer<T>,
}

/// Issues one projection in the fused form (`fused`) or the unfused one, on copy `w`, its
/// kernels launched to overlap the kernel before each with `overlap`.
#[allow(clippy::too_many_arguments)]
fn issue<B: Backend, T: DecodeElement>(
    b: &B,
    c: &Config,
    p: &Projection,
    rows: usize,
    ops: &Operands<'_, B, T>,
    w: &B::Buffer<T>,
    fused: bool,
    args: &Args,
) -> Result<()> {
    let kernels = if args.overlap {
        Kernels::overlapped::<T>()
    } else {
        Kernels::get::<T>()
    };
    let eps = c.rms_eps;
    if fused {
        let k = fused_set(&kernels, rows, args);
        return match p.form {
            Form::Norm => {
                k.issue_norm_linear(b, &ops.out, &ops.x, &ops.norm, w, rows, p.n, p.k, eps)
            }
            Form::Residual => k.issue_linear(b, &ops.out, &ops.x, w, rows, p.n, p.k, 1.0),
            Form::GateUp => {
                k.issue_norm_gate_up(b, &ops.out, &ops.x, &ops.norm, w, rows, p.n, p.k, eps)
            }
        };
    }
    let gemm = Gemm::new(rows, p.weight_rows(), p.k).transpose_b(true);
    if p.form == Form::Residual {
        return b.gemm(&gemm.scalars(1.0, 1.0), &ops.x, w, &ops.out);
    }
    kernels.issue_rmsnorm(b, &ops.h, &ops.x, &ops.norm, rows, p.k, eps)?;
    if p.form == Form::Norm {
        return b.gemm(&gemm, &ops.h, w, &ops.out);
    }
    b.gemm(&gemm, &ops.h, w, &ops.product)?;
    kernels.issue_swiglu(b, &ops.out, &ops.product, rows, p.n)
}

/// Microseconds per projection of one form: a graph of `--launches` of them, replayed.
fn time_form<B: Backend, T: DecodeElement>(
    b: &B,
    args: &Args,
    c: &Config,
    p: &Projection,
    rows: usize,
    ops: &Operands<'_, B, T>,
    fused: bool,
) -> Result<f64> {
    let stream = b.new_stream()?;
    let mut graph = b.graph(GraphOptions::new())?;
    b.capture_on(&stream, &mut graph, || {
        (0..args.launches).try_for_each(|i| {
            let w = &ops.weights[i % ops.weights.len()];
            issue(b, c, p, rows, ops, w, fused, args)
        })
    })?;
    graph.replay()?;
    b.synchronize()?;
    let start = Instant::now();
    for _ in 0..args.replays {
        graph.replay()?;
    }
    b.synchronize()?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / (args.replays * args.launches) as f64)
}

/// The fused projections a line times: `Kernels::rows` with `--several-rows`, else the set a
/// step of `rows` rows takes.
fn fused_set<'k>(kernels: &'k Kernels, rows: usize, args: &Args) -> &'k Projections {
    if args.several_rows {
        &kernels.rows
    } else {
        kernels.projections(rows)
    }
}

/// How the fused projections of a line ran: `one-row`, `two-row`, `rows` (CUDA cores) or
/// `tiles` (tensor cores where the device has them, else `rows`).
fn variant_name(v: Variant) -> &'static str {
    match (v.pass, v.tiles) {
        (1, _) => "one-row",
        (2, _) => "two-row",
        (_, false) => "rows",
        (_, true) => "tiles",
    }
}

struct Job {
    args: Args,
    config: Config,
}

impl BackendJob for Job {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        match self.args.dtype {
            Dtype::F32 => run::<B, f32>(backend, &self.args, &self.config),
            Dtype::Bf16 => run::<B, bf16>(backend, &self.args, &self.config),
        }
    }
}

fn run<B: Backend, T: DecodeElement>(b: &B, args: &Args, c: &Config) -> Result<()> {
    for p in projections(c) {
        let matrix = p.weight_rows() * p.k;
        let weights: Vec<_> = (0..args.copies)
            .map(|_| b.alloc::<T>(matrix))
            .collect::<Result<_>>()?;
        for &rows in &args.rows {
            // Each operand exactly as long as the GEMM takes it.
            let ops = Operands::<B, T> {
                weights: &weights,
                x: b.alloc::<T>(rows * p.k)?,
                norm: b.alloc::<T>(p.k)?,
                h: b.alloc::<T>(rows * p.k)?,
                product: b.alloc::<T>(rows * p.weight_rows())?,
                out: b.alloc::<T>(rows * p.n)?,
            };
            let fused = time_form(b, args, c, &p, rows, &ops, true)?;
            let unfused = time_form(b, args, c, &p, rows, &ops, false)?;
            let bytes = matrix * T::BYTES;
            println!(
                "kernel config={} dtype={} overlap={} variant={} proj={} rows={rows} bytes={bytes} \
                 fused_us={fused:.2} \
                 unfused_us={unfused:.2} fused/unfused={:.3} fused_gbps={:.1} \
                 unfused_gbps={:.1}",
                args.config,
                T::NAME,
                u8::from(args.overlap),
                variant_name(fused_set(&Kernels::get::<T>(), rows, args).variant),
                p.name,
                fused / unfused,
                bytes as f64 / fused / 1e3,
                bytes as f64 / unfused / 1e3,
            );
        }
    }
    Ok(())
}

fn main_inner(args: Args) -> std::result::Result<(), CliError> {
    if args.rows.is_empty() || args.rows.contains(&0) {
        return Err(bad("--rows must be at least 1 each"));
    }
    if args.launches == 0 || args.replays == 0 || args.copies == 0 {
        return Err(bad("--launches, --replays and --copies must be at least 1"));
    }
    let config = Config::preset(&args.config)?;
    let choice = args.backend.choice()?;
    accel_graph::run_on(choice, Job { args, config })??;
    Ok(())
}

fn main() -> ExitCode {
    exit_code(main_inner(Args::parse()))
}
