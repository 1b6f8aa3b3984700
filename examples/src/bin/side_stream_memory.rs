//! Benchmark: the memory a multi-stream capture reserves. One step of a training-like loop is
//! captured on a main stream that forks a side stream: the side branch computes a chain of
//! eight temporaries of 4 MiB each (every one freed inside the capture), the main branch four
//! temporaries of its own, and the branches join into the step's output. Prints the bytes the
//! graph's pool reserves, checks one replay against the eager step, and — given the file
//! `backend-cuda/bench/torch_side_stream_memory.py` wrote for the same capture in PyTorch —
//! prints accel-graph ÷ PyTorch (target ≤ 1.0).
//!
//! `cargo run --release -p accel-graph-examples --bin side_stream_memory [-- --backend cuda
//! --torch torch_side_stream_memory.txt]`

use std::{collections::HashMap, process::ExitCode};

use accel_graph::{AcceleratorGraph, Backend, BackendJob, GraphOptions, Result};
use accel_graph_examples::{BackendArg, backend_label, exit_code, init_logging};
use clap::Parser;

/// Pool bytes of a multi-stream capture, against PyTorch's for the same capture.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
    /// The file `torch_side_stream_memory.py` wrote ("pool_reserved_bytes N").
    #[arg(long)]
    torch: Option<String>,
}

/// `f32` elements per MiB.
const MIB: usize = 1 << 18;
/// Elements of the input, the outputs and every temporary (4 MiB).
const ELEMS: usize = 4 * MIB;
/// Temporaries of the side branch.
const SIDE_TEMPS: usize = 8;
/// Temporaries of the main branch.
const MAIN_TEMPS: usize = 4;

/// One step, issued with the main stream current: the same calls, in the same order, as
/// `step` in `torch_side_stream_memory.py`. Returns the output.
fn step<B: Backend>(b: &B, side: &B::Stream, x: &B::Buffer<f32>) -> Result<B::Buffer<f32>> {
    let (fork, join) = (b.new_event()?, b.new_event()?);
    // side.wait_stream(main)
    b.record_event(&fork)?;
    let acc_side = {
        let _side = b.use_stream(side)?;
        b.wait_event(&fork)?;
        let acc_side = b.alloc(ELEMS)?;
        b.fill(&acc_side, 0.0)?;
        let mut prev = b.alloc(ELEMS)?;
        b.copy(&prev, x)?;
        for _ in 1..SIDE_TEMPS {
            let t = b.alloc(ELEMS)?;
            b.copy(&t, &prev)?;
            b.scale(&t, 0.5)?;
            b.add_scalar(&t, 1.0)?;
            b.axpy(&acc_side, 1.0, &t)?;
            // The previous temporary is freed here, on the side stream.
            prev = t;
        }
        drop(prev);
        b.record_event(&join)?;
        acc_side
    };
    let acc_main = b.alloc(ELEMS)?;
    b.fill(&acc_main, 0.0)?;
    for i in 0..MAIN_TEMPS {
        let m = b.alloc(ELEMS)?;
        b.copy(&m, x)?;
        b.add_scalar(&m, i as f32)?;
        b.axpy(&acc_main, 2.0, &m)?;
    }
    // main.wait_stream(side)
    b.wait_event(&join)?;
    let out = b.alloc(ELEMS)?;
    b.copy(&out, &acc_main)?;
    b.axpy(&out, 1.0, &acc_side)?;
    Ok(out)
}

/// "key value" lines.
fn read_results(path: &str) -> Result<HashMap<String, f64>> {
    let text = std::fs::read_to_string(path).map_err(|source| accel_graph::GraphError::Io {
        path: path.into(),
        source,
    })?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_owned(), value.trim().parse().ok()?))
        })
        .collect())
}

fn mib(bytes: f64) -> f64 {
    bytes / (1 << 20) as f64
}

impl BackendJob for Cli {
    type Output = Result<()>;
    fn run<B: Backend>(self, b: &B) -> Result<()> {
        println!("backend {}", backend_label(b));
        let main = b.new_stream()?;
        let side = b.new_stream()?;
        let x = b.alloc_from(&vec![1.0; ELEMS])?;
        let eager = {
            let _main = b.use_stream(&main)?;
            let out = step(b, &side, &x)?;
            b.synchronize()?;
            b.download(&out)?
        };
        let mut graph = b.graph(GraphOptions::new())?;
        let out = b.capture_on(&main, &mut graph, || step(b, &side, &x))?;
        let pool = graph.pool()?;
        let reserved = b.memory_stats().pool(pool).map_or(0, |p| p.reserved_bytes);
        {
            let _main = b.use_stream(&main)?;
            b.fill(&out, 0.0)?;
            graph.replay()?;
        }
        b.synchronize()?;
        let replayed = b.download(&out)?;
        let same = replayed
            .iter()
            .zip(&eager)
            .all(|(r, e)| r.to_bits() == e.to_bits());
        println!(
            "step: {SIDE_TEMPS} side temporaries and {MAIN_TEMPS} main temporaries of {} MiB, \
             two accumulators, one output; replay equals eager: {same}",
            ELEMS / MIB
        );
        println!("pool_reserved_bytes {reserved}");
        println!(
            "accel-graph: the graph's pool reserves {:.1} MiB",
            mib(reserved as f64)
        );
        if let Some(path) = &self.torch {
            match read_results(path)?.get("pool_reserved_bytes") {
                Some(&torch) if torch > 0.0 => {
                    let ratio = reserved as f64 / torch;
                    println!(
                        "PyTorch: {:.1} MiB; accel-graph / PyTorch = {ratio:.3} (target <= 1.0: {})",
                        mib(torch),
                        if ratio <= 1.0 { "met" } else { "MISSED" }
                    );
                }
                _ => println!("{path}: no pool_reserved_bytes line"),
            }
        }
        if !same {
            return Err(accel_graph::GraphError::ArgumentMismatch(
                "the replayed step differs from the eager step".to_owned(),
            ));
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
