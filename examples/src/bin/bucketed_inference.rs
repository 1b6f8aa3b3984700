//! An inference loop over variable batch sizes with a [`BucketedGraphCache`] (vLLM's capture
//! sizes): every batch runs on the graph of the nearest captured size, padded up to it, and
//! batches beyond the largest size run eagerly. Each result is checked against an eager run;
//! the cache statistics and per-batch times are printed.
//!
//! Run on the mock, or any backend with `--backend`:
//! `cargo run -p accel-graph-examples --release --bin bucketed_inference -- [--backend auto]`

use std::{process::ExitCode, time::Instant};

use accel_graph::{
    Backend, DeviceBuffer, Result,
    utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes},
};
use accel_graph_examples::{BackendArg, backend_label, exit_code, init_logging};
use clap::Parser;

/// A "model" of portable ops, row-independent so padding rows cannot disturb real rows: four
/// layers `h = a_l h + c_l` with a residual `h += 0.5 x`, then an output scale.
fn model<B: Backend>(b: &B, x: &B::Buffer<f32>) -> Result<B::Buffer<f32>> {
    let h = b.alloc(x.len())?;
    b.copy(&h, x)?;
    for (a, c) in [(0.75, 0.125), (1.25, -0.5), (0.5, 0.25), (1.5, 0.0625)] {
        b.scale(&h, a)?;
        b.add_scalar(&h, c)?;
        b.axpy(&h, 0.5, x)?;
    }
    b.scale(&h, 2.0)?;
    Ok(h)
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

fn inference<B: Backend>(backend: &B, batches: usize, hidden: usize) -> Result<()> {
    let forward = |b: &B, x: &[&B::Buffer<f32>]| Ok(vec![model(b, x[0])?]);

    let sizes = CaptureSizes::vllm_default();
    let mut cache = BucketedGraphCache::new(
        backend,
        forward,
        sizes.clone(),
        vec![hidden],
        BucketedCacheOptions::new(),
    )?;
    let start = Instant::now();
    let captured = cache.capture_all()?;
    let capture_time = start.elapsed();

    // Batch sizes as a serving loop sees them: mostly small, some large, a few beyond 256.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next_batch = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        match state % 10 {
            0..=5 => 1 + (state >> 8) as usize % 16,
            6..=8 => 1 + (state >> 8) as usize % 256,
            _ => 257 + (state >> 8) as usize % 64,
        }
    };
    let (mut cached_time, mut eager_time) = (0.0, 0.0);
    let mut graph_elements = 0usize;
    for i in 0..batches {
        let rows = next_batch();
        let input: Vec<f32> = (0..rows * hidden)
            .map(|k| ((i + k) % 32) as f32 / 16.0)
            .collect();

        backend.synchronize()?;
        let start = Instant::now();
        let run = cache.run(&[&input])?;
        let got = run.download(0)?;
        cached_time += start.elapsed().as_secs_f64();
        let bucket = run.bucket();
        graph_elements += bucket.unwrap_or(0) * hidden;
        drop(run);

        let start = Instant::now();
        let x = backend.alloc_from(&input)?;
        let want = backend.download(&forward(backend, &[&x])?[0])?;
        eager_time += start.elapsed().as_secs_f64();
        assert_eq!(
            bits(&got),
            bits(&want),
            "batch {i} of {rows} rows (bucket {bucket:?}) differs"
        );
    }

    let stats = cache.stats();
    println!(
        "backend {}: {batches} batches, rows of {hidden} elements, {} capture sizes ({}..={})",
        backend.kind(),
        sizes.len(),
        sizes.as_slice()[0],
        sizes.largest()
    );
    println!("captured {captured} graphs into one pool in {capture_time:?}");
    println!("stats: {stats}");
    println!(
        "padding overhead: {:.1}% of the elements computed by graphs",
        100.0 * stats.padded_elements as f64 / graph_elements.max(1) as f64
    );
    println!(
        "time per batch (upload + run + download): cache {:.2} us, eager {:.2} us, ratio {:.3}",
        cached_time * 1e6 / batches as f64,
        eager_time * 1e6 / batches as f64,
        cached_time / eager_time
    );
    println!("all {batches} results identical to eager runs bit for bit");
    Ok(())
}

/// Run variable batch sizes through the bucketed graph cache, checking against eager runs.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
    /// Batches to run.
    #[arg(long, default_value_t = 500)]
    batches: usize,
    /// Elements per row.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
}

impl accel_graph::BackendJob for Cli {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        println!("backend {}", backend_label(backend));
        inference(backend, self.batches, self.hidden.max(1))
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
