//! `decode_floor`: what a decode step built of one kernel per operation can cost at best, on
//! this device — the step's launches, each replaced by a kernel that does nothing but stream
//! the bytes that operation must read, captured as one graph and replayed.
//!
//! ```text
//! decode_floor [--backend mock|cuda|hip|wgpu|auto] [--config small] [--rows 1,2,4,8,16]
//!              [--context 512] [--max-len 576] [--fused-rows N] [--replays 200]
//!              [--bandwidth 3.35e12]
//! ```
//!
//! For each row count it builds the engine's launch sequence (`Model::forward`'s: the fused
//! projections up to `--fused-rows` rows, the unfused step with its GEMMs above) and gives each
//! launch a buffer of its own holding what the launch reads from memory at least: its weights
//! (RMSNorm's folded in where the fused step folds it), the embedding rows, the keys and values
//! of `context + 1` positions of each row for attention's chunks, and for the launches the
//! floor does not count (RoPE, SwiGLU, RMSNorm alone, attention's merge, the argmax) their
//! inputs. The weights, embedding rows and cache are exactly the bytes of the decode benchmark's
//! floor (`decode/bench/summarize_decode.py`). Three graphs are timed, each replay waited for
//! alone as a serving loop waits for a step:
//!
//! * `one_kernel`: every byte of the step read by one streaming kernel — the device's own
//!   bandwidth floor;
//! * `per_op`: the step's launches, each streaming its own bytes — the floor of any step built
//!   of that many kernels in a graph, however well each is written;
//! * `empty`: the same number of launches reading nothing — what the graph's nodes cost alone.
//!
//! ```text
//! floor config=small rows=1 context=512 launches=147 bytes=658060800 nominal_us=196.1
//!     one_kernel_us=218.1 per_op_us=543.5 empty_us=209.4 per_op/nominal=2.77
//!     one_kernel/nominal=1.11
//! ```
//! (one line; an H100). Each streaming kernel sums the words it reads, and the sums are checked against
//! the host's, so no read can be skipped. On the mock the figures are the host's and say
//! nothing of a GPU.

use std::{process::ExitCode, time::Instant};

use accel_graph::{
    AcceleratorGraph, Backend, BackendJob, BackendKind, GraphError, GraphOptions, Result,
    half::bf16,
    kernel::{Access, Extent, Kernel, KernelArg},
};
use accel_graph_decode::{
    Config, DecodeElement,
    cli::{BackendArg, CliError, bad, exit_code, quantile},
    model::{default_fused_rows, kernels::attention::partial_len},
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    about = "Time the floor of a decode step built of one kernel per operation: the step's \
                   launches, each streaming only the bytes it must read, in one graph"
)]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    /// Model preset: tiny, small or medium (bf16).
    #[arg(long, default_value = "small")]
    config: String,
    /// Rows of the step (its batch), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    rows: Vec<usize>,
    /// Positions of every sequence in the cache before the step (the step attends to
    /// context + 1).
    #[arg(long, default_value_t = 512)]
    context: usize,
    /// Positions of the key/value cache, which sets attention's chunks (default: the decode
    /// benchmark's, context + 64 rounded up to 64).
    #[arg(long)]
    max_len: Option<usize>,
    /// Steps of at most this many rows take the fused projections (default: the engine's
    /// default for bf16 on CUDA).
    #[arg(long)]
    fused_rows: Option<usize>,
    /// Timed replays of each graph (after 10 untimed ones).
    #[arg(long, default_value_t = 200)]
    replays: usize,
    /// The memory bandwidth of the nominal floor, bytes per second.
    #[arg(long, default_value_t = 3.35e12)]
    bandwidth: f64,
}

/// One launch of the step: its name (in errors) and the bytes it reads at least.
#[derive(Debug)]
struct Read {
    name: &'static str,
    bytes: usize,
    /// Whether the decode benchmark's floor counts these bytes (weights, embedding rows,
    /// cache); the others are activations a real step finds in the cache.
    in_floor: bool,
}

