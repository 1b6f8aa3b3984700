//! [`TpReference`]: the host reference of a model split over ranks — each rank's part run by
//! the one-device [`Reference`] of its sizes, the row-parallel products summed over the ranks
//! in rank order as the mock's all-reduce sums them. So on the mock every rank's engine equals
//! it bit for bit, eager or graphed.

use accel_graph::{Result, collective::ReduceOp};

use super::{Partition, TpError};
use crate::{
    Config, DecodeElement,
    model::{HostWeights, Reference, ReferenceStep, StepRow},
};

/// The model of a [`Partition`] over `world` ranks, and its ranks' caches, on the host.
///
/// ```
/// use accel_graph_decode::{Config, model::{Reference, StepRow}, tp::TpReference};
/// let mut tp = TpReference::<f32>::random(Config::tiny(), 1, 2, 1)?;
/// let mut one = Reference::<f32>::random(Config::tiny(), 1, 1);
/// let rows = [StepRow::new(0, 7, 0)];
/// let (a, b) = (tp.step(&rows)?, one.step(&rows)?);
/// // The same model: sums split over two ranks round differently, by little.
/// let worst = a.logits.iter().zip(&b.logits).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
/// assert!(worst < 1e-4, "{worst}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct TpReference<T: DecodeElement> {
    ranks: Vec<Reference<T>>,
}

impl<T: DecodeElement> TpReference<T> {
    /// The model of `config` with the whole model's weights `host`, split over `world` ranks,
    /// each rank's cache holding `slots` sequences. Errors: the sizes do not split
    /// ([`Partition::new`]), or a tensor of `host` is missing or of another length
    /// ([`TpError::Config`]).
    pub fn new(
        config: Config,
        host: &HostWeights<T>,
        world: usize,
        slots: usize,
    ) -> std::result::Result<Self, TpError> {
        Partition::check(&config, world)?;
        let ranks = (0..world)
            .map(|rank| {
                let p = Partition::new(&config, world, rank)?;
                let weights = p.slice_all(host).map_err(TpError::Config)?;
                Ok(Reference::new(*p.local(), weights, slots))
            })
            .collect::<std::result::Result<_, TpError>>()?;
        Ok(TpReference { ranks })
    }

    /// [`TpReference::new`] with [`HostWeights::random`] weights for `seed`.
    pub fn random(
        config: Config,
        seed: u64,
        world: usize,
        slots: usize,
    ) -> std::result::Result<Self, TpError> {
        Partition::check(&config, world)?;
        Self::new(config, &HostWeights::random(&config, seed), world, slots)
    }

    /// Ranks.
    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// One decode step of `rows`, as every rank's engine runs it: the embedding, then per
    /// layer each rank's attention and MLP on its heads and columns — rank 0's products
    /// adding the residual, the others' bare — each summed over the ranks in rank order
    /// (rounded to `T` after each addition, [`CommElement::reduce`]); the final norm, LM head
    /// and argmax whole. Errors as [`Reference::step`].
    ///
    /// [`CommElement::reduce`]: accel_graph::collective::CommElement::reduce
    pub fn step(&mut self, rows: &[StepRow]) -> Result<ReferenceStep<T>> {
        let Some(first) = self.ranks.first() else {
            return Err(accel_graph::GraphError::ArgumentMismatch(
                "tensor-parallel reference of no rank".to_owned(),
            ));
        };
        let meta = first.check(rows)?;
        let n = rows.len();
        let mut x = first.embed(&meta, n);
        for l in 0..first.config().layers {
            let parts: Vec<Vec<T>> = self
                .ranks
                .iter_mut()
                .enumerate()
                .map(|(rank, r)| {
                    let mut part = x.clone();
                    r.attention_block(l, &meta, n, &mut part, beta(rank));
                    part
                })
                .collect();
            x = sum_in_rank_order(parts);
            let parts: Vec<Vec<T>> = self
                .ranks
                .iter()
                .enumerate()
                .map(|(rank, r)| {
                    let mut part = x.clone();
                    r.mlp_block(l, n, &mut part, beta(rank));
                    part
                })
                .collect();
            x = sum_in_rank_order(parts);
        }
        Ok(self.ranks[0].head(&x, n))
    }
}

/// Rank 0 adds the residual; the others leave their bare products (as the device model).
fn beta(rank: usize) -> f32 {
    if rank == 0 { 1.0 } else { 0.0 }
}

/// The all-reduce (sum) of the mock: `((p0 + p1) + p2) + …`, each addition rounded to `T`.
fn sum_in_rank_order<T: DecodeElement>(parts: Vec<Vec<T>>) -> Vec<T> {
    let mut parts = parts.into_iter();
    let mut acc = parts.next().unwrap_or_default();
    for part in parts {
        for (a, b) in acc.iter_mut().zip(part) {
            *a = T::reduce(ReduceOp::Sum, *a, b);
        }
    }
    acc
}
