//! §17: collectives across ranks — the cases run with several ranks at once, one backend
//! instance (one device) per rank, and this crate's harness for them.
//!
//! A [`CollectiveCase`]'s body runs once per rank, on that rank's thread (ranks as threads of
//! one process, [`run_collective_case`]) or as this process's rank (ranks as processes,
//! [`run_as_rank`]); the case passes when every rank's body passes. A test target runs the
//! suite for a list of world sizes with [`collectives_main!`](crate::collectives_main):
//!
//! ```text
//! // backend-x/tests/collectives.rs: rank r on device r, worlds of 1, 2 and 4 ranks.
//! accel_graph_conformance::collectives_main!(|rank| XBackend::new(rank), [1, 2, 4]);
//! ```
//!
//! A world the factory cannot open (fewer devices than ranks), or a backend without
//! collectives, skips its cases with the reason, as a missing capability does.

mod cases;

use std::{
    panic::{self, AssertUnwindSafe},
    process::ExitCode,
    sync::{Arc, mpsc},
    time::{Duration, Instant},
};

use accel_graph_api::{
    Backend, GraphError,
    collective::{CommOptions, Communicator, MemoryStore, Store},
};
use libtest_mimic::{Arguments, Completion, Failed, Trial};

use crate::{CaseResult, Outcome, report::panic_message};

/// Opens rank `r`'s backend instance (its device): called once per rank for each case, and
/// again when a case needs another instance of a rank's device.
pub type RankFactory<B> = Arc<dyn Fn(usize) -> Result<B, GraphError> + Send + Sync>;

/// How long a case's ranks may run before the harness reports a hang.
const CASE_DEADLINE: Duration = Duration::from_secs(120);

/// What a rank's body gets: its backend, its rank, the world, and where the ranks meet.
pub struct RankCtx<B: Backend> {
    /// This rank's backend instance.
    pub backend: B,
    /// This rank.
    pub rank: usize,
    /// Ranks taking part in the case.
    pub world_size: usize,
    /// Where the ranks meet (one per case run for threads; the launcher's directory for
    /// processes).
    pub store: Arc<dyn Store>,
    /// Prefix of the case's communicator names (unique per case in a shared store).
    pub namespace: String,
    /// Timeout of the case's communicators, unless the case sets its own.
    pub timeout: Duration,
    factory: RankFactory<B>,
}

impl<B: Backend> RankCtx<B> {
    /// The context of rank `rank` of `world_size`, meeting in `store`, for case `case` (the
    /// case's number names its communicators).
    pub fn new(
        factory: RankFactory<B>,
        rank: usize,
        world_size: usize,
        store: Arc<dyn Store>,
        case: &str,
    ) -> Result<Self, GraphError> {
        Ok(RankCtx {
            backend: factory(rank)?,
            rank,
            world_size,
            store,
            namespace: case.split_whitespace().next().unwrap_or(case).to_owned(),
            timeout: Duration::from_secs(30),
            factory,
        })
    }

    /// A communicator of the case's ranks named `suffix`, over `world_size` ranks, with
    /// `timeout`.
    pub fn comm_with(
        &self,
        suffix: &str,
        world_size: usize,
        timeout: Duration,
    ) -> Result<Communicator<B>, GraphError> {
        Communicator::with_options(
            &self.backend,
            Arc::clone(&self.store),
            self.rank,
            world_size,
            CommOptions::new()
                .name(format!("{}-{suffix}", self.namespace))
                .timeout(timeout),
        )
    }

    /// The case's communicator named `suffix` over every rank, with the default timeout.
    pub fn comm(&self, suffix: &str) -> Result<Communicator<B>, String> {
        self.comm_with(suffix, self.world_size, self.timeout)
            .map_err(|e| {
                format!(
                    "rank {}: making communicator {suffix}: {e:?}: {e}",
                    self.rank
                )
            })
    }

    /// Another instance of this rank's device.
    pub fn another_instance(&self) -> Result<B, String> {
        (self.factory)(self.rank).map_err(|e| format!("opening another instance: {e}"))
    }
}

/// The body of a collective case, run on each rank.
type Body<B> = Arc<dyn Fn(&RankCtx<B>) -> CaseResult + Send + Sync>;

