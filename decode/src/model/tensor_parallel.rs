//! One rank of a tensor-parallel [`Model`]: its part of the weights ([`Partition`]) and the
//! communicator whose all-reduces join the ranks' row-parallel products. See [`crate::tp`].

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use accel_graph::{
    Backend, GraphError, Result,
    collective::{Communicator, ReduceOp},
};

use super::{HostWeights, Model, Tensor, Weights};
use crate::{Config, DecodeElement, tp::Partition};

/// What a rank's model adds to a one-device model: its part and its communicator.
#[derive(Debug)]
pub(super) struct Shard<B: Backend> {
    pub(super) partition: Partition,
    pub(super) comm: Arc<Communicator<B>>,
    /// All-reduces issued so far (eager or captured): whether a failed capture recorded one.
    pub(super) issued: AtomicU64,
}

impl<B: Backend, T: DecodeElement> Model<B, T> {
    /// Rank `comm.rank()` of the model of `config` split over `comm.world_size()` ranks, on
    /// the communicator's backend, from the whole model's weights `host` (each rank uploads
    /// its part: [`Partition::slice`]). Every rank of `comm` makes its model; a step then
    /// issues two all-reduces per layer on `comm`, which every rank must run alike (the
    /// [`Engine`](crate::Engine) of each rank does).
    ///
    /// Errors: sizes that do not split over the world ([`GraphError::ArgumentMismatch`] with
    /// the message of [`crate::tp::TpError`]; every rank finds it, none waits), a tensor of
    /// `host` missing or of another length, and those of [`Model::from_host`].
    pub fn tensor_parallel(
        comm: Arc<Communicator<B>>,
        config: Config,
        host: &HostWeights<T>,
    ) -> Result<Self> {
        Self::tensor_parallel_with(comm, config, |p, t| {
            let full = host.get(t).ok_or_else(|| {
                GraphError::ArgumentMismatch(format!("weights: {t:?} is missing"))
            })?;
            p.slice(t, full)
        })
    }

    /// [`Model::tensor_parallel`] with the [`Tensor::random`] weights of `seed`: each rank
    /// generates one whole tensor at a time and uploads its part, so the ranks together hold
    /// the one-device model of [`Model::random`] for `seed`.
    pub fn tensor_parallel_random(
        comm: Arc<Communicator<B>>,
        config: Config,
        seed: u64,
    ) -> Result<Self> {
        Self::tensor_parallel_with(comm, config, |p, t| {
            p.slice(t, &t.random::<T>(&config, seed))
        })
    }

    fn tensor_parallel_with(
        comm: Arc<Communicator<B>>,
        config: Config,
        mut part: impl FnMut(&Partition, Tensor) -> Result<Vec<T>>,
    ) -> Result<Self> {
        let partition = Partition::new(&config, comm.world_size(), comm.rank())?;
        let backend = comm.backend().clone();
        let weights = Weights::try_build(&config, |t| backend.alloc_from(&part(&partition, t)?))?;
        let mut model = Self::with_weights(&backend, *partition.local(), weights)?;
        model.shard = Some(Shard {
            partition,
            comm,
            issued: AtomicU64::new(0),
        });
        Ok(model)
    }

    /// This rank's part of the model, for a tensor-parallel model (`None` on one device).
    pub fn partition(&self) -> Option<&Partition> {
        self.shard.as_ref().map(|s| &s.partition)
    }

    /// The communicator of a tensor-parallel model's ranks.
    pub fn communicator(&self) -> Option<&Arc<Communicator<B>>> {
        self.shard.as_ref().map(|s| &s.comm)
    }

    /// All-reduces issued per step: two per layer on a tensor-parallel model, none otherwise.
    pub fn collectives_per_step(&self) -> usize {
        if self.shard.is_some() {
            2 * self.config.layers
        } else {
            0
        }
    }

    /// `beta` of the row-parallel products (output and down projections): 1 adds the
    /// residual already in the output buffer. On several ranks only rank 0 adds it — every
    /// other rank writes its bare partial product — so the all-reduce's sum holds it once.
    pub(super) fn residual_beta(&self) -> f32 {
        match &self.shard {
            Some(s) if !s.partition.adds_residual() => 0.0,
            _ => 1.0,
        }
    }

    /// Sums `x` over the ranks, in place, after a row-parallel product; nothing on one device.
    pub(super) fn reduce(&self, x: &B::Buffer<T>) -> Result<()> {
        match &self.shard {
            Some(s) => {
                s.comm.all_reduce(x, ReduceOp::Sum)?;
                s.issued.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// All-reduces issued so far (0 on one device).
    pub(crate) fn collectives_issued(&self) -> u64 {
        self.shard
            .as_ref()
            .map_or(0, |s| s.issued.load(Ordering::Relaxed))
    }

    /// After a capture of this rank failed (made, captured or ended), with `issued_before`
    /// the count of [`Model::collectives_issued`] before it: a capture that recorded no
    /// all-reduce is unknown to the other ranks, which wait for it as their captures end, so
    /// tell them it was discarded — they discard theirs at once instead of waiting out the
    /// timeout (after which their communicator would be unusable). A capture that recorded
    /// one was announced by the library already. Nothing on one device.
    pub(crate) fn capture_failed(&self, issued_before: u64) {
        if let Some(s) = &self.shard
            && s.issued.load(Ordering::Relaxed) == issued_before
            && let Err(e) = s.comm.control().capture_discarded(&[])
        {
            tracing::warn!(error = %e, "could not tell the other ranks a capture was discarded");
        }
    }
}
