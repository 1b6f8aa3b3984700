//! `GraphOptions`: the constructor arguments of `torch.accelerator.Graph`.

use crate::{CaptureErrorMode, InstantiateFlags, PoolId, Result};

/// How a graph is built: `Graph(keep_graph=False, *, pool=None, capture_error_mode="default")`,
/// plus the instantiate flags PyTorch fixes (see [`InstantiateFlags`]).
///
/// ```
/// use accel_graph_api::{CaptureErrorMode, GraphOptions};
/// let opts = GraphOptions::new()
///     .keep_graph(true)
///     .capture_error_mode(CaptureErrorMode::ThreadLocal);
/// assert!(opts.keep_graph);
/// assert_eq!(opts.pool, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GraphOptions {
    /// Keep the raw graph after `capture_end` (instantiate explicitly or on first replay).
    pub keep_graph: bool,
    /// Share this memory pool (from `graph_pool_handle()` or another graph's `pool()`).
    /// `Some(PoolId::NONE)` means the same as `None`: a private pool.
    pub pool: Option<PoolId>,
    /// What unsafe calls during capture do.
    pub capture_error_mode: CaptureErrorMode,
    /// How the executable graph is instantiated (PyTorch's flags by default).
    pub instantiate: InstantiateFlags,
}

impl GraphOptions {
    /// PyTorch's defaults: `keep_graph=False`, no pool, `"default"` mode.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `keep_graph`.
    pub fn keep_graph(mut self, keep: bool) -> Self {
        self.keep_graph = keep;
        self
    }

    /// Shares a pool. `PoolId::NONE` means "no pool", as `(0, 0)` does in PyTorch.
    pub fn pool(mut self, pool: PoolId) -> Self {
        self.pool = if pool.is_none() { None } else { Some(pool) };
        self
    }

    /// Sets the capture error mode.
    pub fn capture_error_mode(mut self, mode: CaptureErrorMode) -> Self {
        self.capture_error_mode = mode;
        self
    }

    /// Sets the instantiate flags (a backend that cannot honour one refuses the graph with
    /// [`crate::GraphError::Unsupported`] when it is made).
    pub fn instantiate_flags(mut self, flags: InstantiateFlags) -> Self {
        self.instantiate = flags;
        self
    }

    /// The options with their one meaning: `(0, 0)` as pool is no pool (a private one), as in
    /// PyTorch, however the options were built. Errors with
    /// [`crate::GraphError::InvalidPoolId`] for an id with both halves non-zero.
    ///
    /// ```
    /// use accel_graph_api::{GraphOptions, PoolId};
    /// let mut opts = GraphOptions::new();
    /// opts.pool = Some(PoolId::NONE); // through the public field
    /// assert_eq!(opts.validate()?.pool, None);
    /// opts.pool = Some(PoolId(3, 4));
    /// assert!(opts.validate().is_err());
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    pub fn validate(mut self) -> Result<Self> {
        self.pool = match self.pool {
            Some(pool) if pool.is_none() => None,
            Some(pool) => Some(pool.validate()?),
            None => None,
        };
        Ok(self)
    }
}
