//! Benchmark: per-node cost of capturing and replaying graphs of 1k/10k/100k tiny ops, side by
//! side with issuing the same ops eagerly, on the mock (default) or any backend.
//!
//! `cargo run --release -p accel-graph-examples --bin bench_replay [-- --backend auto]`

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use accel_graph::{AcceleratorGraph, Backend, BackendJob, CaptureExt, GraphOptions, Result};
use accel_graph_examples::{BackendArg, backend_label, exit_code, init_logging};
use clap::Parser;

/// Per-node capture and replay cost against eager execution.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
    /// Graph sizes in nodes.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    sizes: Vec<usize>,
    /// Timed repetitions per size (the median is reported).
    #[arg(long, default_value_t = 7)]
    reps: usize,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ns_per(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}

/// One tiny op per node, alternating kinds so the plan is not a single repeated op.
fn issue<B: Backend>(
    backend: &B,
    x: &B::Buffer<f32>,
    y: &B::Buffer<f32>,
    nodes: usize,
) -> Result<()> {
    for i in 0..nodes {
        match i % 3 {
            0 => backend.add_scalar(x, 1.0)?,
            1 => backend.scale(x, 0.5)?,
            _ => backend.axpy(y, 0.25, x)?,
        }
    }
    Ok(())
}

impl BackendJob for Cli {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        let reps = self.reps.max(1);
        println!("backend {}, median of {reps} runs", backend_label(backend));
        println!(
            "{:>8} | {:>14} | {:>14} | {:>14} | {:>13}",
            "nodes", "capture ns/node", "replay ns/node", "eager ns/op", "eager/replay"
        );
        let stream = backend.new_stream()?;
        let _current = backend.use_stream(&stream)?;
        let x = backend.alloc_from(&[1.0])?;
        let y = backend.alloc_from(&[0.0])?;
        for &nodes in &self.sizes {
            let mut capture = Vec::new();
            let mut replay = Vec::new();
            let mut eager = Vec::new();
            for _ in 0..reps {
                let mut graph = backend.graph(GraphOptions::new())?;
                let t = Instant::now();
                graph.capture(|| issue(backend, &x, &y, nodes))?;
                capture.push(t.elapsed());

                graph.replay()?; // warm-up
                backend.synchronize()?;
                let t = Instant::now();
                graph.replay()?;
                backend.synchronize()?;
                replay.push(t.elapsed());

                let t = Instant::now();
                issue(backend, &x, &y, nodes)?;
                backend.synchronize()?;
                eager.push(t.elapsed());
            }
            let (c, r, e) = (median(capture), median(replay), median(eager));
            println!(
                "{:>8} | {:>14.1} | {:>14.1} | {:>14.1} | {:>12.2}x",
                nodes,
                ns_per(c, nodes),
                ns_per(r, nodes),
                ns_per(e, nodes),
                e.as_secs_f64() / r.as_secs_f64()
            );
        }
        Ok(())
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
