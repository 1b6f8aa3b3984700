//! `PoolId`: PyTorch's `tuple[int, int]` naming a graph memory pool.

use std::fmt;

use crate::{GraphError, Result};

/// Identifier of a graph memory pool, with PyTorch's meaning of the two halves:
///
/// * `(0, n)`: a user pool made by `graph_pool_handle()`;
/// * `(n, 0)`: the private pool of a graph that was given no pool;
/// * `(0, 0)`: no pool given.
///
/// Both halves non-zero is invalid. Ids are issued by a backend instance
/// ([`Backend::graph_pool_handle`](crate::Backend::graph_pool_handle), a graph's
/// [`pool()`](crate::AcceleratorGraph::pool)); an instance refuses ids it did not issue.
///
/// ```
/// use accel_graph_api::{Backend, PoolId};
/// let backend = accel_graph_mock::MockBackend::new();
/// let (a, b) = (backend.graph_pool_handle(), backend.graph_pool_handle());
/// assert_ne!(a, b);
/// assert!(a.is_user() && !a.is_private());
/// assert!(PoolId(3, 4).validate().is_err());
/// assert!(PoolId::NONE.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PoolId(pub u64, pub u64);

impl PoolId {
    /// `(0, 0)`: no pool.
    pub const NONE: PoolId = PoolId(0, 0);

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
            Err(GraphError::InvalidPoolId {
                pool: self,
                reason: "at most one of its two values may be non-zero",
            })
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
