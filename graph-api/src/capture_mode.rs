//! `capture_error_mode`: what a capture forbids on the capturing thread and on others.

use std::{fmt, str::FromStr};

use crate::GraphError;

/// PyTorch's `capture_error_mode` (CUDA's `cudaStreamCaptureMode`).
///
/// An *unsafe call* is one that could implicitly synchronize with a capturing stream: a blocking
/// `synchronize`, a blocking `upload`/`download`, an allocation outside the capture's pool.
///
/// | mode | unsafe call on the capturing thread | unsafe call on another thread |
/// |---|---|---|
/// | `Global` | error, capture invalidated | error, capture invalidated |
/// | `ThreadLocal` | error, capture invalidated | allowed |
/// | `Relaxed` | allowed | allowed |
///
/// A device-wide `synchronize` is the exception: it conflicts with every capture in progress,
/// in every mode and from every thread (as `cuCtxSynchronize` does), and invalidates it.
///
/// `Default` means the backend's default, which is `Global` on every backend (as PyTorch's CUDA
/// default). `capture_end` from another thread is an error unless the mode is `Relaxed`.
///
/// ```
/// use accel_graph_api::CaptureErrorMode;
/// let mode: CaptureErrorMode = "thread_local".parse().unwrap();
/// assert_eq!(mode, CaptureErrorMode::ThreadLocal);
/// let err = "strict".parse::<CaptureErrorMode>().unwrap_err();
/// assert!(err.to_string().contains("got 'strict'"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CaptureErrorMode {
    /// The backend's default (`Global` everywhere).
    #[default]
    Default,
    /// Unsafe calls are errors on every thread while this capture runs.
    Global,
    /// Unsafe calls are errors on the capturing thread only.
    ThreadLocal,
    /// Unsafe calls are allowed (calls that inherently conflict with capture still fail).
    Relaxed,
}

impl CaptureErrorMode {
    /// The mode a capture really runs in: `Default` resolved to `Global`.
    pub fn resolved(self) -> Self {
        match self {
            CaptureErrorMode::Default => CaptureErrorMode::Global,
            other => other,
        }
    }

    /// PyTorch's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CaptureErrorMode::Default => "default",
            CaptureErrorMode::Global => "global",
            CaptureErrorMode::ThreadLocal => "thread_local",
            CaptureErrorMode::Relaxed => "relaxed",
        }
    }

    /// All four modes, in PyTorch's order.
    pub const ALL: [CaptureErrorMode; 4] = [
        CaptureErrorMode::Default,
        CaptureErrorMode::Global,
        CaptureErrorMode::ThreadLocal,
        CaptureErrorMode::Relaxed,
    ];
}

impl fmt::Display for CaptureErrorMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CaptureErrorMode {
    type Err = GraphError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "default" => Ok(CaptureErrorMode::Default),
            "global" => Ok(CaptureErrorMode::Global),
            "thread_local" => Ok(CaptureErrorMode::ThreadLocal),
            "relaxed" => Ok(CaptureErrorMode::Relaxed),
            other => Err(GraphError::UnknownCaptureErrorMode(other.to_owned())),
        }
    }
}
