//! Benchmark: a tensor-parallel-style step of 64 layers, each a small kernel (`x += 1`) and an
//! all-reduce of its output (4 to 64 KiB, cycling), then `x *= 1/world` on more than one rank
//! — issued eagerly, and as one captured graph replayed (10,000 times by default), on every
//! rank. Every replay is checked: after `n` steps every element is `n`, exactly (for worlds
//! that are powers of two, where `1/world` is exact), on every rank; waits are bounded, so a
//! missing rank is an error, not a hang. `backend-cuda/bench/torch_allreduce_graph.py` does the
//! same work with `torch.distributed` (NCCL) and `torch.cuda.graph`.
//!
//! With one rank, NCCL's in-place all-reduce moves no data and adds no graph node (there is
//! nothing to reduce), in PyTorch as here: the figures then measure the cost of issuing the
//! collectives, which the graph removes. The collective's own cost shows with two GPUs or more.
//!
//! ```text
//! cargo run --release -p accel-graph-cuda --features nccl --example allreduce_graph -- \
//!     [--backend cuda|mock] [--launch threads|env|spawn] [--ranks N] [--replays 10000] \
//!     [--eager 1000] [--layers 64]
//! ```
//!
//! * `--launch threads` (default): `--ranks` ranks as threads of this process, rank `r` on GPU
//!   `r`, meeting in memory.
//! * `--launch env`: this process is one rank, as a torchrun-style launcher describes it
//!   (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `ACCEL_GRAPH_STORE`, optionally
//!   `ACCEL_GRAPH_COMM_ID`): see `scripts/device/run-multi.sh`.
//! * `--launch spawn`: this process makes the communicator's id, starts `--ranks` copies of
//!   itself with `--launch env` and the id in `ACCEL_GRAPH_COMM_ID`, and waits for them (it
//!   must live until they have joined: NCCL's bootstrap runs in the process that made the id).

use std::{
    process::{Command, ExitCode},
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, BackendKind, CaptureErrorMode, GraphError, GraphOptions, Result,
    collective::{CommId, CommOptions, Communicator, LaunchEnv, MemoryStore, ReduceOp},
};
use accel_graph_cuda::CudaBackend;
use accel_graph_mock::MockBackend;

/// Longest wait for the device's work (and for the other ranks).
const WAIT: Duration = Duration::from_secs(300);
/// Steps before the timed ones (eager, then replays).
const WARM_UP: usize = 5;

#[derive(Debug, Clone)]
struct Args {
    backend: BackendKind,
    launch: String,
    ranks: usize,
    replays: usize,
    eager: usize,
    layers: usize,
}

