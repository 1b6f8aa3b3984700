//! [`Partition`]: which part of the model one rank holds, and the slices of the full weights
//! that make it.

use std::ops::Range;

use accel_graph::{GraphError, Result};

use super::{Dimension, TpError};
use crate::{
    Config,
    model::{HostWeights, Tensor},
};

/// Rank `rank`'s part of a model split over `world` ranks, Megatron style.
///
/// * Query heads: rank `r` holds heads `r·h .. (r+1)·h`, `h = heads / world`.
/// * Key/value heads: with at least as many as ranks, rank `r` holds `r·k .. (r+1)·k`,
///   `k = kv_heads / world`; with fewer (`world` a multiple of `kv_heads`), each is held by
///   `world / kv_heads` consecutive ranks — rank `r` holds head `r / (world / kv_heads)`,
///   the one its query heads attend to (vLLM's replication).
/// * MLP: intermediate columns `r·i .. (r+1)·i`, `i = intermediate / world`.
///
/// Its model is then a model of the [`Partition::local`] sizes: the rows of the fused QKV
/// projection for its query, key and value heads (column-parallel), the columns of the output
/// projection for its query heads (row-parallel), the gate and up rows of its intermediate
/// columns (column-parallel), the down projection's columns for them (row-parallel). The
/// embedding, the norms and the LM head are whole on every rank.
///
/// ```
/// use accel_graph_decode::{Config, tp::{Dimension, Partition, TpError}};
/// let tiny = Config::tiny(); // 4 heads, 2 kv heads, intermediate 128
/// let p = Partition::new(&tiny, 2, 1)?;
/// assert_eq!((p.q_heads(), p.kv_heads(), p.intermediate()), (2..4, 1..2, 64..128));
/// // Four ranks: one query head each; each kv head held by two ranks.
/// let p = Partition::new(&tiny, 4, 3)?;
/// assert_eq!((p.q_heads(), p.kv_heads(), p.kv_replicas()), (3..4, 1..2, 2));
/// assert!(matches!(
///     Partition::new(&tiny, 3, 0),
///     Err(TpError::Indivisible { dimension: Dimension::Heads, size: 4, world: 3 })
/// ));
/// # Ok::<(), TpError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Partition {
    full: Config,
    local: Config,
    world: usize,
    rank: usize,
}

impl Partition {
    /// Rank `rank`'s part of `config` split over `world` ranks. Errors: an invalid config
    /// ([`TpError::Config`]), no rank or `rank >= world` ([`TpError::World`]), `heads` or
    /// `intermediate` not a multiple of `world`, or `kv_heads` neither a multiple nor a
    /// divisor of it ([`TpError::Indivisible`]).
    pub fn new(config: &Config, world: usize, rank: usize) -> std::result::Result<Self, TpError> {
        config.validate().map_err(TpError::Config)?;
        if rank >= world {
            return Err(TpError::World { rank, world });
        }
        let indivisible = |dimension, size| TpError::Indivisible {
            dimension,
            size,
            world,
        };
        if !config.heads.is_multiple_of(world) {
            return Err(indivisible(Dimension::Heads, config.heads));
        }
        if !config.kv_heads.is_multiple_of(world) && !world.is_multiple_of(config.kv_heads) {
            return Err(indivisible(Dimension::KvHeads, config.kv_heads));
        }
        if !config.intermediate.is_multiple_of(world) {
            return Err(indivisible(Dimension::Intermediate, config.intermediate));
        }
        let local = Config {
            heads: config.heads / world,
            kv_heads: (config.kv_heads / world).max(1),
            intermediate: config.intermediate / world,
            ..*config
        };
        // The query heads of a rank share key/value heads as the whole model's do (checked
        // above: with replication, `world / kv_heads` ranks split each group).
        local.validate().map_err(TpError::Config)?;
        Ok(Partition {
            full: *config,
            local,
            world,
            rank,
        })
    }

    /// Whether `config` splits over `world` ranks (the errors of [`Partition::new`]).
    pub fn check(config: &Config, world: usize) -> std::result::Result<(), TpError> {
        Self::new(config, world, 0).map(drop)
    }

    /// The whole model's sizes.
    pub fn full(&self) -> &Config {
        &self.full
    }

