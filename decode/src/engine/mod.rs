//! [`Engine`]: decode steps as one graph per batch bucket.
//!
//! A step of `n` rows runs in the smallest bucket `>= n` ([`EngineOptions::buckets`]), padded
//! with rows of length 0 that write nothing into the cache. Each bucket owns static buffers
//! ([`StepBuffers`]: the per-step input, logits, next tokens); the host uploads the step's
//! token ids, positions, lengths and slots into its input and replays the bucket's graph, so
//! one capture serves every step of that size. Buckets are captured on their first step, or
//! before ([`EngineOptions::precapture`], largest first), into one graph pool, where smaller
//! buckets reuse the activations' memory of larger ones (nothing a graph leaves for later
//! lives in the pool, so the graphs may replay in any order on the run stream). A capture
//! that fails is reported in the telemetry and its bucket runs eagerly.
//!
//! Streams: steps (uploads, replays, eager work) run on the engine's run stream; warm-ups and
//! captures on its capture stream, ordered with the run stream by events.

mod capture;
mod options;
mod step;
mod telemetry;

use std::{collections::BTreeMap, time::Instant};

use accel_graph::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError, PoolId, Result, utils::CaptureSizes,
};

pub use capture::CaptureProgress;
pub use options::EngineOptions;
pub use step::{StepMode, StepOutput};
pub use telemetry::{BucketState, BucketTelemetry, Summary};

use crate::{
    Config, DecodeElement,
    model::{KvCache, Model, StepBuffers, StepRow, inputs},
};

/// The grid's second dimension holds the rows in the attention kernel: CUDA's limit.
const MAX_BUCKET: usize = 65_535;

/// One bucket: its static buffers, its graph once captured, its telemetry.
#[derive(Debug)]
struct Bucket<B: Backend, T: DecodeElement> {
    io: StepBuffers<B, T>,
    graph: Option<B::Graph>,
    telemetry: BucketTelemetry,
}

/// A Llama decode engine on backend `B` with elements `T`: the model, a key/value cache of
/// [`Engine::slots`] sequences, and a graph per batch bucket. See the [module
/// documentation](self) and the crate's example.
#[derive(Debug)]
pub struct Engine<B: Backend, T: DecodeElement> {
    backend: B,
    model: Model<B, T>,
    cache: KvCache<B, T>,
    sizes: CaptureSizes,
    options: EngineOptions,
    pool: PoolId,
    run_stream: B::Stream,
    capture_stream: B::Stream,
    buckets: BTreeMap<usize, Bucket<B, T>>,
    /// Positions each slot's sequence has written (its next position at most this).
    filled: Vec<u32>,
    /// The bucket and rows of the last step.
    last: Option<(usize, usize)>,
}

impl<B: Backend, T: DecodeElement> Engine<B, T> {
    /// An engine over a model with [`Tensor::random`](crate::model::Tensor::random) weights
    /// for `seed`. See [`Engine::new`].
    pub fn random(backend: &B, config: Config, seed: u64, options: EngineOptions) -> Result<Self> {
        Self::check_options(&config, &options)?;
        let model = Model::random(backend, config, seed)?;
        Self::new(model, options)
    }

    /// An engine over `model`: allocates the key/value cache and pre-captures
    /// [`EngineOptions::precapture`] (with a progress bar if [`EngineOptions::progress`]).
    ///
    /// Errors ([`GraphError::ArgumentMismatch`]): no bucket, a bucket of 0 or above 65,535, a
    /// bucket whose activations exceed 2³² elements, a pre-capture bucket that is not a
    /// bucket, fewer slots than the largest bucket; and the device's errors (memory).
    pub fn new(model: Model<B, T>, options: EngineOptions) -> Result<Self> {
        let config = *model.config();
        let sizes = Self::check_options(&config, &options)?;
        let slots = options.slots.unwrap_or(sizes.largest());
        let backend = model.backend().clone();
        let mut engine = Engine {
            cache: KvCache::new(&backend, &config, slots)?,
            pool: backend.graph_pool_handle(),
            run_stream: backend.new_stream()?,
            capture_stream: backend.new_stream()?,
            buckets: BTreeMap::new(),
            filled: vec![0; slots],
            last: None,
            backend,
            model,
            sizes,
            options,
        };
        if engine.options.graphs && !engine.options.precapture.is_empty() {
            let (buckets, bar) = (engine.options.precapture.clone(), engine.options.progress);
            engine.precapture(&buckets, bar)?;
        }
        Ok(engine)
    }

