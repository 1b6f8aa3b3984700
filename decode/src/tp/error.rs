//! [`TpError`]: what splitting a model over ranks, or running its ranks, can fail with.

use std::fmt;

use accel_graph::GraphError;

/// A size of the model that tensor parallelism divides among the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// Query heads (column-parallel QKV, row-parallel output projection).
    Heads,
    /// Key/value heads: divided among the ranks, or each one held by `world / kv_heads`
    /// ranks when there are more ranks than key/value heads.
    KvHeads,
    /// The MLP's intermediate columns (column-parallel gate/up, row-parallel down projection).
    Intermediate,
}

impl Dimension {
    /// Its name, as [`crate::Config`] spells the field.
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Heads => "heads",
            Dimension::KvHeads => "kv_heads",
            Dimension::Intermediate => "intermediate",
        }
    }
}

/// What tensor parallelism can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum TpError {
    /// A world of no rank, or a rank outside the world.
    World {
        /// The rank asked for.
        rank: usize,
        /// Ranks in the world.
        world: usize,
    },
    /// A dimension the ranks split does not divide among them: `size` is not a multiple of
    /// `world` (for key/value heads: neither is a multiple of the other). Found before any
    /// rank makes anything, so no rank waits for another.
    Indivisible {
        /// Which size.
        dimension: Dimension,
        /// The model's size.
        size: usize,
        /// Ranks in the world.
        world: usize,
    },
    /// The model's sizes are invalid whatever the world ([`crate::Config::validate`]).
    Config(GraphError),
    /// Rank `rank` failed (its backend, communicator, model or engine, or what it ran).
    Rank {
        /// The rank.
        rank: usize,
        /// Its error.
        error: GraphError,
    },
    /// Rank `rank`'s thread panicked.
    Panicked {
        /// The rank.
        rank: usize,
    },
}

impl fmt::Display for TpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TpError::World { rank, world } => write!(
                f,
                "tensor parallelism: rank {rank} is outside a world of {world} rank(s)"
            ),
            TpError::Indivisible {
                dimension: Dimension::KvHeads,
                size,
                world,
            } => write!(
                f,
                "tensor parallelism over {world} ranks: kv_heads ({size}) is neither a multiple \
                 nor a divisor of {world}, so the key/value heads cannot be divided (or \
                 replicated) evenly"
            ),
            TpError::Indivisible {
                dimension,
                size,
                world,
            } => write!(
                f,
                "tensor parallelism over {world} ranks: {} ({size}) is not a multiple of {world}",
                dimension.name()
            ),
            TpError::Config(e) => write!(f, "tensor parallelism: {e}"),
            TpError::Rank { rank, error } => write!(f, "rank {rank}: {error}"),
            TpError::Panicked { rank } => write!(f, "rank {rank}: its thread panicked"),
        }
    }
}

impl std::error::Error for TpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TpError::Config(e) | TpError::Rank { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// Where the API answers with [`GraphError`] (a model built on one rank): a rank's own error
/// as it was, every other as [`GraphError::ArgumentMismatch`] with the message.
impl From<TpError> for GraphError {
    fn from(e: TpError) -> Self {
        match e {
            TpError::Rank { error, .. } | TpError::Config(error) => error,
            other => GraphError::ArgumentMismatch(other.to_string()),
        }
    }
}