    /// The sizes of this rank's model: `heads`, `kv_heads` and `intermediate` its own, the
    /// rest the whole model's.
    pub fn local(&self) -> &Config {
        &self.local
    }

    /// Ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The whole model's query heads this rank holds.
    pub fn q_heads(&self) -> Range<usize> {
        let h = self.local.heads;
        self.rank * h..(self.rank + 1) * h
    }

    /// Ranks holding each key/value head: 1, or `world / kv_heads` when there are more ranks
    /// than key/value heads.
    pub fn kv_replicas(&self) -> usize {
        (self.world / self.full.kv_heads).max(1)
    }

    /// The whole model's key/value heads this rank holds.
    pub fn kv_heads(&self) -> Range<usize> {
        let k = self.local.kv_heads;
        let first = self.rank / self.kv_replicas() * k;
        first..first + k
    }

    /// The whole model's intermediate columns this rank holds.
    pub fn intermediate(&self) -> Range<usize> {
        let i = self.local.intermediate;
        self.rank * i..(self.rank + 1) * i
    }

    /// Whether this rank's row-parallel products add the residual (rank 0 only: the
    /// all-reduce then adds it once).
    pub fn adds_residual(&self) -> bool {
        self.rank == 0
    }

    /// This rank's part of `tensor`, from the whole model's values `full` (row-major, of
    /// [`Tensor::len`] for the whole model). Errors with [`GraphError::LengthMismatch`] for
    /// another length.
    ///
    /// ```
    /// use accel_graph_decode::{Config, model::Tensor, tp::Partition};
    /// let c = Config::tiny();
    /// let p = Partition::new(&c, 2, 1)?;
    /// let down: Vec<f32> = Tensor::Down(0).random(&c, 3); // [hidden, intermediate]
    /// let mine = p.slice(Tensor::Down(0), &down)?;       // [hidden, intermediate / 2]
    /// assert_eq!(mine.len(), Tensor::Down(0).len(p.local()));
    /// assert_eq!(mine[0], down[64]); // row 0 starts at this rank's first column
    /// # Ok::<(), accel_graph::GraphError>(())
    /// ```
    pub fn slice<T: Copy>(&self, tensor: Tensor, full: &[T]) -> Result<Vec<T>> {
        let expected = tensor.len(&self.full);
        if full.len() != expected {
            return Err(GraphError::LengthMismatch {
                op: "tensor-parallel weights",
                expected,
                got: full.len(),
            });
        }
        let c = &self.full;
        let d = c.head_dim;
        let scaled = |r: Range<usize>, by: usize| r.start * by..r.end * by;
        let offset = |r: Range<usize>, by: usize| r.start + by..r.end + by;
        Ok(match tensor {
            Tensor::Embed
            | Tensor::FinalNorm
            | Tensor::LmHead
            | Tensor::AttnNorm(_)
            | Tensor::MlpNorm(_) => full.to_vec(),
            Tensor::Qkv(_) => {
                let (q, kv) = (scaled(self.q_heads(), d), scaled(self.kv_heads(), d));
                let k = offset(kv.clone(), c.q_dim());
                let v = offset(kv, c.q_dim() + c.kv_dim());
                rows(full, c.hidden, [q, k, v])
            }
            Tensor::Out(_) => columns(full, c.q_dim(), scaled(self.q_heads(), d)),
            Tensor::GateUp(_) => {
                let gate = self.intermediate();
                let up = offset(gate.clone(), c.intermediate);
                rows(full, c.hidden, [gate, up])
            }
            Tensor::Down(_) => columns(full, c.intermediate, self.intermediate()),
        })
    }

    /// This rank's part of every tensor of `host` (the whole model's weights).
    pub fn slice_all<T: Copy>(&self, host: &HostWeights<T>) -> Result<HostWeights<T>> {
        HostWeights::try_build(&self.full, |t| {
            let full = host.get(t).ok_or_else(|| {
                GraphError::ArgumentMismatch(format!("weights: {t:?} is missing"))
            })?;
            self.slice(t, full)
        })
    }
}

/// The rows `ranges` (in order) of a row-major matrix of `width` columns.
fn rows<T: Copy, const N: usize>(m: &[T], width: usize, ranges: [Range<usize>; N]) -> Vec<T> {
    ranges
        .into_iter()
        .flat_map(|r| &m[r.start * width..r.end * width])
        .copied()
        .collect()
}