/// The step's launches for `rows` rows over `context + 1` positions, in `Model::forward`'s
/// order, with the bytes each reads at least; `fused`: the fused projections.
fn step_reads(c: &Config, rows: usize, context: usize, fused: bool) -> Vec<Read> {
    let e = bf16::BYTES;
    let floor = |name, bytes| Read {
        name,
        bytes,
        in_floor: true,
    };
    let act = |name, bytes| Read {
        name,
        bytes,
        in_floor: false,
    };
    let (h, inter) = (c.hidden, c.intermediate);
    let x = rows * h * e;
    let cache = rows * (context + 1) * 2 * c.kv_dim() * e;
    let split = c.attention_splits() > 1;
    let mut reads = vec![floor("embed", x)];
    for _ in 0..c.layers {
        if fused {
            reads.push(floor("norm_qkv_rope", (c.qkv_dim() * h + h) * e));
        } else {
            reads.push(floor("rmsnorm", h * e));
            reads.push(floor("gemm_qkv", c.qkv_dim() * h * e));
            reads.push(act("rope_kv", rows * c.qkv_dim() * e));
        }
        reads.push(floor("attention", cache));
        if split {
            let partials = rows * c.heads * c.attention_splits() * partial_len(c.head_dim) * 4;
            reads.push(act("attention_combine", partials));
        }
        reads.push(floor("out", h * c.q_dim() * e));
        if fused {
            reads.push(floor("norm_gate_up", (2 * inter * h + h) * e));
        } else {
            reads.push(floor("rmsnorm", h * e));
            reads.push(floor("gemm_gate_up", 2 * inter * h * e));
            reads.push(act("swiglu", rows * 2 * inter * e));
        }
        reads.push(floor("down", h * inter * e));
    }
    if fused {
        reads.push(floor("norm_lm_head", (c.vocab * h + h) * e));
    } else {
        reads.push(floor("rmsnorm", h * e));
        reads.push(floor("gemm_lm_head", c.vocab * h * e));
    }
    reads.push(act("argmax", rows * c.vocab * e));
    reads
}

/// The bytes of `reads` the bandwidth floor counts.
fn floor_bytes(reads: &[Read]) -> usize {
    reads.iter().filter(|r| r.in_floor).map(|r| r.bytes).sum()
}

/// The wrapping sum of `words`: what a streaming launch's block sums add up to.
fn wrapping_sum(words: &[u32]) -> u32 {
    words.iter().fold(0u32, |a, &w| a.wrapping_add(w))
}

/// Threads of a streaming block.
const THREADS: u32 = 256;
/// 16-byte loads a thread has in flight per trip.
const UNROLL: usize = 4;
/// Blocks a streaming launch takes at most (each walks its share of the words).
const MAX_BLOCKS: usize = 4096;

/// `stream_read(sums, data, words)`: each block writes the wrapping sum of the words it read
/// to `sums[block]`; together the blocks read `data[..words]` once.
fn stream_kernel() -> Kernel {
    Kernel::new("decode_floor_stream_read")
        .buffer_with_extent::<u32>("sums", Access::Write, Extent::Any)
        .buffer_with_extent::<u32>(
            "data",
            Access::Read,
            Extent::AtLeastScalar {
                param: 2,
                factor: 1,
            },
        )
        .scalar::<u32>("words")
        .block([THREADS, 1, 1])
        .cuda(
            r#"
extern "C" __global__ void decode_floor_stream_read(unsigned* sums, const unsigned* data,
        unsigned words) {
    const unsigned stride = gridDim.x * blockDim.x, me = blockIdx.x * blockDim.x + threadIdx.x;
    // 16-byte loads where the buffer allows them (allocations are aligned), four in flight.
    const bool wide = ((unsigned long long)data & 15ull) == 0ull;
    const unsigned quads = wide ? words / 4u : 0u;
    const uint4* q = reinterpret_cast<const uint4*>(data);
    unsigned acc = 0u;
    unsigned i = me;
    for (; i + 3u * stride < quads; i += 4u * stride) {
        uint4 a = q[i], b = q[i + stride], c = q[i + 2u * stride], d = q[i + 3u * stride];
        acc += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
        acc += c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    }
    for (; i < quads; i += stride) { uint4 a = q[i]; acc += a.x + a.y + a.z + a.w; }
    for (unsigned w = quads * 4u + me; w < words; w += stride) acc += data[w];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    __shared__ unsigned part[32];
    if ((threadIdx.x & 31u) == 0u) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0u) {
        unsigned t = 0u;
        for (unsigned k = 0; k < blockDim.x / 32u; ++k) t += part[k];
        sums[blockIdx.x] = t;
    }
}"#,
        )
        // The host writes the whole sum to block 0's slot, zeros to the others: the same total.
        .host(|args, launch| {
            let words = args[2].scalar::<u32>() as usize;
            let total = wrapping_sum(&args[1].slice::<u32>()[..words]);
            let sums = args[0].slice_mut::<u32>();
            let blocks = (launch.grid[0] as usize).min(sums.len());
            sums[..blocks].fill(0);
            if let Some(first) = sums.first_mut() {
                *first = total;
            }
        })
}

