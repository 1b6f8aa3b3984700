//! [`TpThreads`]: the ranks of a tensor-parallel model as threads of this process, one backend
//! instance (one device) each, meeting through a [`MemoryStore`].

use std::sync::Arc;

use accel_graph::{
    Backend, CaptureErrorMode, GraphError, Result,
    collective::{CommOptions, Communicator, MemoryStore},
};

use super::{Partition, TpError};
use crate::{Config, DecodeElement, Engine, EngineOptions, Model, model::HostWeights};

/// Runs a model of `config` split over `world` ranks, each rank a thread with its own backend
/// instance, stream and communicator.
///
/// ```
/// use accel_graph_decode::{Config, EngineOptions, StepRow, tp::TpThreads};
/// use accel_graph::mock::MockBackend;
///
/// let tokens = TpThreads::new(Config::tiny(), 2)?.run(
///     |_rank| Ok(MockBackend::new()), // one simulated device per rank
///     |rank| {
///         let mut engine = rank.engine_random::<f32>(5, EngineOptions::new().buckets([1]))?;
///         Ok(engine.step(&[StepRow::new(0, 3, 0)])?.tokens) // replayed: its graph holds the all-reduces
///     },
/// )?;
/// assert_eq!(tokens[0], tokens[1]); // every rank samples the same token
/// # Ok::<(), accel_graph_decode::tp::TpError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TpThreads {
    config: Config,
    world: usize,
    comm: CommOptions,
}

impl TpThreads {
    /// Ranks of `config` over `world` threads. Errors before anything is made (so no rank can
    /// wait for another): sizes that do not split ([`Partition::new`]'s [`TpError`]s).
    pub fn new(config: Config, world: usize) -> std::result::Result<Self, TpError> {
        Partition::check(&config, world)?;
        Ok(TpThreads {
            config,
            world,
            comm: CommOptions::new().name("tp"),
        })
    }

    /// The communicators' options (name `"tp"` and the default timeout unless set here): the
    /// timeout bounds how long a rank waits for another that failed.
    pub fn comm_options(mut self, options: CommOptions) -> Self {
        self.comm = options;
        self
    }

    /// The whole model's sizes.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// `options` for an engine whose rank is a thread: graphs captured in `thread_local` mode
    /// unless `Relaxed` was asked. Ranks that are threads share the process's capture domain
    /// (CUDA's): in `global` mode one rank's capture would forbid the others' unsafe calls,
    /// and a collective in a `global` capture beside other ranks is refused
    /// ([`GraphError::CollectiveCaptureMode`]; see `docs/MULTI_GPU.md`).
    pub fn engine_options(options: EngineOptions) -> EngineOptions {
        match options.capture_error_mode {
            CaptureErrorMode::Relaxed | CaptureErrorMode::ThreadLocal => options,
            _ => options.capture_error_mode(CaptureErrorMode::ThreadLocal),
        }
    }

    /// Starts one thread per rank: rank `r` opens its backend with `open(r)` (device `r`),
    /// joins the communicator, and runs `body`. Returns each rank's result, in rank order.
    ///
    /// Every rank must run the same steps (their all-reduces meet); a rank that fails leaves
    /// the others waiting at most the communicator's timeout. The error returned is the
    /// lowest rank's that is not a timeout or an unusable communicator (what the others get
    /// when a peer is gone), else the lowest rank's ([`TpError::Rank`]), or
    /// [`TpError::Panicked`].
    pub fn run<B, R>(
        &self,
        open: impl Fn(usize) -> Result<B> + Sync,
        body: impl Fn(&TpRank<B>) -> Result<R> + Sync,
    ) -> std::result::Result<Vec<R>, TpError>
    where
        B: Backend,
        R: Send,
    {
        let store = MemoryStore::new();
        let results: Vec<std::result::Result<R, TpError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.world)
                .map(|rank| {
                    let (store, open, body) = (store.clone(), &open, &body);
                    s.spawn(move || -> Result<R> {
                        let backend = open(rank)?;
                        let comm = Communicator::with_options(
                            &backend,
                            store,
                            rank,
                            self.world,
                            self.comm.clone(),
                        )?;
                        let partition = Partition::new(&self.config, self.world, rank)?;
                        body(&TpRank {
                            comm: Arc::new(comm),
                            partition,
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(rank, h)| match h.join() {
                    Ok(result) => result.map_err(|error| TpError::Rank { rank, error }),
                    Err(_) => Err(TpError::Panicked { rank }),
                })
                .collect()
        });
        let consequence = |e: &TpError| {
            matches!(
                e,
                TpError::Rank {
                    error: GraphError::CommTimeout { .. } | GraphError::CommUnusable { .. },
                    ..
                }
            )
        };
        let cause = results
            .iter()
            .position(|r| r.as_ref().is_err_and(|e| !consequence(e)))
            .or_else(|| results.iter().position(|r| r.is_err()));
        match cause {
            Some(i) => Err(results
                .into_iter()
                .nth(i)
                .and_then(|r| r.err())
                .unwrap_or(TpError::Panicked { rank: i })),
            None => Ok(results.into_iter().filter_map(|r| r.ok()).collect()),
        }
    }
}

/// One rank inside [`TpThreads::run`]: its communicator (and through it its backend) and its
/// part of the model.
#[derive(Debug)]
pub struct TpRank<B: Backend> {
    comm: Arc<Communicator<B>>,
    partition: Partition,
}

impl<B: Backend> TpRank<B> {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.partition.rank()
    }

    /// This rank's backend (device).
    pub fn backend(&self) -> &B {
        self.comm.backend()
    }

    /// The ranks' communicator.
    pub fn comm(&self) -> &Arc<Communicator<B>> {
        &self.comm
    }

    /// This rank's part of the model.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// This rank's model from the whole model's weights `host`
    /// ([`Model::tensor_parallel`]).
    pub fn model<T: DecodeElement>(&self, host: &HostWeights<T>) -> Result<Model<B, T>> {
        Model::tensor_parallel(Arc::clone(&self.comm), *self.partition.full(), host)
    }

    /// This rank's engine over its model from `host`, with [`TpThreads::engine_options`].
    pub fn engine<T: DecodeElement>(
        &self,
        host: &HostWeights<T>,
        options: EngineOptions,
    ) -> Result<Engine<B, T>> {
        Engine::new(self.model(host)?, TpThreads::engine_options(options))
    }

    /// This rank's engine over the model of [`Tensor::random`](crate::model::Tensor::random)
    /// weights for `seed`, with [`TpThreads::engine_options`].
    pub fn engine_random<T: DecodeElement>(
        &self,
        seed: u64,
        options: EngineOptions,
    ) -> Result<Engine<B, T>> {
        let model =
            Model::tensor_parallel_random(Arc::clone(&self.comm), *self.partition.full(), seed)?;
        Engine::new(model, TpThreads::engine_options(options))
    }
}
