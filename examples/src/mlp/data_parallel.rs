//! The model step written once, data-parallel: each rank (one device) runs [`Mlp::step_with`]
//! on its own shard of the batch, and the flat gradient buffer is all-reduced (summed over the
//! ranks, then scaled by `1 / world`) before the one SGD `axpy` — so every rank applies the
//! same update and the parameters stay equal on every rank. The loss is averaged across ranks
//! too. Eager and graphed (through [`FullGraphWrapper`](accel_graph::utils::FullGraphWrapper)
//! with a [`CaptureBarrier`](accel_graph::utils::CaptureBarrier)), the step is the same
//! function; the collectives are captured with the rest.
//!
//! ## What equals what
//!
//! * Every rank ends with the same parameters, bit for bit (they apply the same all-reduced
//!   gradient), and the same loss.
//! * Graphed equals eager, bit for bit (a replay runs the same work).
//! * Against one rank training on the concatenated batch (rank `r`'s rows `r·b .. (r+1)·b`):
//!   the gradients are the same sums in another association — each rank sums its own rows,
//!   then the ranks' partial sums are added — and the `1 / world` is applied after the sum
//!   instead of inside the loss's factor. So the parameters agree **bit for bit when each rank
//!   holds one row and the world size is a power of two** (then the association is the same
//!   sequence of additions, every partial scaled by the same power of two, which is exact
//!   without subnormals), on a device that reduces in rank order (the mock). Otherwise they
//!   agree within rounding. The loss, a mean of means, agrees within rounding.
//!
//! ```
//! use std::sync::Arc;
//! use accel_graph::prelude::*;
//! use accel_graph::collective::{Communicator, MemoryStore};
//! use accel_graph::mock::MockBackend;
//! use accel_graph_examples::mlp::{Mlp, MlpShape, data_parallel::DataParallelMlp, reference};
//!
//! let shape = MlpShape { batch: 1, input: 4, hidden: 8, output: 2 };
//! let init = reference::initial_params(shape, 1);
//! let store = MemoryStore::new();
//! let params = std::thread::scope(|s| {
//!     let ranks: Vec<_> = (0..2).map(|rank| {
//!         let (store, init) = (store.clone(), init.clone());
//!         s.spawn(move || -> Result<Vec<f32>> {
//!             let b = MockBackend::new();
//!             let comm = Arc::new(Communicator::new(&b, store, rank, 2)?);
//!             let dp = DataParallelMlp::new(Mlp::new(&b, shape, 0.1, &init)?, comm);
//!             let (x, t) = reference::inputs(shape, 10 + rank as u64); // this rank's shard
//!             let (x, t) = (b.alloc_from(&x)?, b.alloc_from(&t)?);
//!             dp.step(&x, &t)?;
//!             b.download(dp.model().params())
//!         })
//!     }).collect();
//!     ranks.into_iter().map(|r| r.join().unwrap()).collect::<Result<Vec<_>>>()
//! })?;
//! assert_eq!(params[0], params[1]); // one update on every rank
//! # Ok::<(), GraphError>(())
//! ```

use std::sync::Arc;

use accel_graph::{
    Backend, Result,
    collective::{Communicator, ReduceOp},
};

use super::Mlp;

/// One rank of a data-parallel [`Mlp`]: the model and the communicator of its ranks.
#[derive(Debug)]
pub struct DataParallelMlp<B: Backend> {
    model: Mlp<B>,
    comm: Arc<Communicator<B>>,
}

impl<B: Backend> DataParallelMlp<B> {
    /// This rank's `model` (every rank starts from the same parameters), training with the
    /// ranks of `comm` (made on the model's backend).
    pub fn new(model: Mlp<B>, comm: Arc<Communicator<B>>) -> Self {
        DataParallelMlp { model, comm }
    }

    /// The model.
    pub fn model(&self) -> &Mlp<B> {
        &self.model
    }

    /// The communicator.
    pub fn comm(&self) -> &Arc<Communicator<B>> {
        &self.comm
    }

    /// One data-parallel step on this rank's shard `x`, `t` (`batch` rows each), on the
    /// current stream: the gradients are summed over the ranks and scaled by `1 / world`
    /// before the update. Returns the loss averaged over the ranks (the same on every rank).
    /// Every rank calls it, with shards of one size.
    pub fn step(&self, x: &B::Buffer<f32>, t: &B::Buffer<f32>) -> Result<B::Buffer<f32>> {
        let comm = &self.comm;
        let average = |buffer: &B::Buffer<f32>| -> Result<()> {
            comm.all_reduce(buffer, ReduceOp::Sum)?;
            comm.backend().scale(buffer, 1.0 / comm.world_size() as f32)
        };
        let loss = self.model.step_with(x, t, average)?;
        average(&loss)?;
        Ok(loss)
    }
}