/// The grid of a streaming launch over `words` words: enough blocks for every 16-byte load of
/// a trip to be in flight at once, at most [`MAX_BLOCKS`].
fn stream_grid(words: usize) -> usize {
    (words / 4)
        .div_ceil(THREADS as usize * UNROLL)
        .clamp(1, MAX_BLOCKS)
}

/// One streaming launch: the operation it stands for, its data, its block sums, the words it
/// reads, their expected sum.
struct Stream<B: Backend> {
    name: &'static str,
    data: B::Buffer<u32>,
    sums: B::Buffer<u32>,
    words: usize,
    expected: u32,
}

impl<B: Backend> Stream<B> {
    /// A launch for `name` reading `bytes` (rounded up to whole words) of data that is
    /// `seed`'s own.
    fn new(b: &B, name: &'static str, bytes: usize, seed: u32) -> Result<Self> {
        let words = bytes.div_ceil(4);
        // Each word differs from its neighbours, so a read left out changes the sum.
        let host: Vec<u32> = (0..words as u32)
            .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed))
            .collect();
        let expected = wrapping_sum(&host);
        Ok(Stream {
            name,
            data: b.alloc_from(&host)?,
            sums: b.alloc::<u32>(stream_grid(words))?,
            words,
            expected,
        })
    }

    /// Launches the read of all its words (`empty`: of none).
    fn issue(&self, b: &B, kernel: &Kernel, empty: bool) -> Result<()> {
        let words = if empty { 0 } else { self.words };
        b.launch_kernel(
            kernel,
            [stream_grid(self.words) as u32, 1, 1],
            &[
                KernelArg::buffer(&self.sums),
                KernelArg::buffer(&self.data),
                KernelArg::scalar(u32::try_from(words).unwrap_or(u32::MAX)),
            ],
        )
    }

    /// Whether the last full read summed every word.
    fn check(&self, b: &B) -> Result<bool> {
        let sums = b.download(&self.sums)?;
        Ok(wrapping_sum(&sums) == self.expected)
    }
}

/// Median microseconds of one replay of a graph of `streams`' launches, each replay waited
/// for alone; the launches' sums are checked after the full reads.
fn time_graph<B: Backend>(
    b: &B,
    streams: &[Stream<B>],
    empty: bool,
    replays: usize,
) -> std::result::Result<f64, CliError> {
    let kernel = stream_kernel();
    let stream = b.new_stream()?;
    let mut graph = b.graph(GraphOptions::new())?;
    b.capture_on(&stream, &mut graph, || {
        streams.iter().try_for_each(|s| s.issue(b, &kernel, empty))
    })?;
    for _ in 0..10 {
        graph.replay()?;
    }
    b.synchronize()?;
    let mut us = Vec::with_capacity(replays);
    for _ in 0..replays {
        let start = Instant::now();
        graph.replay()?;
        b.synchronize()?;
        us.push(start.elapsed().as_secs_f64() * 1e6);
    }
    if !empty {
        for (i, s) in streams.iter().enumerate() {
            if !s.check(b)? {
                return Err(GraphError::KernelFailed {
                    kernel: kernel.name().to_owned(),
                    message: format!(
                        "launch {i} ({}): its block sums differ from the host's sum of the words",
                        s.name
                    ),
                }
                .into());
            }
        }
    }
    us.sort_by(f64::total_cmp);
    Ok(quantile(&us, 0.5))
}

struct Job {
    args: Args,
    config: Config,
}