    fn check_options(config: &Config, options: &EngineOptions) -> Result<CaptureSizes> {
        let refuse = |msg: String| Err(GraphError::ArgumentMismatch(format!("engine: {msg}")));
        let sizes = CaptureSizes::new(options.buckets.iter().copied())?;
        if sizes.largest() > MAX_BUCKET {
            return refuse(format!(
                "bucket {} exceeds the largest step the kernels take ({MAX_BUCKET} rows)",
                sizes.largest()
            ));
        }
        let widest = [
            config.vocab,
            config.qkv_dim(),
            2 * config.intermediate,
            config.hidden,
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        if sizes
            .largest()
            .checked_mul(widest)
            .is_none_or(|n| n > u32::MAX as usize)
        {
            return refuse(format!(
                "bucket {} makes activations beyond 2^32 elements",
                sizes.largest()
            ));
        }
        if let Some(b) = options
            .precapture
            .iter()
            .find(|b| !sizes.as_slice().contains(b))
        {
            return refuse(format!(
                "pre-capture bucket {b} is not one of the buckets {:?}",
                sizes.as_slice()
            ));
        }
        if let Some(slots) = options.slots
            && slots < sizes.largest()
        {
            return refuse(format!(
                "{slots} cache slots cannot hold a step of the largest bucket ({})",
                sizes.largest()
            ));
        }
        Ok(sizes)
    }

    /// The model.
    pub fn model(&self) -> &Model<B, T> {
        &self.model
    }

    /// The options.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The buckets, ascending.
    pub fn buckets(&self) -> &[usize] {
        self.sizes.as_slice()
    }

    /// The bucket a step of `rows` rows runs in (`None` beyond the largest, or for 0 rows).
    pub fn bucket_for(&self, rows: usize) -> Option<usize> {
        if rows == 0 {
            return None;
        }
        self.sizes.bucket_for(rows)
    }

    /// Sequences the cache holds: slots `0..slots()`.
    pub fn slots(&self) -> usize {
        self.cache.slots()
    }

    /// Positions the sequence in `slot` has written: its next step may feed any position up to
    /// this one (this one continues it; an earlier one rewinds it).
    pub fn slot_len(&self, slot: u32) -> Option<u32> {
        self.filled.get(slot as usize).copied()
    }

    /// The shared graph pool of the buckets.
    pub fn pool(&self) -> PoolId {
        self.pool
    }

    /// The stream steps run on.
    pub fn run_stream(&self) -> &B::Stream {
        &self.run_stream
    }

    fn check_bucket(&self, bucket: usize) -> Result<()> {
        if self.sizes.as_slice().contains(&bucket) {
            Ok(())
        } else {
            Err(GraphError::ArgumentMismatch(format!(
                "bucket {bucket} is not one of the engine's buckets {:?}",
                self.sizes.as_slice()
            )))
        }
    }

    /// Makes `bucket`'s static buffers unless they exist.
    fn ensure_bucket(&mut self, bucket: usize) -> Result<()> {
        if !self.buckets.contains_key(&bucket) {
            let io = StepBuffers::new(&self.backend, self.model.config(), bucket)?;
            let state = if self.options.graphs {
                BucketState::Pending
            } else {
                BucketState::Eager
            };
            let telemetry = BucketTelemetry::new(bucket, state, io.bytes());
            self.buckets.insert(
                bucket,
                Bucket {
                    io,
                    graph: None,
                    telemetry,
                },
            );
        }
        Ok(())
    }

    /// One decode step: each row feeds its token at its position of the sequence in its slot,
    /// and gets its greedy next token. Runs in the bucket of `rows.len()`: its graph replayed
    /// (captured first if this is its first step), or eagerly where graphs are off or its
    /// capture failed. Blocks until the next tokens are on the host.
    ///
    /// Errors ([`GraphError::ArgumentMismatch`], before any work): no rows, more rows than
    /// the largest bucket, a slot past the cache or used twice, a token past the vocabulary,
    /// a position past `max_len` or past what the slot's sequence wrote
    /// ([`Engine::slot_len`]); and the backend's errors.
    pub fn step(&mut self, rows: &[StepRow]) -> Result<StepOutput> {
        step::check_rows(
            rows,
            self.sizes.largest(),
            self.model.config(),
            &self.filled,
        )?;
        let n = rows.len();
        let bucket = self.sizes.bucket_for(n).ok_or_else(|| {
            GraphError::ArgumentMismatch(format!("decode step: no bucket for {n} rows"))
        })?;
        self.ensure_bucket(bucket)?;
        if self.options.graphs {
            self.capture_bucket(bucket)?;
        }
        let _span = tracing::debug_span!("decode_step", bucket, rows = n).entered();
        let start = Instant::now();
        let b = &self.backend;
        let entry = self
            .buckets
            .get_mut(&bucket)
            .ok_or(GraphError::NotCaptured { operation: "step" })?;
        let _run = b.use_stream(&self.run_stream)?;
        // The upload is not ordered after stream work: the last step (which read this input)
        // must have finished. It has when its tokens were downloaded; this makes it certain.
        b.stream_synchronize(&self.run_stream)?;
        b.upload(entry.io.meta(), &inputs::pack(rows, bucket))?;
        let mode = match &mut entry.graph {
            Some(graph) => {
                graph.replay()?;
                StepMode::Replayed
            }
            None => {
                self.model.forward(&entry.io, &self.cache)?;
                StepMode::Eager
            }
        };
        let tokens = b.download(entry.io.next().view(0..n)?)?;
        for row in rows {
            self.filled[row.slot as usize] = row.position + 1;
        }
        let t = &mut entry.telemetry;
        match mode {
            StepMode::Replayed => t.replays += 1,
            StepMode::Eager => t.eager_steps += 1,
        }
        t.rows += n as u64;
        t.padded_rows += (bucket - n) as u64;
        t.step_time += start.elapsed();
        self.last = Some((bucket, n));
        Ok(StepOutput {
            tokens,
            bucket,
            mode,
        })
    }

    /// The logits of the last step's rows (`[rows, vocab]`, padding cut off). Errors with
    /// [`GraphError::NotCaptured`] before any step.
    pub fn last_logits(&self) -> Result<Vec<T>> {
        let (bucket, n) = self.last.ok_or(GraphError::NotCaptured {
            operation: "last_logits (no step ran yet)",
        })?;
        let entry = self.buckets.get(&bucket).ok_or(GraphError::NotCaptured {
            operation: "last_logits",
        })?;
        let _run = self.backend.use_stream(&self.run_stream)?;
        self.backend
            .download(entry.io.logits().view(0..n * self.model.config().vocab)?)
    }

    /// The telemetry of `bucket`, if it was made.
    pub fn bucket_telemetry(&self, bucket: usize) -> Option<&BucketTelemetry> {
        self.buckets.get(&bucket).map(|b| &b.telemetry)
    }

    /// The graph of `bucket`, if captured.
    pub fn graph(&self, bucket: usize) -> Option<&B::Graph> {
        self.buckets.get(&bucket)?.graph.as_ref()
    }

    /// What the engine holds and what each bucket did.
    pub fn summary(&self) -> Summary {
        Summary {
            backend: format!(
                "{} ({})",
                self.backend.kind(),
                self.backend.capabilities().device_name
            ),
            dtype: T::NAME,
            weight_bytes: self.model.bytes(),
            cache_bytes: self.cache.bytes(),
            pool_reserved_bytes: self.pool_reserved(),
            launches_per_step: self.model.launches_per_step(usize::MAX),
            fused_rows: self.model.fused_rows(),
            fused_launches_per_step: self.model.launches_per_step(1),
            buckets: self.buckets.values().map(|b| b.telemetry.clone()).collect(),
        }
    }
}
