//! What the tensor-parallel tests share: ranks as threads on simulated devices, and the
//! scenario of `common` run on the host reference of the same partitioning.

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use accel_graph::{
    Result,
    collective::CommOptions,
    mock::{MockBackend, MockConfig},
};
use accel_graph_decode::{
    Config, DecodeElement,
    tp::{TpError, TpRank, TpReference, TpThreads},
};

use super::{Run, SEED, run_host};

/// How long a rank waits for another: failures show in seconds, not minutes.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A simulated device of its own for each call: a test's ranks share it, as CUDA ranks that
/// are threads of one process share its capture domain (a `global` capture on one would
/// forbid the others' unsafe calls), while tests running in parallel stay apart.
pub fn device() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(7_000);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Runs `body` on `world` ranks of `config`, each a thread with its own mock instance.
pub fn run_ranks<R: Send>(
    config: Config,
    world: usize,
    body: impl Fn(&TpRank<MockBackend>) -> Result<R> + Sync,
) -> std::result::Result<Vec<R>, TpError> {
    let device = device();
    TpThreads::new(config, world)?
        .comm_options(CommOptions::new().name("tp").timeout(TIMEOUT))
        .run(
            |_| MockBackend::with_config(MockConfig::shared(device)),
            body,
        )
}

/// `common::run_reference` on the host reference of `config` split over `world` ranks.
pub fn run_tp_reference<T: DecodeElement>(
    config: Config,
    world: usize,
    batch: usize,
    steps: usize,
) -> Run<T> {
    let mut reference = TpReference::<T>::random(config, SEED, world, batch).expect("splits");
    run_host(&config, batch, steps, |rows| reference.step(rows))
}
