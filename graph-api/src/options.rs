//! `GraphOptions`: the constructor arguments of `torch.accelerator.Graph`.

use crate::{CaptureErrorMode, PoolId, Result};

/// How a graph is built: `Graph(keep_graph=False, *, pool=None, capture_error_mode="default")`.
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
pub struct GraphOptions {
    /// Keep the raw graph after `capture_end` (instantiate explicitly or on first replay).
    pub keep_graph: bool,
    /// Share this memory pool (from `graph_pool_handle()` or another graph's `pool()`).
    pub pool: Option<PoolId>,
    /// What unsafe calls during capture do.
    pub capture_error_mode: CaptureErrorMode,
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

    /// Checks the options (an invalid pool id is an error).
    pub fn validate(self) -> Result<Self> {
        if let Some(pool) = self.pool {
            pool.validate()?;
        }
        Ok(self)
    }
}
