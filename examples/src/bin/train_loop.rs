//! A small training loop, generic over the backend, run eagerly and through
//! [`FullGraphWrapper`] (Megatron's full-iteration graph): both must give the same weights bit
//! for bit; the per-step times of both and their ratio are printed.
//!
//! Run on the mock, or any backend with `--backend`:
//! `cargo run -p accel-graph-examples --release --bin train_loop -- [--backend auto]`
// Monomorphizing the full-iteration wrapper over the wgpu backend proves `Send + Sync`
// through wgpu-core's resource types, deeper than the default limit allows in a debug build.
#![recursion_limit = "256"]

use std::{process::ExitCode, time::Instant};

use accel_graph::{
    Backend, DeviceBuffer, Result,
    utils::{FullGraphWrapper, Stage},
};
use accel_graph_examples::{BackendArg, backend_label, exit_code, init_logging};
use clap::Parser;

/// Learning rate of the SGD update.
const LR: f32 = 0.0625;

/// The model: `layers` element-wise layers `h = 0.5 h + w_l`.
struct Model<B: Backend> {
    weights: Vec<B::Buffer<f32>>,
}

impl<B: Backend> Model<B> {
    fn new(backend: &B, layers: usize, len: usize) -> Result<Self> {
        let weights = (0..layers)
            .map(|l| backend.alloc_from(&vec![0.125 * l as f32; len]))
            .collect::<Result<_>>()?;
        Ok(Model { weights })
    }

    /// One step over microbatches `[x, target]`: forward through every layer, the gradient of
    /// a squared error, backward through every layer, SGD update. Returns the last residual.
    fn step(&self, b: &B, microbatches: &[&[&B::Buffer<f32>]]) -> Result<Vec<B::Buffer<f32>>> {
        let mut residual = Vec::new();
        for inputs in microbatches {
            let (x, target) = (inputs[0], inputs[1]);
            // forward
            let h = b.alloc(x.len())?;
            b.copy(&h, x)?;
            for w in &self.weights {
                b.scale(&h, 0.5)?;
                b.axpy(&h, 1.0, w)?;
            }
            // loss gradient: r = h - target, g = 2 r / n
            let r = b.alloc(h.len())?;
            b.copy(&r, &h)?;
            b.axpy(&r, -1.0, target)?;
            let g = b.alloc(r.len())?;
            b.copy(&g, &r)?;
            b.scale(&g, 2.0 / r.len() as f32)?;
            // backward + optimizer: dL/dw_l = g * 0.5^(layers-1-l), from the last layer down
            for w in self.weights.iter().rev() {
                b.axpy(w, -LR, &g)?;
                b.scale(&g, 0.5)?;
            }
            residual = vec![r];
        }
        Ok(residual)
    }
}

/// One step's inputs: `[microbatch][x, target]`.
type StepInputs<B> = [[<B as accel_graph::PortableOps>::Buffer<f32>; 2]; 2];

/// Distinct step inputs, uploaded before timing, one [`StepInputs`] per step.
fn make_batches<B: Backend>(b: &B, count: usize, len: usize) -> Result<Vec<StepInputs<B>>> {
    (0..count)
        .map(|s| {
            let buf = |k: usize| {
                let v: Vec<f32> = (0..len)
                    .map(|i| ((s * 7 + k * 3 + i) % 16) as f32 / 8.0)
                    .collect();
                b.alloc_from(&v)
            };
            Ok([[buf(0)?, buf(1)?], [buf(2)?, buf(3)?]])
        })
        .collect()
}

/// `[microbatch][x, target]` references into one step's inputs.
fn microbatches<T>(batch: &[[T; 2]; 2]) -> [[&T; 2]; 2] {
    [[&batch[0][0], &batch[0][1]], [&batch[1][0], &batch[1][1]]]
}

/// Times `steps` calls of `step`, device work included, in microseconds per step.
fn time_block<B: Backend>(
    backend: &B,
    steps: std::ops::Range<usize>,
    mut step: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let count = steps.len();
    backend.synchronize()?;
    let start = Instant::now();
    for s in steps {
        step(s)?;
    }
    backend.synchronize()?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / count as f64)
}

/// Minimum and median of per-step times over rounds.
fn min_median(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (samples[0], samples[samples.len() / 2])
}