fn parse() -> std::result::Result<Args, String> {
    let mut args = Args {
        backend: BackendKind::Cuda,
        launch: "threads".into(),
        ranks: 1,
        replays: 10_000,
        eager: 1_000,
        layers: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--backend" => args.backend = value()?.parse().map_err(|e| format!("{e}"))?,
            "--launch" => args.launch = value()?,
            "--ranks" => args.ranks = number(value()?)?,
            "--replays" => args.replays = number(value()?)?,
            "--eager" => args.eager = number(value()?)?,
            "--layers" => args.layers = number(value()?)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// Elements of layer `l`'s message: 4, 8, 16, 32, 64 KiB of `f32`, cycling.
fn elements(layer: usize) -> usize {
    (4096 << (layer % 5)) / 4
}

/// One step of the model: per layer, `x += 1`, `x = Σ x`, and on several ranks `x /= world`.
fn step<B: Backend>(comm: &Communicator<B>, xs: &[B::Buffer<f32>]) -> Result<()> {
    let b = comm.backend();
    let world = comm.world_size();
    for x in xs {
        b.add_scalar(x, 1.0)?;
        comm.all_reduce(x, ReduceOp::Sum)?;
        if world > 1 {
            b.scale(x, 1.0 / world as f32)?;
        }
    }
    Ok(())
}

/// What one rank measured.
struct Figures {
    eager_us: f64,
    graphed_us: f64,
    exact: bool,
    worst: f32,
    expected: f32,
}

fn bench<B: Backend>(comm: &Communicator<B>, args: &Args) -> Result<Figures> {
    let b = comm.backend();
    let stream = b.new_stream()?;
    let _on = b.use_stream(&stream)?;
    let xs = (0..args.layers)
        .map(|l| b.alloc_from(&vec![0.0f32; elements(l)]))
        .collect::<Result<Vec<_>>>()?;
    for _ in 0..WARM_UP {
        step(comm, &xs)?;
    }
    comm.wait(WAIT)?;

    let t = Instant::now();
    for _ in 0..args.eager {
        step(comm, &xs)?;
    }
    comm.wait(WAIT)?;
    let eager_us = t.elapsed().as_secs_f64() * 1e6 / args.eager.max(1) as f64;

    let mut graph =
        b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
    comm.barrier()?;
    b.capture_on(&stream, &mut graph, || step(comm, &xs))?;
    comm.barrier()?;
    for _ in 0..WARM_UP {
        graph.replay()?;
    }
    comm.wait(WAIT)?;
    let t = Instant::now();
    for _ in 0..args.replays {
        graph.replay()?;
    }
    comm.wait(WAIT)?;
    let graphed_us = t.elapsed().as_secs_f64() * 1e6 / args.replays.max(1) as f64;

    let expected = (WARM_UP * 2 + args.eager + args.replays) as f32;
    let mut worst = 0.0f32;
    for x in &xs {
        for v in b.download(x)? {
            worst = worst.max((v - expected).abs());
        }
    }
    Ok(Figures {
        eager_us,
        graphed_us,
        exact: worst == 0.0,
        worst,
        expected,
    })
}

fn report<B: Backend>(comm: &Communicator<B>, args: &Args, launch: &str, f: &Figures) {
    println!(
        "allreduce_graph: impl=accel-graph rank={} world={} launch={launch} backend={} ({}) \
         layers={} messages=4-64KiB eager_us_per_iter={:.1} graphed_us_per_iter={:.1} \
         speedup={:.2} replays={} exact={} (every element {} on this rank, worst error {})",
        comm.rank(),
        comm.world_size(),
        comm.backend().kind(),
        comm.backend().capabilities().device_name,
        args.layers,
        f.eager_us,
        f.graphed_us,
        f.eager_us / f.graphed_us,
        args.replays,
        if f.exact { "yes" } else { "no" },
        f.expected,
        f.worst
    );
}

/// Runs one rank: its communicator, the benchmark, its line.
fn rank<B: Backend>(comm: Communicator<B>, args: &Args, launch: &str) -> Result<bool> {
    let figures = bench(&comm, args)?;
    report(&comm, args, launch, &figures);
    // Worlds that are not powers of two round at `x / world`.
    Ok(figures.exact || !comm.world_size().is_power_of_two())
}

fn launch<B: Backend>(open: impl Fn(usize) -> Result<B> + Sync, args: &Args) -> Result<bool> {
    match args.launch.as_str() {
        "threads" => {
            let store = MemoryStore::new();
            let results: Vec<Result<bool>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..args.ranks)
                    .map(|r| {
                        let (store, open) = (store.clone(), &open);
                        s.spawn(move || {
                            let b = open(r)?;
                            let options = CommOptions::new().name("allreduce-graph").timeout(WAIT);
                            let comm =
                                Communicator::with_options(&b, store, r, args.ranks, options)?;
                            rank(comm, args, "threads")
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or(Ok(false)))
                    .collect()
            });
            let mut all = true;
            for (r, result) in results.into_iter().enumerate() {
                match result {
                    Ok(ok) => all &= ok,
                    Err(e) => {
                        println!("allreduce_graph: rank {r} FAILED: {e}");
                        all = false;
                    }
                }
            }
            Ok(all)
        }
        "env" => {
            let env = LaunchEnv::from_env()?;
            let b = open(env.local_rank)?;
            let options = CommOptions::new().name("allreduce-graph").timeout(WAIT);
            let comm = env.communicator(&b, options)?;
            let launch = if env.comm_id.is_some() {
                "processes (id from the environment)"
            } else {
                "processes (id through the store)"
            };
            rank(comm, args, launch)
        }
        "spawn" => {
            // The id's bootstrap lives in this process, which waits for the ranks.
            let id = Communicator::unique_id(&open(0)?)?;
            let dir = std::env::temp_dir().join(format!("allreduce-graph-{}", std::process::id()));
            let exe = std::env::current_exe().map_err(|e| GraphError::io("current_exe", e))?;
            let children: Vec<_> = (0..args.ranks)
                .map(|r| {
                    Command::new(&exe)
                        .args(["--backend", args.backend.name(), "--launch", "env"])
                        .args(["--replays", &args.replays.to_string()])
                        .args(["--eager", &args.eager.to_string()])
                        .args(["--layers", &args.layers.to_string()])
                        .env("RANK", r.to_string())
                        .env("WORLD_SIZE", args.ranks.to_string())
                        .env("LOCAL_RANK", r.to_string())
                        .env(LaunchEnv::STORE_ENV, &dir)
                        .env(CommId::ENV, id.to_hex())
                        .spawn()
                        .map_err(|e| GraphError::io(&exe, e))
                })
                .collect::<Result<_>>()?;
            let mut all = true;
            for mut child in children {
                all &= child.wait().map_err(|e| GraphError::io(&exe, e))?.success();
            }
            let _ = std::fs::remove_dir_all(&dir);
            Ok(all)
        }
        other => Err(GraphError::ArgumentMismatch(format!(
            "--launch {other}: expected threads, env or spawn"
        ))),
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("allreduce_graph: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match args.backend {
        BackendKind::Mock => launch(|_| Ok(MockBackend::new()), &args),
        BackendKind::Cuda => {
            match CudaBackend::new(0).and_then(|b| b.nccl_version()) {
                Ok(version) => println!("allreduce_graph: NCCL {version}"),
                Err(e) => {
                    println!("allreduce_graph: skipped: {e}");
                    return ExitCode::SUCCESS;
                }
            }
            launch(CudaBackend::new, &args)
        }
        other => Err(GraphError::Unsupported {
            what: format!("allreduce_graph on {other}: no collectives"),
        }),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!("allreduce_graph: FAILED (inexact results or a failed rank)");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("allreduce_graph: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