/// One case of §17.
pub struct CollectiveCase<B: Backend> {
    /// Stable, unique name, starting with its rule's number (`"17.05 ..."`).
    pub name: &'static str,
    /// The fewest ranks the case needs (a mismatch needs two).
    pub min_ranks: usize,
    body: Body<B>,
}

impl<B: Backend> Clone for CollectiveCase<B> {
    fn clone(&self) -> Self {
        CollectiveCase {
            name: self.name,
            min_ranks: self.min_ranks,
            body: Arc::clone(&self.body),
        }
    }
}

impl<B: Backend> std::fmt::Debug for CollectiveCase<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectiveCase")
            .field("name", &self.name)
            .field("min_ranks", &self.min_ranks)
            .finish()
    }
}

impl<B: Backend> CollectiveCase<B> {
    /// A case named `name` for at least `min_ranks` ranks.
    pub fn new(
        name: &'static str,
        min_ranks: usize,
        body: impl Fn(&RankCtx<B>) -> CaseResult + Send + Sync + 'static,
    ) -> Self {
        CollectiveCase {
            name,
            min_ranks,
            body: Arc::new(body),
        }
    }

    /// Why the case is skipped with `world_size` ranks, if it is.
    pub fn skip_reason(&self, world_size: usize) -> Option<String> {
        (world_size < self.min_ranks).then(|| {
            format!(
                "needs at least {} ranks, the run has {world_size} (one per device)",
                self.min_ranks
            )
        })
    }
}

/// The cases of §17, in running order.
///
/// ```
/// let cases = accel_graph_conformance::collective_cases::<accel_graph_mock::MockBackend>();
/// assert!(cases.iter().all(|c| c.name.starts_with("17.")));
/// ```
pub fn collective_cases<B: Backend>() -> Vec<CollectiveCase<B>> {
    cases::cases()
}

/// Runs `case`'s body as rank `ctx.rank` (one process per rank: the other ranks run it in
/// their processes), with the per-rank checks: no panic, memory returned, current stream
/// restored. A backend without collectives skips with the reason it gives.
pub fn run_as_rank<B: Backend>(case: &CollectiveCase<B>, ctx: &RankCtx<B>) -> Outcome {
    if let Some(reason) = case.skip_reason(ctx.world_size) {
        return Outcome::Skipped(reason);
    }
    if let Err(e) = ctx.backend.collectives() {
        return Outcome::Skipped(format!("no collectives: {e}"));
    }
    let memory_before = ctx.backend.memory_stats();
    let stream_before = ctx.backend.current_stream();
    match panic::catch_unwind(AssertUnwindSafe(|| (case.body)(ctx))) {
        Ok(Ok(())) => {
            match crate::report::left_behind(&ctx.backend, &memory_before, &stream_before) {
                None => Outcome::Passed,
                Some(message) => Outcome::Failed(format!("rank {}: {message}", ctx.rank)),
            }
        }
        Ok(Err(message)) => Outcome::Failed(format!("rank {}: {message}", ctx.rank)),
        Err(payload) => Outcome::Failed(format!(
            "rank {}: panicked: {}",
            ctx.rank,
            panic_message(&*payload)
        )),
    }
}

