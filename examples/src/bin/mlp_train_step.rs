//! The model step written once ([`accel_graph_examples::mlp`]), timed eagerly and graphed
//! through [`FullGraphWrapper`] at several batch sizes, and checked against the host reference
//! after a few steps. With `--dump DIR` it writes what `examples/bench/torch_mlp.py` needs to
//! run the same model in PyTorch from the same start (shapes, initial parameters, inputs, and
//! the parameters after `--check-steps` steps), so the two can be compared value by value and
//! side by side in time.
//!
//! `cargo run --release -p accel-graph-examples --bin mlp_train_step -- [--backend cuda]`
//!
//! Lines printed (and written to `DIR/accel_results.txt` with `--dump`):
//! `accel: batch=B eager_ms=E graphed_ms=G replays=N` and
//! `accel-check: batch=B max_param_diff=D max_param=M loss_first=L0 loss_last=L1`.
// Monomorphizing the full-iteration wrapper over the wgpu backend proves `Send + Sync`
// through wgpu-core's resource types, deeper than the default limit allows in a debug build.
#![recursion_limit = "256"]

use std::{path::PathBuf, time::Instant};

use accel_graph::{
    Backend, Result,
    utils::{FullGraphWrapper, Stage},
};
use accel_graph_examples::{
    BackendArg, backend_label, init_logging,
    mlp::{Mlp, MlpShape, reference},
};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "A perceptron's training step, eager vs graphed, on any backend")]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    /// Batch sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    batches: Vec<usize>,
    /// Features in.
    #[arg(long, default_value_t = 256)]
    input: usize,
    /// Hidden units.
    #[arg(long, default_value_t = 1024)]
    hidden: usize,
    /// Features out.
    #[arg(long, default_value_t = 256)]
    output: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.01)]
    lr: f32,
    /// Steps timed (after warm-up), for each of eager and graphed.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Steps from the initial parameters compared with the host reference (and dumped).
    #[arg(long, default_value_t = 10)]
    check_steps: usize,
    /// Writes shapes, initial parameters, inputs, parameters after the checked steps and the
    /// results into this directory, for the PyTorch comparison.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// Only compile (or load from the kernel cache) the model's kernels, print how long it
    /// took (`kernel-prepare: ms=..`), and exit: run twice with a fresh
    /// `ACCEL_GRAPH_KERNEL_CACHE` to see what the disk cache saves a second process.
    #[arg(long)]
    prepare_only: bool,
}

fn write_f32(path: &std::path::Path, data: &[f32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes)
}

/// Milliseconds per step of `run_steps(n)`, which issues `n` steps: the median of 5 timed
/// rounds of `n / 5` steps, each followed by a device synchronize.
fn time_steps<B: Backend>(
    b: &B,
    steps: usize,
    mut run_steps: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let per_round = (steps / 5).max(1);
    let mut rounds = Vec::new();
    for _ in 0..5 {
        b.synchronize()?;
        let start = Instant::now();
        run_steps(per_round)?;
        b.synchronize()?;
        rounds.push(start.elapsed().as_secs_f64() * 1e3 / per_round as f64);
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[2])
}

struct Job(Args);

impl accel_graph::BackendJob for Job {
    type Output = Result<()>;

