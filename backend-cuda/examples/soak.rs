//! Soak: one million replays of a small graph. Free device memory (`cuMemGetInfo`) must be
//! the same before and after (measured after a warm-up), every replay must succeed, and the
//! result must count every replay.
//!
//! Run: `cargo run --release -p accel-graph-cuda --example soak -- [replays]`.

use std::{process::ExitCode, time::Instant};

use accel_graph_api::prelude::*;
use accel_graph_cuda::CudaBackend;

fn main() -> ExitCode {
    let replays: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    match run(replays) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("soak: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(replays: u64) -> Result<bool> {
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            println!("soak: skipped: {e}");
            return Ok(true);
        }
    };
    let stream = backend.new_stream()?;
    let _current = backend.use_stream(&stream)?;
    let counter = backend.alloc_from(&[0.0; 256])?;
    let out = backend.alloc(256)?;
    let mut graph = backend.graph(GraphOptions::new())?;
    graph.capture(|| {
        // A pool allocation inside the capture, so pool memory is part of the soak.
        let tmp = backend.alloc(256)?;
        backend.fill(&tmp, 1.0)?;
        backend.axpy(&counter, 1.0, &tmp)?;
        backend.copy(&out, &counter)
    })?;
    const WARM_UP: u64 = 1000;
    for _ in 0..WARM_UP {
        graph.replay()?;
    }
    backend.synchronize()?;
    let (free_before, total) = backend.mem_get_info()?;
    let stats_before = backend.memory_stats();
    let t = Instant::now();
    for i in 0..replays {
        graph.replay()?;
        if i % 10_000 == 9_999 {
            backend.stream_synchronize(&stream)?;
        }
    }
    backend.synchronize()?;
    let secs = t.elapsed().as_secs_f64();
    let (free_after, _) = backend.mem_get_info()?;
    let stats_after = backend.memory_stats();
    let value = backend.download(&out)?[0];
    let expected = (WARM_UP + replays) as f32;
    println!(
        "soak: {replays} replays in {secs:.2} s ({:.2} us/replay); free memory before {free_before} \
         after {free_after} (total {total}); backend stats equal: {}; counter {value} (expected {expected})",
        secs * 1e6 / replays as f64,
        stats_before == stats_after
    );
    let clean = free_before == free_after && stats_before == stats_after && value == expected;
    println!("soak: {}", if clean { "clean" } else { "NOT clean" });
    Ok(clean)
}
