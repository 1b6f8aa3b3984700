//! A candle model, unpatched, graphed through accel-graph: a stack of Llama-style transformer
//! blocks written with candle-core and candle-nn ops (RMSNorm, linear layers through cuBLAS,
//! attention with softmax, SwiGLU), seeded random weights, fixed shapes. Its forward runs
//! inside an accel-graph capture on candle's own stream: every op allocates its output and
//! frees its inputs through cudarc (`cuMemAllocAsync`/`cuMemFreeAsync`), which the capture
//! records as the graph's allocation and free nodes. Replays must equal candle's eager forward
//! bit for bit; the program prints candle-eager and graphed time per forward at batch 1 and 8.
//!
//! What the program does for the capture, and why:
//! * candle's default device (`Device::new_cuda`) works on cudarc's per-thread stream, with
//!   cudarc's event tracking on but idle (one stream): accel-graph adopts that stream and
//!   leaves the tracking as it is.
//! * candle uploads the shapes and strides of non-contiguous ops from host vectors; inside a
//!   capture such an upload would be recorded as a copy from host memory freed right after.
//!   candle's own parameter cache (`enable_cuda_graph_htod_cache`) keeps those uploads on the
//!   device: a warm-up forward fills it, the captured forward reads it.
//!
//! Prints `OK`/`FAILED` lines and `candle:` figures; exits non-zero on a failure.
//!
//! Build and run: `bash scripts/device/bundle-candle.sh` here (fetches nvcc from the Python
//! package index), then `bash scripts/device/run-candle.sh` on the GPU machine.

use std::{error::Error, process::ExitCode, sync::Arc, time::Instant};

use accel_graph_api::prelude::*;
use accel_graph_cuda::CudaBackend;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, ops};

type Outcome<T> = Result<T, Box<dyn Error>>;

/// The model's sizes.
const HIDDEN: usize = 1024;
const HEADS: usize = 16;
const INTERMEDIATE: usize = 2816;
const LAYERS: usize = 4;
const TOKENS: usize = 16;
const EPS: f64 = 1e-5;

