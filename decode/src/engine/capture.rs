//! Capturing a bucket: warm-up on the capture stream, capture into the shared pool,
//! instantiate and upload on the run stream, each timed; a failure leaves the bucket eager.

use std::time::{Duration, Instant};

use accel_graph::{AcceleratorGraph, Backend, GraphOptions, Result};

use super::{Bucket, Engine, telemetry::BucketState};
use crate::{DecodeElement, model::inputs};

/// A captured, instantiated bucket graph and what it cost.
struct Captured<G> {
    graph: G,
    warmup: Duration,
    capture: Duration,
    instantiate: Duration,
    pool_growth: usize,
}

/// Where a pre-capture stands, for a progress callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureProgress {
    /// The bucket just handled.
    pub bucket: usize,
    /// Whether its capture succeeded (else it runs eagerly).
    pub captured: bool,
    /// Buckets handled so far, this one included.
    pub done: usize,
    /// Buckets to handle.
    pub total: usize,
}

impl<B: Backend, T: DecodeElement> Engine<B, T> {
    /// Captures `bucket` (made first if needed) unless it is captured or failed already.
    /// Returns whether it is captured now. A capture that fails is reported — a `tracing`
    /// warning, [`BucketTelemetry::capture_failures`](super::BucketTelemetry) and
    /// `last_failure` — and the bucket runs eagerly from then on; the error is not returned.
    /// Errors: `bucket` is not one of the engine's buckets, or graphs are off
    /// ([`accel_graph::GraphError::ArgumentMismatch`]), or making its buffers failed.
    pub fn capture_bucket(&mut self, bucket: usize) -> Result<bool> {
        if !self.options.graphs {
            return Err(accel_graph::GraphError::ArgumentMismatch(
                "capture_bucket: graphs are off for this engine (EngineOptions::graphs)".to_owned(),
            ));
        }
        self.check_bucket(bucket)?;
        self.ensure_bucket(bucket)?;
        let state = self.buckets[&bucket].telemetry.state;
        if state != BucketState::Pending {
            return Ok(state == BucketState::Captured);
        }
        let span = tracing::info_span!("capture_bucket", bucket).entered();
        let outcome = self.try_capture(bucket);
        drop(span);
        let Some(entry) = self.buckets.get_mut(&bucket) else {
            return outcome.map(|_| false);
        };
        let t = &mut entry.telemetry;
        match outcome {
            Ok(c) => {
                tracing::info!(
                    bucket,
                    warmup_ms = c.warmup.as_secs_f64() * 1e3,
                    capture_ms = c.capture.as_secs_f64() * 1e3,
                    instantiate_ms = c.instantiate.as_secs_f64() * 1e3,
                    pool_growth_bytes = c.pool_growth,
                    "bucket captured"
                );
                t.state = BucketState::Captured;
                t.warmup = Some(c.warmup);
                t.capture = Some(c.capture);
                t.instantiate = Some(c.instantiate);
                t.pool_growth_bytes = c.pool_growth;
                entry.graph = Some(c.graph);
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(bucket, error = %e, "bucket capture failed; it runs eagerly");
                t.state = BucketState::Failed;
                t.capture_failures += 1;
                t.last_failure = Some(e.to_string());
                Ok(false)
            }
        }
    }

    /// Captures the buckets `buckets` (those not handled yet), largest first, calling
    /// `progress` after each. Returns how many are captured in all among them. Failures are
    /// reported as [`Engine::capture_bucket`] reports them.
    pub fn precapture_with(
        &mut self,
        buckets: &[usize],
        mut progress: impl FnMut(CaptureProgress),
    ) -> Result<usize> {
        let mut order: Vec<usize> = buckets.to_vec();
        order.sort_unstable_by(|a, b| b.cmp(a));
        order.dedup();
        let _span = tracing::info_span!("precapture", buckets = order.len()).entered();
        let total = order.len();
        let mut captured = 0;
        for (i, &bucket) in order.iter().enumerate() {
            let ok = self.capture_bucket(bucket)?;
            captured += usize::from(ok);
            progress(CaptureProgress {
                bucket,
                captured: ok,
                done: i + 1,
                total,
            });
        }
        Ok(captured)
    }

