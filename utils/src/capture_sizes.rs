//! `CaptureSizes`: the batch sizes a [`super::BucketedGraphCache`] captures graphs for (vLLM's
//! `cudagraph_capture_sizes`).

use accel_graph_api::{GraphError, Result};

/// A sorted set of batch sizes (buckets). An input of batch size `n` runs on the graph of the
/// smallest bucket `>= n`, padded up to it.
///
/// ```
/// use accel_graph_utils::CaptureSizes;
/// let sizes = CaptureSizes::new([8, 1, 4, 4])?;
/// assert_eq!(sizes.as_slice(), &[1, 4, 8]);
/// assert_eq!(sizes.bucket_for(3), Some(4));
/// assert_eq!(sizes.bucket_for(9), None); // beyond the largest: eager
/// assert!(CaptureSizes::new([0, 2]).is_err());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSizes(Vec<usize>);

impl CaptureSizes {
    /// Buckets from any list of sizes (sorted, duplicates dropped). Errors with
    /// [`GraphError::ArgumentMismatch`] for an empty list or a size of 0.
    pub fn new(sizes: impl IntoIterator<Item = usize>) -> Result<Self> {
        let mut sizes: Vec<usize> = sizes.into_iter().collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.is_empty() {
            return Err(GraphError::ArgumentMismatch(
                "capture sizes: at least one batch size is needed".into(),
            ));
        }
        if sizes[0] == 0 {
            return Err(GraphError::ArgumentMismatch(
                "capture sizes: a batch size of 0 cannot be captured".into(),
            ));
        }
        Ok(CaptureSizes(sizes))
    }

    /// vLLM's default capture sizes: `[1, 2, 4]` then every multiple of 8 up to 256.
    ///
    /// ```
    /// use accel_graph_utils::CaptureSizes;
    /// let sizes = CaptureSizes::vllm_default();
    /// assert_eq!(&sizes.as_slice()[..5], &[1, 2, 4, 8, 16]);
    /// assert_eq!((sizes.len(), sizes.largest()), (35, 256));
    /// ```
    pub fn vllm_default() -> Self {
        CaptureSizes([1, 2, 4].into_iter().chain((8..=256).step_by(8)).collect())
    }

    /// The smallest bucket that holds `batch`, or `None` when `batch` exceeds the largest.
    pub fn bucket_for(&self, batch: usize) -> Option<usize> {
        let i = self.0.partition_point(|&size| size < batch);
        self.0.get(i).copied()
    }

    /// The largest bucket.
    pub fn largest(&self) -> usize {
        // `new` guarantees at least one size.
        self.0[self.0.len() - 1]
    }

    /// The buckets, ascending.
    pub fn as_slice(&self) -> &[usize] {
        &self.0
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: there is at least one bucket.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