    fn run<B: Backend>(self, b: &B) -> Result<()> {
        let args = &self.0;
        println!("backend: {}", backend_label(b));
        if args.prepare_only {
            let start = Instant::now();
            accel_graph_examples::mlp::prepare_kernels(b)?;
            println!(
                "kernel-prepare: ms={:.2}",
                start.elapsed().as_secs_f64() * 1e3
            );
            return Ok(());
        }
        let mut lines = Vec::new();
        if let Some(dir) = &args.dump {
            std::fs::create_dir_all(dir).map_err(|e| accel_graph::GraphError::io(dir, e))?;
        }
        for &batch in &args.batches {
            let shape = MlpShape {
                batch,
                input: args.input,
                hidden: args.hidden,
                output: args.output,
            };
            let init = Mlp::<B>::initial_params(shape, 42);
            let (x, t) = reference::inputs(shape, batch as u64);
            let (dx, dt) = (b.alloc_from(&x)?, b.alloc_from(&t)?);

            // Correctness: `check_steps` eager steps against the host reference.
            let model = Mlp::new(b, shape, args.lr, &init)?;
            let mut losses = Vec::new();
            for _ in 0..args.check_steps {
                let loss = model.step(&dx, &dt)?;
                losses.push(b.download(&loss)?[0]);
            }
            let got = b.download(model.params())?;
            let mut host = init.clone();
            for _ in 0..args.check_steps {
                reference::step(shape, args.lr, &mut host, &x, &t);
            }
            let max_param = host.iter().fold(0.0f32, |m, p| m.max(p.abs()));
            let diff = got
                .iter()
                .zip(&host)
                .fold(0.0f32, |m, (a, h)| m.max((a - h).abs()));
            let check = format!(
                "accel-check: batch={batch} max_param_diff={diff:e} max_param={max_param} \
                 loss_first={} loss_last={}",
                losses.first().copied().unwrap_or(f32::NAN),
                losses.last().copied().unwrap_or(f32::NAN)
            );
            println!("{check}");
            lines.push(check);
            if let Some(dir) = &args.dump {
                let io = |e| accel_graph::GraphError::io(dir, e);
                write_f32(&dir.join(format!("init_{batch}.f32")), &init).map_err(io)?;
                write_f32(&dir.join(format!("x_{batch}.f32")), &x).map_err(io)?;
                write_f32(&dir.join(format!("t_{batch}.f32")), &t).map_err(io)?;
                write_f32(&dir.join(format!("after_{batch}.f32")), &got).map_err(io)?;
            }

            // Eager timing.
            let eager = Mlp::new(b, shape, args.lr, &init)?;
            for _ in 0..3 {
                eager.step(&dx, &dt)?;
            }
            let eager_ms = time_steps(b, args.steps, |n| {
                for _ in 0..n {
                    eager.step(&dx, &dt)?;
                }
                Ok(())
            })?;

            // Graphed timing: one eager warm-up step, the capture, then replays.
            let graphed = Mlp::new(b, shape, args.lr, &init)?;
            let mut wrapper =
                FullGraphWrapper::new(b, |_b: &B, _stage, inputs: &[&[&B::Buffer<f32>]]| {
                    Ok(vec![graphed.step(inputs[0][0], inputs[0][1])?])
                })?;
            for _ in 0..3 {
                wrapper.run(Stage::Training, &[&[&dx, &dt]])?;
            }
            let graphed_ms = time_steps(b, args.steps, |n| {
                for _ in 0..n {
                    wrapper.run(Stage::Training, &[&[&dx, &dt]])?;
                }
                Ok(())
            })?;
            let line = format!(
                "accel: batch={batch} eager_ms={eager_ms:.4} graphed_ms={graphed_ms:.4} \
                 replays={}",
                wrapper.replays(Stage::Training)
            );
            println!("{line}");
            lines.push(line);
        }
        if let Some(dir) = &args.dump {
            let shapes = format!(
                "input={} hidden={} output={} lr={} check_steps={} batches={}\n",
                args.input,
                args.hidden,
                args.output,
                args.lr,
                args.check_steps,
                args.batches
                    .iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let io = |e| accel_graph::GraphError::io(dir, e);
            std::fs::write(dir.join("shape.txt"), shapes).map_err(io)?;
            std::fs::write(dir.join("accel_results.txt"), lines.join("\n") + "\n").map_err(io)?;
        }
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    let args = Args::parse();
    let choice = match args.backend.choice() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match accel_graph::run_on(choice, Job(args)) {
        Ok(Ok(())) => std::process::ExitCode::SUCCESS,
        Ok(Err(e)) | Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
