//! `PoolId`: PyTorch's `tuple[int, int]` naming a graph memory pool.

use std::{
    fmt,
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{GraphError, Result};

/// Identifier of a graph memory pool, with PyTorch's meaning of the two halves:
///
/// * `(0, n)`: a user pool made by `graph_pool_handle()`;
/// * `(n, 0)`: the private pool of graph number `n`;
/// * `(0, 0)`: no pool given.
///
/// Both halves non-zero is invalid.
///
/// ```
/// use accel_graph_api::PoolId;
/// let a = PoolId::new_user();
/// let b = PoolId::new_user();
/// assert_ne!(a, b);
/// assert!(a.is_user() && !a.is_private());
/// assert!(PoolId(3, 4).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PoolId(pub u64, pub u64);

/// One counter for every id minted in the process, so ids never repeat across backends.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl PoolId {
    /// `(0, 0)`: no pool.
    pub const NONE: PoolId = PoolId(0, 0);

    /// A fresh user pool id `(0, n)`, as `graph_pool_handle()` returns.
    pub fn new_user() -> Self {
        PoolId(0, next_id())
    }

    /// A fresh private pool id `(n, 0)` for a graph that was given no pool.
    pub fn new_private() -> Self {
        PoolId(next_id(), 0)
    }

    /// True for `(0, 0)`.
    pub fn is_none(self) -> bool {
        self == PoolId::NONE
    }

    /// True for a `graph_pool_handle()` id.
    pub fn is_user(self) -> bool {
        self.0 == 0 && self.1 != 0
    }

    /// True for a graph's private pool id.
    pub fn is_private(self) -> bool {
        self.0 != 0 && self.1 == 0
    }

    /// Errors with [`GraphError::InvalidPoolId`] when both halves are non-zero.
    pub fn validate(self) -> Result<Self> {
        if self.0 != 0 && self.1 != 0 {
            Err(GraphError::InvalidPoolId(self))
        } else {
            Ok(self)
        }
    }
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

impl From<(u64, u64)> for PoolId {
    fn from((a, b): (u64, u64)) -> Self {
        PoolId(a, b)
    }
}

impl From<PoolId> for (u64, u64) {
    fn from(p: PoolId) -> Self {
        (p.0, p.1)
    }
}
