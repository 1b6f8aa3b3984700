//! [`EngineOptions`]: buckets, graphs on or off, what is pre-captured and how.

use accel_graph::CaptureErrorMode;

/// How an [`Engine`](super::Engine) runs its steps.
///
/// ```
/// use accel_graph_decode::EngineOptions;
/// let o = EngineOptions::new().buckets([1, 8, 4]).precapture([8, 4]).warmup_iters(0);
/// assert_eq!(o.buckets, vec![1, 8, 4]);
/// assert!(o.graphs);
/// assert_eq!(EngineOptions::default().buckets, vec![1, 2, 4, 8, 16, 32, 64]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOptions {
    /// Batch sizes that get a graph each: a step of `n` rows runs padded to the smallest
    /// bucket `>= n`. A step beyond the largest is refused. Default `[1, 2, 4, 8, 16, 32, 64]`.
    pub buckets: Vec<usize>,
    /// Run steps as graphs (default). Off, every step is issued eagerly (same kernels, same
    /// padding): the baseline graphs are measured against.
    pub graphs: bool,
    /// Buckets to capture when the engine is made, largest first (vLLM's order: smaller ones
    /// reuse the largest one's pool memory). The others are captured on their first step.
    pub precapture: Vec<usize>,
    /// Eager steps of padding rows (which write nothing into the cache) run on the capture
    /// stream before each capture, as vLLM warms up each size. Default 1.
    pub warmup_iters: usize,
    /// Capture error mode of the graphs.
    pub capture_error_mode: CaptureErrorMode,
    /// Show a progress bar (on stderr) while pre-capturing.
    pub progress: bool,
    /// Sequences the key/value cache holds (`None`: the largest bucket).
    pub slots: Option<usize>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            buckets: vec![1, 2, 4, 8, 16, 32, 64],
            graphs: true,
            precapture: Vec::new(),
            warmup_iters: 1,
            capture_error_mode: CaptureErrorMode::Default,
            progress: false,
            slots: None,
        }
    }
}

impl EngineOptions {
    /// The defaults: buckets 1 to 64 in powers of two, graphs on, captured lazily.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the buckets.
    pub fn buckets(mut self, buckets: impl IntoIterator<Item = usize>) -> Self {
        self.buckets = buckets.into_iter().collect();
        self
    }

    /// Turns graphs on or off.
    pub fn graphs(mut self, on: bool) -> Self {
        self.graphs = on;
        self
    }

    /// Sets the buckets pre-captured when the engine is made.
    pub fn precapture(mut self, buckets: impl IntoIterator<Item = usize>) -> Self {
        self.precapture = buckets.into_iter().collect();
        self
    }

    /// Pre-captures every bucket.
    pub fn precapture_all(mut self) -> Self {
        self.precapture = self.buckets.clone();
        self
    }

    /// Sets the warm-up steps before each capture.
    pub fn warmup_iters(mut self, iters: usize) -> Self {
        self.warmup_iters = iters;
        self
    }

    /// Sets the capture error mode.
    pub fn capture_error_mode(mut self, mode: CaptureErrorMode) -> Self {
        self.capture_error_mode = mode;
        self
    }

    /// Shows a progress bar while pre-capturing.
    pub fn progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// Sets the sequences the cache holds.
    pub fn slots(mut self, slots: usize) -> Self {
        self.slots = Some(slots);
        self
    }
}
