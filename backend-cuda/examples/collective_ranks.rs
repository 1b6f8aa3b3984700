//! The collective cases (conformance §17) as one rank of ranks that are processes: each
//! process runs every case as its rank, on GPU `LOCAL_RANK`, meeting the others in the
//! directory `ACCEL_GRAPH_STORE` (the environment a torchrun-style launcher sets: `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`). `scripts/device/run-multi.sh` starts one process per GPU.
//!
//! ```text
//! RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 ACCEL_GRAPH_STORE=$(mktemp -d) \
//!     cargo run --release -p accel-graph-cuda --features nccl --example collective_ranks -- [--backend cuda|mock]
//! ```
//!
//! Each case prints one line per rank (`passed`, `skipped: reason` or `FAILED: message`); the
//! exit status is non-zero when a case failed on this rank. (Mock ranks meet in memory, so
//! with `--backend mock` only a world of one process is possible.)

use std::{process::ExitCode, sync::Arc};

use accel_graph_api::{Backend, BackendKind, Result, collective::LaunchEnv};
use accel_graph_conformance::{Outcome, RankCtx, RankFactory, collective_cases, run_as_rank};
use accel_graph_cuda::CudaBackend;
use accel_graph_mock::MockBackend;

fn run<B: Backend>(factory: RankFactory<B>, env: &LaunchEnv) -> Result<bool> {
    let store = Arc::new(env.store()?);
    // Which rendezvous the launcher's environment chose, so a log shows how the ranks met.
    let meeting = match (&env.store_dir, &env.master_addr, env.master_port) {
        (Some(dir), _, _) => format!("the directory {}", dir.display()),
        (None, Some(addr), Some(port)) => format!("rank 0's TCP store at {addr}:{port}"),
        _ => "an unnamed store".to_owned(),
    };
    println!(
        "collective_ranks: rank {} of {} (device {}) meets the others through {meeting}",
        env.rank, env.world_size, env.local_rank
    );
    let mut all = true;
    for case in collective_cases::<B>() {
        // The cases open their own device as `factory(rank)`: map the rank to this host's GPU.
        let local = env.local_rank;
        let open: RankFactory<B> = {
            let factory = Arc::clone(&factory);
            Arc::new(move |_rank| factory(local))
        };
        let outcome = match RankCtx::new(open, env.rank, env.world_size, store.clone(), case.name) {
            Ok(ctx) => run_as_rank(&case, &ctx),
            Err(e) => Outcome::Skipped(format!("{e}")),
        };
        let line = match &outcome {
            Outcome::Passed => "passed".to_owned(),
            Outcome::Skipped(reason) => format!("skipped: {reason}"),
            Outcome::Failed(message) => {
                all = false;
                format!("FAILED: {message}")
            }
        };
        println!(
            "collective_ranks: rank {} of {}: {}: {line}",
            env.rank, env.world_size, case.name
        );
    }
    Ok(all)
}

fn main() -> ExitCode {
    let backend = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => BackendKind::Cuda,
        [flag, name] if flag == "--backend" => match name.parse() {
            Ok(kind) => kind,
            Err(e) => {
                eprintln!("collective_ranks: {e}");
                return ExitCode::from(2);
            }
        },
        other => {
            eprintln!("collective_ranks: unexpected arguments {other:?} (--backend cuda|mock)");
            return ExitCode::from(2);
        }
    };
    let result = LaunchEnv::from_env().and_then(|env| match backend {
        BackendKind::Mock => run::<MockBackend>(Arc::new(|_| Ok(MockBackend::new())), &env),
        _ => run::<CudaBackend>(Arc::new(CudaBackend::new), &env),
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            println!("collective_ranks: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