/// One transformer block's weights.
struct Block {
    attention_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    mlp_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

fn linear(out: usize, inp: usize, device: &Device) -> candle_core::Result<Linear> {
    let w = (Tensor::randn(0f32, 1.0, (out, inp), device)? / (inp as f64).sqrt())?;
    Ok(Linear::new(w, None))
}

impl Block {
    fn new(device: &Device) -> candle_core::Result<Self> {
        Ok(Block {
            attention_norm: Tensor::ones(HIDDEN, DType::F32, device)?,
            q: linear(HIDDEN, HIDDEN, device)?,
            k: linear(HIDDEN, HIDDEN, device)?,
            v: linear(HIDDEN, HIDDEN, device)?,
            o: linear(HIDDEN, HIDDEN, device)?,
            mlp_norm: Tensor::ones(HIDDEN, DType::F32, device)?,
            gate: linear(INTERMEDIATE, HIDDEN, device)?,
            up: linear(INTERMEDIATE, HIDDEN, device)?,
            down: linear(HIDDEN, INTERMEDIATE, device)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, tokens, hidden) = x.dims3()?;
        let head_dim = hidden / HEADS;
        let h = ops::rms_norm(x, &self.attention_norm, EPS as f32)?;
        let heads = |t: Tensor| -> candle_core::Result<Tensor> {
            t.reshape((batch, tokens, HEADS, head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = heads(self.q.forward(&h)?)?;
        let k = heads(self.k.forward(&h)?)?;
        let v = heads(self.v.forward(&h)?)?;
        let scores = (q.matmul(&k.t()?.contiguous()?)? / (head_dim as f64).sqrt())?;
        let attention = ops::softmax_last_dim(&scores)?.matmul(&v)?;
        let attention = attention
            .transpose(1, 2)?
            .contiguous()?
            .reshape((batch, tokens, hidden))?;
        let x = (x + self.o.forward(&attention)?)?;
        let h = ops::rms_norm(&x, &self.mlp_norm, EPS as f32)?;
        let mlp = (self.gate.forward(&h)?.silu()? * self.up.forward(&h)?)?;
        x + self.down.forward(&mlp)?
    }
}

struct Model {
    blocks: Vec<Block>,
    norm: Tensor,
}

impl Model {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = x.clone();
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        ops::rms_norm(&x, &self.norm, EPS as f32)
    }
}

struct Checks {
    failed: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        println!("{}  {what}", if ok { "OK    " } else { "FAILED" });
        if !ok {
            self.failed += 1;
        }
    }
}

fn bits(t: &Tensor) -> candle_core::Result<Vec<u32>> {
    Ok(t.flatten_all()?
        .to_vec1::<f32>()?
        .into_iter()
        .map(f32::to_bits)
        .collect())
}

/// Mean milliseconds per call of `f` over `iters` calls, the device synchronized around them.
fn time_ms(device: &Device, iters: usize, mut f: impl FnMut() -> Outcome<()>) -> Outcome<f64> {
    device.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    device.synchronize()?;
    Ok(start.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

fn run(batch: usize, checks: &mut Checks) -> Outcome<()> {
    let device = Device::new_cuda(0)?;
    device.set_seed(0x5eed)?;
    let Device::Cuda(cuda) = &device else {
        return Err("not a CUDA device".into());
    };
    let model = Model {
        blocks: (0..LAYERS)
            .map(|_| Block::new(&device))
            .collect::<candle_core::Result<_>>()?,
        norm: Tensor::ones(HIDDEN, DType::F32, &device)?,
    };
    let x = Tensor::randn(0f32, 1.0, (batch, TOKENS, HIDDEN), &device)?;

    // candle's parameter uploads come from its device cache from here on (filled by the
    // warm-up, read by the capture).
    let _uploads = cuda.enable_cuda_graph_htod_cache();
    let eager = model.forward(&x)?;
    let eager_bits = bits(&eager)?;

    let stream = cuda.cuda_stream();
    let backend = CudaBackend::from_context(Arc::clone(stream.context()))?;
    let candle_stream = backend.adopt_stream(Arc::clone(&stream))?;
    let _current = backend.use_stream(&candle_stream)?;
    let mut graph = backend.graph(GraphOptions::new())?;
    graph.capture_begin()?;
    let captured = model.forward(&x);
    let ended = graph.capture_end();
    let output = match (captured, ended) {
        (Ok(output), Ok(())) => output,
        (captured, ended) => {
            checks.check(
                false,
                &format!(
                    "batch {batch}: capture: forward {:?}, capture_end {ended:?}",
                    captured.err()
                ),
            );
            return Ok(());
        }
    };
    checks.check(
        cuda.is_event_tracking() && !stream.context().is_in_multi_stream_mode(),
        &format!("batch {batch}: candle's event tracking and stream mode left as they were"),
    );
    graph.replay()?;
    checks.check(
        bits(&output)? == eager_bits,
        &format!("batch {batch}: the first replay equals candle's eager forward bit for bit"),
    );
    for _ in 0..100 {
        graph.replay()?;
    }
    checks.check(
        bits(&output)? == eager_bits,
        &format!("batch {batch}: 101 replays: still equal, bit for bit"),
    );

    let iters = 200;
    let eager_ms = time_ms(&device, iters, || {
        model.forward(&x)?;
        Ok(())
    })?;
    let graphed_ms = time_ms(&device, iters, || Ok(graph.replay()?))?;
    println!(
        "candle: batch {batch} ({LAYERS} blocks, hidden {HIDDEN}, {TOKENS} tokens, f32): eager \
         {eager_ms:.3} ms, graphed {graphed_ms:.3} ms per forward, speed-up {:.2}x",
        eager_ms / graphed_ms
    );
    drop(output);
    drop(graph);
    device.synchronize()?;
    checks.check(
        stream.context().check_err().is_ok(),
        &format!("batch {batch}: the output and the graph dropped: no CUDA error left"),
    );
    Ok(())
}

fn main() -> ExitCode {
    let mut checks = Checks { failed: 0 };
    for batch in [1, 8] {
        if let Err(e) = run(batch, &mut checks) {
            checks.check(false, &format!("batch {batch}: {e}"));
        }
    }
    println!("candle: {} failed", checks.failed);
    if checks.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