    /// [`Engine::precapture_with`], with an `indicatif` progress bar on stderr when `bar`.
    pub fn precapture(&mut self, buckets: &[usize], bar: bool) -> Result<usize> {
        let progress = bar.then(|| {
            let p = indicatif::ProgressBar::new(buckets.len() as u64);
            p.set_style(
                indicatif::ProgressStyle::with_template(
                    "pre-capture {bar:40} {pos}/{len} buckets, {elapsed_precise} ({msg})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            p
        });
        let captured = self.precapture_with(buckets, |p| {
            if let Some(bar) = &progress {
                bar.set_message(format!(
                    "bucket {}{}",
                    p.bucket,
                    if p.captured { "" } else { " failed" }
                ));
                bar.set_position(p.done as u64);
            }
        })?;
        if let Some(bar) = progress {
            bar.finish();
        }
        Ok(captured)
    }

    /// Warm-up, capture and instantiation of `bucket`, whose buffers exist.
    fn try_capture(&mut self, bucket: usize) -> Result<Captured<B::Graph>> {
        let b = &self.backend;
        let Bucket { io, .. } = &self.buckets[&bucket];
        // Padding rows only (length 0): the warm-up writes no cache position, and the capture
        // records work, it runs none.
        {
            let _run = b.use_stream(&self.run_stream)?;
            b.stream_synchronize(&self.run_stream)?;
            b.upload(io.meta(), &inputs::pack(&[], bucket))?;
        }
        let start = Instant::now();
        // The capture stream follows the run stream's work (the cache it reads), and the run
        // stream's later work follows the warm-up (the buffers it writes).
        let (forked, warmed) = (b.new_event()?, b.new_event()?);
        {
            let _run = b.use_stream(&self.run_stream)?;
            b.record_event(&forked)?;
        }
        let warmed_up = {
            let _capture = b.use_stream(&self.capture_stream)?;
            b.wait_event(&forked)?;
            let _span =
                tracing::info_span!("warmup", bucket, iters = self.options.warmup_iters).entered();
            let warmed_up = (0..self.options.warmup_iters)
                .try_for_each(|_| self.model.forward(io, &self.cache));
            // Recorded even after a failed warm-up: the run stream's next work (the eager
            // step's upload of the same input) must follow what the warm-up did issue.
            b.record_event(&warmed)?;
            warmed_up
        };
        {
            let _run = b.use_stream(&self.run_stream)?;
            b.wait_event(&warmed)?;
        }
        b.event_synchronize(&warmed)?;
        warmed_up?;
        let warmup = start.elapsed();
        let start = Instant::now();
        let pool_before = self.pool_reserved();
        let issued = self.model.collectives_issued();
        let captured = b
            .graph(
                GraphOptions::new()
                    .pool(self.pool)
                    .keep_graph(true)
                    .capture_error_mode(self.options.capture_error_mode),
            )
            .and_then(|mut graph| {
                b.capture_on(&self.capture_stream, &mut graph, || {
                    self.model.forward(io, &self.cache)
                })
                .map(|()| graph)
            });
        let mut graph = captured.inspect_err(|_| self.model.capture_failed(issued))?;
        let capture = start.elapsed();
        let start = Instant::now();
        {
            let _run = b.use_stream(&self.run_stream)?;
            let _span = tracing::info_span!("instantiate", bucket).entered();
            graph.instantiate()?;
            b.stream_synchronize(&self.run_stream)?;
        }
        Ok(Captured {
            graph,
            warmup,
            capture,
            instantiate: start.elapsed(),
            pool_growth: self.pool_reserved().saturating_sub(pool_before),
        })
    }

    /// Bytes the shared pool holds from the device.
    pub(crate) fn pool_reserved(&self) -> usize {
        self.backend
            .memory_stats()
            .pool(self.pool)
            .map_or(0, |p| p.reserved_bytes)
    }
}