/// Trains two identical models, one eagerly and one through the wrapper, on the same inputs,
/// checks that they end bit-identical, and prints per-step times. Eager and graphed blocks
/// alternate over `rounds`, so load on the machine hits both alike; the minimum over rounds is
/// the figure least disturbed by it.
fn train_loop<B: Backend>(
    backend: &B,
    rounds: usize,
    steps_per_round: usize,
    len: usize,
    layers: usize,
) -> Result<()> {
    let warmup = 3;
    let batches = make_batches(backend, 16, len)?;
    let batch = |s: usize| microbatches(&batches[s % batches.len()]);

    let eager_model = Model::new(backend, layers, len)?;
    let graph_model = Model::new(backend, layers, len)?;
    let mut eager_out = Vec::new();
    let mut wrapper =
        FullGraphWrapper::new(backend, |b: &B, _: Stage, mbs: &[&[&B::Buffer<f32>]]| {
            graph_model.step(b, mbs)
        })?
        .warmup_steps(warmup as u64);

    // Warmup steps, then the capture step (timed on its own).
    let prelude = warmup + 1;
    let eager_prelude = time_block(backend, 0..prelude, |s| {
        let mb = batch(s);
        eager_out = eager_model.step(backend, &[&mb[0], &mb[1]])?;
        Ok(())
    })?;
    let graph_prelude = time_block(backend, 0..prelude, |s| {
        let mb = batch(s);
        wrapper.run(Stage::Training, &[&mb[0], &mb[1]]).map(drop)
    })?;

    let (mut eager_times, mut graph_times) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let steps = prelude + round * steps_per_round..prelude + (round + 1) * steps_per_round;
        eager_times.push(time_block(backend, steps.clone(), |s| {
            let mb = batch(s);
            eager_out = eager_model.step(backend, &[&mb[0], &mb[1]])?;
            Ok(())
        })?);
        graph_times.push(time_block(backend, steps, |s| {
            let mb = batch(s);
            wrapper.run(Stage::Training, &[&mb[0], &mb[1]]).map(drop)
        })?);
    }

    // Same results, bit for bit: the last residual and every weight.
    let graph_out = backend.download(&wrapper.outputs(Stage::Training)[0])?;
    assert_eq!(
        bits(&backend.download(&eager_out[0])?),
        bits(&graph_out),
        "last residual differs"
    );
    let (captures, replays) = (
        wrapper.captures(Stage::Training),
        wrapper.replays(Stage::Training),
    );
    drop(wrapper);
    for (l, (we, wg)) in eager_model
        .weights
        .iter()
        .zip(&graph_model.weights)
        .enumerate()
    {
        assert_eq!(
            bits(&backend.download(we)?),
            bits(&backend.download(wg)?),
            "weight {l} differs"
        );
    }

    let total_steps = prelude + rounds * steps_per_round;
    let ops_per_microbatch = 1 + 2 * layers + 4 + 2 * layers;
    let (eager_min, eager_median) = min_median(eager_times);
    let (graph_min, graph_median) = min_median(graph_times);
    println!(
        "backend {}: {total_steps} steps of 2 microbatches, {len} elements, {layers} layers \
         ({} ops per step)",
        backend_label(backend),
        2 * ops_per_microbatch
    );
    println!(
        "wrapper: {warmup} eager warmup steps, {captures} capture, {replays} replays; \
         weights and outputs identical bit for bit"
    );
    println!(
        "first {prelude} steps (warmup + capture): eager {eager_prelude:9.2} us/step, \
         graphed {graph_prelude:9.2} us/step"
    );
    println!("steady state, {rounds} alternating rounds of {steps_per_round} steps:");
    println!("  eager:   min {eager_min:9.2} us/step, median {eager_median:9.2} us/step");
    println!("  graphed: min {graph_min:9.2} us/step, median {graph_median:9.2} us/step");
    println!(
        "  ratio graphed/eager: min {:.3}, median {:.3}",
        graph_min / eager_min,
        graph_median / eager_median
    );
    Ok(())
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// Train eagerly and through the full-iteration graph wrapper, and compare.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
    /// Rounds of alternating eager / wrapped blocks.
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// Steps per block.
    #[arg(long, default_value_t = 20)]
    steps_per_round: usize,
    /// Elements per weight / activation buffer.
    #[arg(long, default_value_t = 256)]
    len: usize,
    /// Layers of the model.
    #[arg(long, default_value_t = 8)]
    layers: usize,
}

impl accel_graph::BackendJob for Cli {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        println!("backend {}", backend_label(backend));
        train_loop(
            backend,
            self.rounds.max(1),
            self.steps_per_round.max(1),
            self.len.max(1),
            self.layers.max(1),
        )
    }
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    exit_code(
        cli.backend
            .choice()
            .and_then(|choice| accel_graph::run_on(choice, cli)?),
    )
}
