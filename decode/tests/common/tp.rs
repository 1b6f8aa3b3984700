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
    model::ReferenceStep,
    tp::{TpError, TpRank, TpReference, TpThreads},
};

use super::{Run, SEED, rows};

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
    let mut last = vec![0u32; batch];
    let mut tokens = Vec::new();
    let mut logits = Vec::new();
    for t in 0..steps {
        let ReferenceStep {
            tokens: next,
            logits: l,
        } = reference
            .step(&rows(&config, t, batch, &last))
            .expect("valid rows");
        last.clone_from(&next);
        tokens.push(next);
        logits = l;
    }
    Run { tokens, logits }
}

/// The bits of `v`, so that comparisons are bit for bit (even a NaN would have to match).
pub fn bits<T: DecodeElement>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_f32().to_bits()).collect()
}
