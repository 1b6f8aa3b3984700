//! Per-bucket telemetry: [`BucketTelemetry`] and the [`Summary`] of an engine.

use std::{fmt, time::Duration};

/// Where a bucket's graph stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketState {
    /// Not captured yet (captured on its first step).
    Pending,
    /// Captured and instantiated: its steps replay the graph.
    Captured,
    /// Its capture failed: its steps run eagerly (the failure is in
    /// [`BucketTelemetry::last_failure`]).
    Failed,
    /// Graphs are off: its steps run eagerly.
    Eager,
}

impl fmt::Display for BucketState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BucketState::Pending => "pending",
            BucketState::Captured => "graph",
            BucketState::Failed => "FAILED",
            BucketState::Eager => "eager",
        })
    }
}

/// What one bucket did.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketTelemetry {
    /// The bucket (rows of its steps).
    pub bucket: usize,
    /// Its graph's state.
    pub state: BucketState,
    /// Time of the eager warm-up steps before the capture (the first one of a process also
    /// pays the libraries' lazy set-up: cuBLAS's handle and workspace on CUDA).
    pub warmup: Option<Duration>,
    /// Capture time: the model's work recorded, not run.
    pub capture: Option<Duration>,
    /// Instantiation plus upload time of the executable graph.
    pub instantiate: Option<Duration>,
    /// Bytes the shared graph pool grew by while this bucket was captured (its activations
    /// beyond what earlier — larger — buckets left in the pool).
    pub pool_growth_bytes: usize,
    /// Bytes of the bucket's static buffers (per-step input, logits, next tokens).
    pub static_bytes: usize,
    /// Steps run by replaying the graph.
    pub replays: u64,
    /// Steps run eagerly (graphs off, or after a failed capture).
    pub eager_steps: u64,
    /// Captures that failed.
    pub capture_failures: u64,
    /// The last capture failure's message.
    pub last_failure: Option<String>,
    /// Sequence rows served (without padding).
    pub rows: u64,
    /// Padding rows computed.
    pub padded_rows: u64,
    /// Wall time of this bucket's steps (upload of the inputs, the step, download of the next
    /// tokens).
    pub step_time: Duration,
}

impl BucketTelemetry {
    pub(crate) fn new(bucket: usize, state: BucketState, static_bytes: usize) -> Self {
        BucketTelemetry {
            bucket,
            state,
            warmup: None,
            capture: None,
            instantiate: None,
            pool_growth_bytes: 0,
            static_bytes,
            replays: 0,
            eager_steps: 0,
            capture_failures: 0,
            last_failure: None,
            rows: 0,
            padded_rows: 0,
            step_time: Duration::ZERO,
        }
    }

    /// Steps run (replayed or eager).
    pub fn steps(&self) -> u64 {
        self.replays + self.eager_steps
    }

    /// Mean wall time per step, if any ran.
    pub fn mean_step(&self) -> Option<Duration> {
        let steps = u32::try_from(self.steps()).ok().filter(|&n| n > 0)?;
        Some(self.step_time / steps)
    }
}

/// An engine's telemetry: what it holds in device memory and what each bucket did. Its
/// `Display` is a table for people.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The backend and device (`cuda (NVIDIA H100 ...)`).
    pub backend: String,
    /// The element type.
    pub dtype: &'static str,
    /// Bytes of the weights (and RoPE table).
    pub weight_bytes: usize,
    /// Bytes of the key/value cache.
    pub cache_bytes: usize,
    /// Bytes the shared graph pool holds from the device now.
    pub pool_reserved_bytes: usize,
    /// Launches per step (kernels and GEMMs) of more than `fused_rows` rows.
    pub launches_per_step: usize,
    /// Steps of at most this many rows take the fused small-batch projections
    /// ([`crate::model::Model::fused_rows`]).
    pub fused_rows: usize,
    /// Launches per step of at most `fused_rows` rows.
    pub fused_launches_per_step: usize,
    /// Every bucket that was made (captured, failed or stepped), ascending.
    pub buckets: Vec<BucketTelemetry>,
}

impl Summary {
    /// The telemetry of `bucket`, if it was made.
    pub fn bucket(&self, bucket: usize) -> Option<&BucketTelemetry> {
        self.buckets.iter().find(|b| b.bucket == bucket)
    }

    /// Steps over all buckets.
    pub fn steps(&self) -> u64 {
        self.buckets.iter().map(BucketTelemetry::steps).sum()
    }

    /// Replays over all buckets.
    pub fn replays(&self) -> u64 {
        self.buckets.iter().map(|b| b.replays).sum()
    }

    /// Eager steps over all buckets.
    pub fn eager_steps(&self) -> u64 {
        self.buckets.iter().map(|b| b.eager_steps).sum()
    }

    /// Capture failures over all buckets.
    pub fn capture_failures(&self) -> u64 {
        self.buckets.iter().map(|b| b.capture_failures).sum()
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.2}", d.as_secs_f64() * 1e3),
    )
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} {}: weights {:.1} MiB, kv cache {:.1} MiB, graph pool {:.1} MiB, {} launches per \
             step ({} up to {} rows)",
            self.backend,
            self.dtype,
            mib(self.weight_bytes),
            mib(self.cache_bytes),
            mib(self.pool_reserved_bytes),
            self.launches_per_step,
            self.fused_launches_per_step,
            self.fused_rows
        )?;
        writeln!(
            f,
            "{:>6} {:>7} {:>9} {:>10} {:>14} {:>9} {:>8} {:>6} {:>8} {:>8} {:>8} {:>12}",
            "bucket",
            "state",
            "warmup_ms",
            "capture_ms",
            "instantiate_ms",
            "pool_MiB",
            "replays",
            "eager",
            "failures",
            "rows",
            "padding",
            "mean_step_ms"
        )?;
        for b in &self.buckets {
            writeln!(
                f,
                "{:>6} {:>7} {:>9} {:>10} {:>14} {:>9.2} {:>8} {:>6} {:>8} {:>8} {:>8} {:>12}",
                b.bucket,
                b.state.to_string(),
                ms(b.warmup),
                ms(b.capture),
                ms(b.instantiate),
                mib(b.pool_growth_bytes),
                b.replays,
                b.eager_steps,
                b.capture_failures,
                b.rows,
                b.padded_rows,
                ms(b.mean_step())
            )?;
            if let Some(e) = &b.last_failure {
                writeln!(f, "{:>6} last capture failure: {e}", "")?;
            }
        }
        Ok(())
    }
}