/// Runs `case` with `world_size` ranks as threads of this process, rank `r` on `factory(r)`,
/// meeting in a fresh [`MemoryStore`]. Passed when every rank passes; skipped when the world
/// is too small for the case, the factory cannot open a rank (fewer devices than ranks), or
/// the backend has no collectives; failed with every failing rank's message otherwise — and
/// when a rank does not finish within two minutes (a hang: its thread is left behind).
pub fn run_collective_case<B: Backend>(
    factory: &RankFactory<B>,
    world_size: usize,
    case: &CollectiveCase<B>,
) -> Outcome {
    if let Some(reason) = case.skip_reason(world_size) {
        return Outcome::Skipped(reason);
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut contexts = Vec::with_capacity(world_size);
    for rank in 0..world_size {
        match RankCtx::new(
            Arc::clone(factory),
            rank,
            world_size,
            Arc::clone(&store),
            case.name,
        ) {
            Ok(ctx) => contexts.push(ctx),
            Err(e) if rank == 0 => return Outcome::Skipped(format!("{e}")),
            Err(e) => {
                return Outcome::Skipped(format!(
                    "a world of {world_size} ranks needs {world_size} devices: opening rank \
                     {rank}: {e}"
                ));
            }
        }
    }
    if let Err(e) = contexts[0].backend.collectives() {
        return Outcome::Skipped(format!("no collectives: {e}"));
    }
    let (done, results) = mpsc::channel();
    for ctx in contexts {
        let (case, done) = (case.clone(), done.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("rank {}", ctx.rank))
            .spawn(move || {
                let outcome = run_as_rank(&case, &ctx);
                let _ = done.send((ctx.rank, outcome));
            });
        if let Err(e) = spawned {
            return Outcome::Failed(format!("could not start a rank's thread: {e}"));
        }
    }
    drop(done);
    let deadline = Instant::now() + CASE_DEADLINE;
    let mut finished = vec![false; world_size];
    let mut failures = Vec::new();
    let mut skipped = None;
    while finished.iter().any(|f| !f) {
        let left = deadline.saturating_duration_since(Instant::now());
        match results.recv_timeout(left) {
            Ok((rank, outcome)) => {
                finished[rank] = true;
                match outcome {
                    Outcome::Passed => {}
                    Outcome::Skipped(reason) => skipped = Some(reason),
                    Outcome::Failed(message) => failures.push(message),
                }
            }
            Err(_) => {
                let hung: Vec<usize> = (0..world_size).filter(|&r| !finished[r]).collect();
                failures.push(format!(
                    "rank(s) {hung:?} did not finish within {} s: a hang",
                    CASE_DEADLINE.as_secs()
                ));
                break;
            }
        }
    }
    match (failures.is_empty(), skipped) {
        (false, _) => Outcome::Failed(failures.join("\n")),
        (true, Some(reason)) => Outcome::Skipped(reason),
        (true, None) => Outcome::Passed,
    }
}

/// The §17 cases as libtest trials, one per case and world size (`"17.01 ... [2 ranks]"`),
/// ranks as threads on the instances `factory` opens.
pub fn collective_trials<B: Backend>(factory: RankFactory<B>, worlds: &[usize]) -> Vec<Trial> {
    let mut trials = Vec::new();
    for &world in worlds {
        for case in collective_cases::<B>() {
            let factory = Arc::clone(&factory);
            let name = format!(
                "{} [{world} rank{}]",
                case.name,
                if world == 1 { "" } else { "s" }
            );
            trials.push(Trial::ignorable_test(
                name,
                move || match run_collective_case(&factory, world, &case) {
                    Outcome::Passed => Ok(Completion::Completed),
                    Outcome::Skipped(reason) => Ok(Completion::ignored_with(reason)),
                    Outcome::Failed(message) => Err(Failed::from(message)),
                },
            ));
        }
    }
    trials
}

/// Runs the §17 cases as a `harness = false` test binary (see [`crate::collectives_main!`]):
/// cases one at a time, their ranks as threads.
pub fn run_collective_trials<B: Backend>(
    factory: impl Fn(usize) -> Result<B, GraphError> + Send + Sync + 'static,
    worlds: &[usize],
) -> ExitCode {
    let mut args = Arguments::from_args();
    // A case's ranks are threads already; cases side by side would share devices.
    args.test_threads = Some(1);
    libtest_mimic::run(&args, collective_trials(Arc::new(factory), worlds)).exit_code()
}

/// Expands to the `fn main()` of a `harness = false` test target running the §17 collective
/// cases for each world size in `$worlds`, rank `r` on the instance `$factory(r)` opens (a
/// closure `|rank| -> Result<B, GraphError>`: for GPUs, device `rank`).
///
/// ```no_run
/// use accel_graph_mock::MockBackend;
/// accel_graph_conformance::collectives_main!(|_rank| Ok(MockBackend::new()), [1, 2, 4]);
/// ```
#[macro_export]
macro_rules! collectives_main {
    ($factory:expr, [$($world:expr),* $(,)?]) => {
        fn main() -> ::std::process::ExitCode {
            $crate::run_collective_trials($factory, &[$($world),*])
        }
    };
}