impl BackendJob for Job {
    type Output = std::result::Result<(), CliError>;
    fn run<B: Backend>(self, b: &B) -> Self::Output {
        let (args, c) = (&self.args, &self.config);
        let fused_rows = args
            .fused_rows
            .unwrap_or_else(|| default_fused_rows::<bf16>(c, BackendKind::Cuda));
        for &rows in &args.rows {
            let reads = step_reads(c, rows, args.context, rows <= fused_rows);
            let bytes: usize = reads.iter().map(|r| r.bytes).sum();
            let streams = reads
                .iter()
                .enumerate()
                .map(|(i, r)| Stream::new(b, r.name, r.bytes, i as u32))
                .collect::<Result<Vec<_>>>()?;
            let per_op = time_graph(b, &streams, false, args.replays)?;
            let empty = time_graph(b, &streams, true, args.replays)?;
            drop(streams);
            let whole = Stream::new(b, "whole_step", bytes, 7)?;
            let one = time_graph(b, &[whole], false, args.replays)?;
            let nominal = floor_bytes(&reads) as f64 / args.bandwidth * 1e6;
            println!(
                "floor config={} rows={rows} context={} launches={} bytes={bytes} \
                 nominal_us={nominal:.1} one_kernel_us={one:.1} per_op_us={per_op:.1} \
                 empty_us={empty:.1} per_op/nominal={:.2} one_kernel/nominal={:.2}",
                args.config,
                args.context,
                reads.len(),
                per_op / nominal,
                one / nominal,
            );
        }
        Ok(())
    }
}

fn main_inner(args: Args) -> std::result::Result<(), CliError> {
    if args.rows.is_empty() || args.rows.contains(&0) {
        return Err(bad("--rows must be at least 1 each"));
    }
    if args.replays == 0 || args.bandwidth <= 0.0 {
        return Err(bad("--replays and --bandwidth must be positive"));
    }
    let mut config = Config::preset(&args.config)?;
    config.max_len = args
        .max_len
        .unwrap_or_else(|| (args.context + 64).div_ceil(64) * 64);
    if config.max_len <= args.context {
        return Err(bad("--max-len must exceed --context"));
    }
    let choice = args.backend.choice()?;
    accel_graph::run_on(choice, Job { args, config })??;
    Ok(())
}

fn main() -> ExitCode {
    exit_code(main_inner(Args::parse()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_graph::{DeviceBuffer, mock::MockBackend};
    use accel_graph_decode::model::Model;

    /// The decode benchmark's floor in bytes, as `decode/bench/summarize_decode.py` counts
    /// it: every weight but the embedding table, the batch's embedding rows, the keys and
    /// values of `context + 1` positions of each row.
    fn benchmark_floor_bytes(c: &Config, rows: usize, context: usize) -> usize {
        let e = bf16::BYTES;
        (c.num_params() - c.vocab * c.hidden) * e
            + rows * c.hidden * e
            + rows * (context + 1) * c.layers * 2 * c.kv_dim() * e
    }

    #[test]
    fn the_plan_has_the_engines_launches_and_the_floors_bytes() {
        let b = MockBackend::new();
        for config in [
            Config::tiny(),
            Config {
                max_len: 256,
                ..Config::tiny()
            },
        ] {
            let model = Model::<_, bf16>::random(&b, config, 1).unwrap();
            for rows in [1, 3, model.fused_rows() + 1] {
                let fused = rows <= model.fused_rows();
                let reads = step_reads(&config, rows, 100, fused);
                assert_eq!(reads.len(), model.launches_per_step(rows), "rows {rows}");
                assert_eq!(
                    floor_bytes(&reads),
                    benchmark_floor_bytes(&config, rows, 100),
                    "rows {rows}"
                );
            }
        }
    }

    #[test]
    fn streaming_reads_every_word_on_the_mock() {
        let b = MockBackend::new();
        let streams: Vec<_> = [1usize, 4, 4099, 70_000]
            .iter()
            .enumerate()
            .map(|(i, &bytes)| Stream::new(&b, "test", bytes, i as u32).unwrap())
            .collect();
        time_graph(&b, &streams, false, 2).unwrap();
        // A read that skipped words would not match: the empty graph leaves the sums at the
        // full reads' (checked above), so corrupt one and see the check fail.
        b.upload(&streams[3].sums, &vec![0u32; streams[3].sums.len()])
            .unwrap();
        assert!(!streams[3].check(&b).unwrap());
    }
}