/// The columns `range` of every row of a row-major matrix of `width` columns.
fn columns<T: Copy>(m: &[T], width: usize, range: Range<usize>) -> Vec<T> {
    m.chunks_exact(width)
        .flat_map(|row| &row[range.clone()])
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_takes_its_heads_and_columns() {
        let c = Config::tiny();
        // Index values, so each element says where it came from.
        let qkv: Vec<usize> = (0..Tensor::Qkv(0).len(&c)).collect();
        let p = Partition::new(&c, 2, 1).unwrap();
        let mine = p.slice(Tensor::Qkv(0), &qkv).unwrap();
        let (d, h) = (c.head_dim, c.hidden);
        // q heads 2..4, kv head 1 of the keys, kv head 1 of the values.
        let want: Vec<usize> = (2 * d * h..4 * d * h)
            .chain((c.q_dim() + d) * h..(c.q_dim() + 2 * d) * h)
            .chain((c.q_dim() + c.kv_dim() + d) * h..(c.q_dim() + c.kv_dim() + 2 * d) * h)
            .collect();
        assert_eq!(mine, want);
        let out: Vec<usize> = (0..Tensor::Out(0).len(&c)).collect();
        let mine = p.slice(Tensor::Out(0), &out).unwrap();
        assert_eq!(mine.len(), c.hidden * c.q_dim() / 2);
        assert_eq!(&mine[..2], &[2 * d, 2 * d + 1]);
        assert_eq!(
            mine[2 * d],
            c.q_dim() + 2 * d,
            "row 1 starts at its own columns"
        );
        // Every rank's pieces, together, are the whole tensor exactly once.
        for t in Tensor::all(&c).into_iter().filter(|t| !t.is_vector()) {
            let full: Vec<usize> = (0..t.len(&c)).collect();
            let mut seen: Vec<usize> = (0..2)
                .flat_map(|r| Partition::new(&c, 2, r).unwrap().slice(t, &full).unwrap())
                .collect();
            seen.sort_unstable();
            if matches!(t, Tensor::Embed | Tensor::LmHead) {
                seen.dedup();
            }
            assert_eq!(seen, full, "{t:?}");
        }
    }

    #[test]
    fn key_value_heads_are_replicated_past_their_count() {
        let c = Config::tiny();
        let heads: Vec<_> = (0..4)
            .map(|r| {
                let p = Partition::new(&c, 4, r).unwrap();
                (p.q_heads(), p.kv_heads(), p.local().kv_heads)
            })
            .collect();
        assert_eq!(
            heads,
            [
                (0..1, 0..1, 1),
                (1..2, 0..1, 1),
                (2..3, 1..2, 1),
                (3..4, 1..2, 1)
            ]
        );
        // Each query head attends to the kv head the whole model gives it (heads / kv_heads
        // = 2 query heads per kv head).
        for (q, kv, _) in heads {
            assert_eq!(q.start / 2, kv.start);
        }
    }

    #[test]
    fn sizes_that_do_not_divide_are_refused() {
        let c = Config::tiny();
        let refused = |c: Config, world| match Partition::check(&c, world) {
            Err(TpError::Indivisible { dimension, .. }) => Some(dimension),
            _ => None,
        };
        assert_eq!(refused(c, 3), Some(Dimension::Heads));
        assert_eq!(refused(c, 8), Some(Dimension::Heads));
        let six = Config {
            heads: 6,
            kv_heads: 2,
            ..c
        };
        assert_eq!(refused(six, 3), Some(Dimension::KvHeads));
        let odd = Config {
            intermediate: 130,
            ..c
        };
        assert_eq!(refused(odd, 4), Some(Dimension::Intermediate));
        assert!(matches!(
            Partition::new(&c, 0, 0),
            Err(TpError::World { world: 0, .. })
        ));
        assert!(matches!(
            Partition::new(&c, 2, 2),
            Err(TpError::World { rank: 2, .. })
        ));
        for world in [1, 2, 4] {
            Partition::check(&c, world).unwrap();
        }
        let p = Partition::new(&c, 2, 0).unwrap();
        assert!(p.slice(Tensor::Down(0), &[0.0f32; 3]).is_err());
    }
}
