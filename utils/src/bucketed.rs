//! `BucketedGraphCache`: vLLM's capture sizes — one graph per batch-size bucket.
//!
//! A graph replays fixed shapes, but inference batches vary. vLLM captures the model for a
//! list of batch sizes; a batch of `n` rows runs on the graph of the smallest captured size
//! `>= n`, its inputs padded with filler rows, and the padding rows of the outputs are cut
//! off; a batch larger than every capture size runs eagerly. All graphs share one memory pool,
//! and [`BucketedGraphCache::capture_all`] captures the largest size first, as vLLM does, so
//! smaller graphs reuse its memory.
//!
//! Shapes here are lengths: input `i` of a batch of `n` rows has `n * widths[i]` elements.
//! Every such size is computed with checked arithmetic: a size that overflows is
//! [`GraphError::OutOfMemory`] (as `alloc` answers a byte size that overflows), never a
//! wrapped length.
//!
//! ## Shared executables
//!
//! With [`BucketedCacheOptions::share_executables`] (on backends that update graphs), buckets
//! whose graphs have the same topology share one executable, as SGLang deduplicates its
//! captures: each bucket is captured (cheap) but only the first of a topology is instantiated
//! (expensive); running another bucket of that topology switches the shared executable to the
//! bucket's parameters with an update ([`Backend::update_graph`]) and replays it. Whether two
//! buckets share is decided by the update itself (same nodes, kinds, edges, kernel functions,
//! memset and memcpy sizes — kernel grids may differ), so results are those of separate
//! executables, bit for bit. A run that switches pays one update; runs of one bucket in a row
//! pay nothing.
#![deny(clippy::arithmetic_side_effects)]

use std::collections::BTreeMap;

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, CaptureExt, DeviceBuffer, GraphError,
    GraphOptions, PoolId, Result,
};

use crate::{callable::Callable, capture_sizes::CaptureSizes, outputs::Outputs};

/// Where a pre-capture ([`BucketedGraphCache::capture_all_with_progress`]) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureProgress {
    /// The bucket just captured (or found captured).
    pub bucket: usize,
    /// Buckets done so far, this one included.
    pub done: usize,
    /// Buckets in all.
    pub total: usize,
    /// Time since the pre-capture began.
    pub elapsed: std::time::Duration,
}

/// How a [`BucketedGraphCache`] captures and pads.
///
/// ```
/// use accel_graph_utils::BucketedCacheOptions;
/// let opts = BucketedCacheOptions::new().pad_value(-1.0).warmup_iters(0);
/// assert_eq!((opts.pad_value, opts.warmup_iters), (-1.0, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketedCacheOptions {
    /// Eager runs on a side stream before each capture (vLLM warms up once per size).
    pub warmup_iters: usize,
    /// Value of the padding rows' elements.
    pub pad_value: f32,
    /// The pool all graphs share; `None`: a fresh `graph_pool_handle()`.
    pub pool: Option<PoolId>,
    /// Capture error mode of the graphs.
    pub capture_error_mode: CaptureErrorMode,
    /// Buckets with the same topology share one executable, switched between buckets by an
    /// update (see the module documentation). Ignored where `capabilities().graph_update` is
    /// false.
    pub share_executables: bool,
    /// Capture every bucket when the cache is made ([`BucketedGraphCache::capture_all`]),
    /// rather than each on its first run.
    pub precapture: bool,
    /// [`BucketedGraphCache::capture_all`] instantiates (and uploads) each bucket on a second
    /// thread while the next bucket warms up and captures, instead of in line: a serving set
    /// is ready sooner where the device's runtime lets the two overlap (on CUDA about a fifth
    /// sooner). Buckets then keep their captured graphs after instantiation (as with
    /// `keep_graph(true)`). Ignored with shared executables.
    pub background_instantiate: bool,
}

impl Default for BucketedCacheOptions {
    fn default() -> Self {
        BucketedCacheOptions {
            warmup_iters: 1,
            pad_value: 0.0,
            pool: None,
            capture_error_mode: CaptureErrorMode::Default,
            share_executables: false,
            precapture: false,
            background_instantiate: true,
        }
    }
}

impl BucketedCacheOptions {
    /// One warmup run, zero padding, a fresh shared pool, default capture mode.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the warmup runs before each capture.
    pub fn warmup_iters(mut self, iters: usize) -> Self {
        self.warmup_iters = iters;
        self
    }

    /// Sets the padding value.
    pub fn pad_value(mut self, value: f32) -> Self {
        self.pad_value = value;
        self
    }

    /// Captures every bucket into `pool`.
    pub fn pool(mut self, pool: PoolId) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Sets the capture error mode.
    pub fn capture_error_mode(mut self, mode: CaptureErrorMode) -> Self {
        self.capture_error_mode = mode;
        self
    }

    /// Shares one executable among buckets of the same topology.
    pub fn share_executables(mut self, share: bool) -> Self {
        self.share_executables = share;
        self
    }

    /// Captures every bucket when the cache is made.
    pub fn precapture(mut self, precapture: bool) -> Self {
        self.precapture = precapture;
        self
    }

    /// Instantiates pre-captured buckets on a second thread (see the field).
    pub fn background_instantiate(mut self, background: bool) -> Self {
        self.background_instantiate = background;
        self
    }
}

/// Counters of a [`BucketedGraphCache`].
///
/// Every run is exactly one of: a hit (replay of a graph captured earlier), a replay right
/// after capturing its bucket on demand, or an eager fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketedCacheStats {
    /// Runs.
    pub runs: u64,
    /// Runs replaying a graph that was already captured.
    pub hits: u64,
    /// Graphs captured (on demand or by `capture_all`).
    pub captures: u64,
    /// Runs whose batch was padded up to a larger bucket.
    pub pads: u64,
    /// Padding elements written, over all inputs and runs.
    pub padded_elements: u64,
    /// Runs larger than the largest bucket, run eagerly.
    pub eager_fallbacks: u64,
    /// Executables instantiated (one per bucket; with shared executables, one per topology).
    pub instantiations: u64,
    /// Switches of a shared executable to another bucket's parameters (updates).
    pub updates: u64,
}

impl std::fmt::Display for BucketedCacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "runs {}, hits {}, captures {}, padded runs {} ({} padding elements), eager fallbacks \
             {}, instantiations {}, updates {}",
            self.runs,
            self.hits,
            self.captures,
            self.pads,
            self.padded_elements,
            self.eager_fallbacks,
            self.instantiations,
            self.updates
        )
    }
}

/// The graph of one bucket with its static buffers.
#[derive(Debug)]
struct BucketGraph<B: Backend> {
    /// Its own executable; or, with shared executables, the captured (never instantiated)
    /// source of its parameters.
    graph: B::Graph,
    inputs: Vec<B::Buffer<f32>>,
    outputs: Vec<B::Buffer<f32>>,
    /// The shared executable it runs on, if any (an index into the cache's groups).
    group: Option<usize>,
}

/// One executable shared by the buckets of one topology.
#[derive(Debug)]
struct SharedExecutable<B: Backend> {
    /// A graph of the topology, instantiated once and updated to the bucket it runs.
    executable: B::Graph,
    /// The bucket whose parameters it holds now.
    current: Option<usize>,
}

/// The result of one [`BucketedGraphCache`] run: outputs of the bucket's graph (with padding
/// rows) or of the eager fallback, and the batch they hold.
#[derive(Debug)]
pub struct BucketRun<'a, B: Backend> {
    backend: &'a B,
    outputs: Outputs<'a, B>,
    batch: usize,
    bucket: Option<usize>,
}

impl<B: Backend> BucketRun<'_, B> {
    /// The output buffers: rows `0..batch` are the batch's, the rest padding.
    pub fn outputs(&self) -> &Outputs<'_, B> {
        &self.outputs
    }

    /// Rows of the caller's batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The bucket whose graph ran, `None` after an eager fallback.
    pub fn bucket(&self) -> Option<usize> {
        self.bucket
    }

    /// Elements of output `i` that belong to the batch (the padding rows cut off).
    pub fn valid_len(&self, i: usize) -> usize {
        let rows = self.bucket.unwrap_or(self.batch);
        self.outputs.get(i).map_or(0, |o| {
            o.len()
                .checked_div(rows)
                .unwrap_or(0)
                .saturating_mul(self.batch)
        })
    }

    /// Downloads output `i` without its padding rows. Errors with
    /// [`GraphError::ArgumentMismatch`] for an index past the outputs.
    pub fn download(&self, i: usize) -> Result<Vec<f32>> {
        let buffer = self.outputs.get(i).ok_or_else(|| {
            GraphError::ArgumentMismatch(format!(
                "output {i} requested, the callable has {} output(s)",
                self.outputs.len()
            ))
        })?;
        let mut data = self.backend.download(buffer)?;
        data.truncate(self.valid_len(i));
        Ok(data)
    }
}

/// Graphs of a callable per batch-size bucket, sharing one pool.
///
/// The callable gets inputs of `bucket * widths[i]` elements and must return outputs whose
/// lengths are whole multiples of the batch size (rows), so padding rows can be cut off.
/// The callable's [`ModuleMode`](crate::ModuleMode) is not consulted: inference runs one mode.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes};
/// use accel_graph_mock::MockBackend;
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let backend = MockBackend::new();
/// let model = |b: &MockBackend, x: &[&Buf]| {
///     let y = b.alloc(x[0].len())?;
///     b.copy(&y, x[0])?;
///     b.scale(&y, 2.0)?;
///     Ok(vec![y])
/// };
/// let sizes = CaptureSizes::new([2, 4])?;
/// let mut cache = BucketedGraphCache::new(&backend, model, sizes, vec![1], BucketedCacheOptions::new())?;
/// let run = cache.run(&[&[1.0, 2.0, 3.0]])?; // 3 rows: padded to the bucket of 4
/// assert_eq!(run.bucket(), Some(4));
/// assert_eq!(run.download(0)?, vec![2.0, 4.0, 6.0]);
/// let run = cache.run(&[&[1.0; 5]])?; // larger than every bucket: eager
/// assert_eq!(run.bucket(), None);
/// assert_eq!(run.download(0)?, vec![2.0; 5]);
/// let stats = cache.stats();
/// assert_eq!((stats.captures, stats.pads, stats.padded_elements, stats.eager_fallbacks), (1, 1, 1, 1));
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct BucketedGraphCache<B: Backend, C> {
    backend: B,
    callable: C,
    sizes: CaptureSizes,
    widths: Vec<usize>,
    options: BucketedCacheOptions,
    pool: PoolId,
    capture_stream: B::Stream,
    warmup_stream: B::Stream,
    graphs: BTreeMap<usize, BucketGraph<B>>,
    shared: Vec<SharedExecutable<B>>,
    stats: BucketedCacheStats,
    /// Host staging for padded inputs, kept to avoid an allocation per run.
    staging: Vec<f32>,
}

/// Shows everything but the callable (closures have no `Debug`).
impl<B: Backend, C> std::fmt::Debug for BucketedGraphCache<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketedGraphCache")
            .field("sizes", &self.sizes)
            .field("widths", &self.widths)
            .field("options", &self.options)
            .field("pool", &self.pool)
            .field("graphs", &self.graphs)
            .field("shared_executables", &self.shared.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, C: Callable<B>> BucketedGraphCache<B, C> {
    /// A cache for `callable` over the buckets `sizes`; input `i` has `widths[i]` elements per
    /// row. Nothing is captured yet (see [`BucketedGraphCache::capture_all`]) unless
    /// [`BucketedCacheOptions::precapture`] is set.
    ///
    /// Errors with [`GraphError::ArgumentMismatch`] when `widths` is empty or holds a 0.
    pub fn new(
        backend: &B,
        callable: C,
        sizes: CaptureSizes,
        widths: Vec<usize>,
        options: BucketedCacheOptions,
    ) -> Result<Self> {
        if widths.is_empty() || widths.contains(&0) {
            return Err(GraphError::ArgumentMismatch(format!(
                "bucketed graph cache: every input needs a row width of at least 1 element, \
                 got widths {widths:?}"
            )));
        }
        let mut cache = BucketedGraphCache {
            backend: backend.clone(),
            callable,
            sizes,
            widths,
            options,
            pool: options.pool.unwrap_or_else(|| backend.graph_pool_handle()),
            capture_stream: backend.new_stream()?,
            warmup_stream: backend.new_stream()?,
            graphs: BTreeMap::new(),
            shared: Vec::new(),
            stats: BucketedCacheStats::default(),
            staging: Vec::new(),
        };
        if options.precapture {
            cache.capture_all()?;
        }
        Ok(cache)
    }

    /// Whether buckets of one topology share an executable here.
    fn sharing(&self) -> bool {
        self.options.share_executables && self.backend.capabilities().graph_update
    }

    /// Captures every bucket not captured yet, largest first; returns how many were captured.
    pub fn capture_all(&mut self) -> Result<usize> {
        self.capture_all_with_progress(|_| {})
    }

    /// [`BucketedGraphCache::capture_all`], calling `progress` after each bucket (captured now
    /// or before): what a server shows while it pre-captures dozens of graphs before its first
    /// request (a progress bar, a log line).
    ///
    /// ```
    /// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
    /// use accel_graph_utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes};
    /// let backend = accel_graph_mock::MockBackend::new();
    /// let double = |b: &accel_graph_mock::MockBackend, x: &[&accel_graph_mock::MockBuffer]| {
    ///     let out = b.alloc(x[0].len())?;
    ///     b.copy(&out, x[0])?;
    ///     b.scale(&out, 2.0)?;
    ///     Ok(vec![out])
    /// };
    /// let sizes = CaptureSizes::new([1, 2, 4])?;
    /// let mut cache = BucketedGraphCache::new(&backend, double, sizes, vec![8], BucketedCacheOptions::new())?;
    /// let mut seen = Vec::new();
    /// cache.capture_all_with_progress(|p| seen.push((p.bucket, p.done, p.total)))?;
    /// assert_eq!(seen, vec![(4, 1, 3), (2, 2, 3), (1, 3, 3)]);
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    pub fn capture_all_with_progress(
        &mut self,
        mut progress: impl FnMut(CaptureProgress),
    ) -> Result<usize> {
        let missing = self
            .sizes
            .as_slice()
            .iter()
            .filter(|s| !self.graphs.contains_key(s))
            .count();
        if self.options.background_instantiate && !self.sharing() && missing > 1 {
            return self.capture_all_pipelined(progress);
        }
        let mut captured = 0usize;
        self.each_bucket_largest_first(&mut progress, |cache, size| {
            cache.ensure_captured(size)?;
            captured = captured.saturating_add(1);
            Ok(true)
        })?;
        Ok(captured)
    }

    /// Visits the buckets largest first: `capture` for each not captured yet (`false`: stop
    /// here), then `progress`.
    fn each_bucket_largest_first(
        &mut self,
        progress: &mut impl FnMut(CaptureProgress),
        mut capture: impl FnMut(&mut Self, usize) -> Result<bool>,
    ) -> Result<()> {
        let sizes = self.sizes.clone();
        let total = sizes.len();
        let start = std::time::Instant::now();
        for (done, &size) in sizes.as_slice().iter().rev().enumerate() {
            let _span = tracing::info_span!("precapture", bucket = size, of = total).entered();
            if !self.graphs.contains_key(&size) && !capture(self, size)? {
                break;
            }
            progress(CaptureProgress {
                bucket: size,
                done: done.saturating_add(1),
                total,
                elapsed: start.elapsed(),
            });
        }
        Ok(())
    }

    /// [`BucketedGraphCache::capture_all_with_progress`] with each bucket's instantiation on a
    /// second thread (its own stream for the uploads) while this one warms up and captures the
    /// next: `progress` follows the captures. Buckets instantiated before an error are kept;
    /// the first error (this thread's, else the instantiating thread's) is returned.
    fn capture_all_pipelined(
        &mut self,
        mut progress: impl FnMut(CaptureProgress),
    ) -> Result<usize> {
        let backend = self.backend.clone();
        let (send, receive) = std::sync::mpsc::channel::<(usize, BucketGraph<B>)>();
        let (captures, instantiated) = std::thread::scope(|scope| {
            let instantiating = scope.spawn(move || {
                let mut ready = Vec::new();
                let outcome = (|| -> Result<()> {
                    let uploads = backend.new_stream()?;
                    let _current = backend.use_stream(&uploads)?;
                    for (bucket, mut entry) in receive {
                        let _span = tracing::info_span!("instantiate_bucket", bucket).entered();
                        entry.graph.instantiate()?;
                        ready.push((bucket, entry));
                    }
                    backend.stream_synchronize(&uploads)
                })();
                (ready, outcome)
            });
            let captures = self.each_bucket_largest_first(&mut progress, |cache, size| {
                let entry = cache.capture_bucket(size, true)?;
                // A closed channel: the instantiating thread stopped on an error, which it
                // reports.
                Ok(send.send((size, entry)).is_ok())
            });
            drop(send);
            let instantiated = instantiating
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (captures, instantiated)
        });
        let (ready, outcome) = instantiated;
        let captured = ready.len();
        for (bucket, entry) in ready {
            self.stats.instantiations = self.stats.instantiations.saturating_add(1);
            self.graphs.insert(bucket, entry);
        }
        captures?;
        outcome?;
        Ok(captured)
    }

    /// Runs a batch given as host data (`inputs[i]` holds `n * widths[i]` values): uploads it
    /// into the static inputs of the nearest bucket, padding rows up to the bucket, and
    /// replays (capturing the bucket first if needed); a batch beyond the largest bucket runs
    /// eagerly. Errors with [`GraphError::ArgumentMismatch`] for a wrong number of inputs,
    /// lengths that are not whole rows, inputs that disagree on the row count, or no rows.
    pub fn run(&mut self, inputs: &[&[f32]]) -> Result<BucketRun<'_, B>> {
        let batch = self.batch_of(inputs.iter().map(|x| x.len()))?;
        let Some(bucket) = self.sizes.bucket_for(batch) else {
            let buffers = inputs
                .iter()
                .map(|x| self.backend.alloc_from(x))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&B::Buffer<f32>> = buffers.iter().collect();
            return self.eager(batch, &refs);
        };
        let fresh = self.ensure_captured(bucket)?;
        self.upload_padded(bucket, batch, inputs)?;
        self.replay(bucket, batch, fresh)
    }

    /// Runs a batch given as device buffers (`inputs[i]` holds `n * widths[i]` elements). A
    /// batch that fills its bucket exactly is copied on the device (not at all when it is the
    /// bucket's static input); a batch needing padding goes through the host, since the
    /// portable ops copy whole buffers only. Beyond the largest bucket it runs eagerly on
    /// `inputs` as they are. Errors as [`BucketedGraphCache::run`].
    pub fn run_device(&mut self, inputs: &[&B::Buffer<f32>]) -> Result<BucketRun<'_, B>> {
        let batch = self.batch_of(inputs.iter().map(|x| x.len()))?;
        let Some(bucket) = self.sizes.bucket_for(batch) else {
            return self.eager(batch, inputs);
        };
        let fresh = self.ensure_captured(bucket)?;
        if bucket == batch {
            if inputs
                .iter()
                .any(|b| b.instance_id() != self.backend.instance_id())
            {
                return Err(GraphError::ForeignObject { what: "buffer" });
            }
            let statics = &self.graphs[&bucket].inputs;
            for (dst, src) in statics.iter().zip(inputs) {
                if !dst.same_memory(src) {
                    self.backend.copy(dst, *src)?;
                }
            }
        } else {
            let host = inputs
                .iter()
                .map(|x| self.backend.download(*x))
                .collect::<Result<Vec<_>>>()?;
            let host_refs: Vec<&[f32]> = host.iter().map(Vec::as_slice).collect();
            self.upload_padded(bucket, batch, &host_refs)?;
        }
        self.replay(bucket, batch, fresh)
    }

    /// Rows of a batch whose inputs have `lens` elements.
    fn batch_of(&self, lens: impl ExactSizeIterator<Item = usize>) -> Result<usize> {
        if lens.len() != self.widths.len() {
            return Err(GraphError::ArgumentMismatch(format!(
                "bucketed graph cache: the callable takes {} input(s), got {}",
                self.widths.len(),
                lens.len()
            )));
        }
        let mut batch = None;
        for (i, (len, &width)) in lens.zip(&self.widths).enumerate() {
            if len.checked_rem(width) != Some(0) {
                return Err(GraphError::ArgumentMismatch(format!(
                    "bucketed graph cache: input {i} has {len} elements, not a whole number \
                     of rows of {width}"
                )));
            }
            let rows = len.checked_div(width).unwrap_or(0);
            match batch {
                None => batch = Some(rows),
                Some(b) if b != rows => {
                    return Err(GraphError::ArgumentMismatch(format!(
                        "bucketed graph cache: input {i} has {rows} rows, input 0 has {b}"
                    )));
                }
                Some(_) => {}
            }
        }
        match batch {
            Some(rows) if rows > 0 => Ok(rows),
            _ => Err(GraphError::ArgumentMismatch(
                "bucketed graph cache: a batch needs at least one row".into(),
            )),
        }
    }

    fn eager(&mut self, batch: usize, inputs: &[&B::Buffer<f32>]) -> Result<BucketRun<'_, B>> {
        let outputs = self.callable.call(&self.backend, inputs)?;
        check_rows(&outputs, batch)?;
        self.stats.runs = self.stats.runs.saturating_add(1);
        self.stats.eager_fallbacks = self.stats.eager_fallbacks.saturating_add(1);
        Ok(BucketRun {
            backend: &self.backend,
            outputs: Outputs::Eager(outputs),
            batch,
            bucket: None,
        })
    }

    /// Writes host rows into the static inputs of `bucket`, padding the rest.
    fn upload_padded(&mut self, bucket: usize, batch: usize, inputs: &[&[f32]]) -> Result<()> {
        // An upload is not ordered after stream work, and the last replay may still be
        // reading these static inputs: wait for it first.
        self.backend
            .stream_synchronize(&self.backend.current_stream())?;
        let statics = &self.graphs[&bucket].inputs;
        for ((dst, data), &width) in statics.iter().zip(inputs).zip(&self.widths) {
            if bucket == batch {
                self.backend.upload(dst, data)?;
            } else {
                self.staging.clear();
                self.staging.extend_from_slice(data);
                self.staging.resize(
                    elements(&self.backend, bucket, width)?,
                    self.options.pad_value,
                );
                self.backend.upload(dst, &self.staging)?;
                let padding = elements(&self.backend, bucket.saturating_sub(batch), width)?;
                self.stats.padded_elements =
                    self.stats.padded_elements.saturating_add(padding as u64);
            }
        }
        if bucket != batch {
            self.stats.pads = self.stats.pads.saturating_add(1);
        }
        Ok(())
    }

    fn replay(&mut self, bucket: usize, batch: usize, fresh: bool) -> Result<BucketRun<'_, B>> {
        let entry = self
            .graphs
            .get_mut(&bucket)
            .ok_or(GraphError::NotCaptured {
                operation: "replay",
            })?;
        match entry.group.and_then(|g| self.shared.get_mut(g)) {
            Some(shared) => {
                if shared.current != Some(bucket) {
                    // Forget the bucket first: if the update fails, the executable is left as
                    // it was, but the next run must not take it for this bucket's.
                    shared.current = None;
                    self.backend
                        .update_graph(&mut shared.executable, &entry.graph)?;
                    shared.current = Some(bucket);
                    self.stats.updates = self.stats.updates.saturating_add(1);
                }
                shared.executable.replay()?;
            }
            None => entry.graph.replay()?,
        }
        self.stats.runs = self.stats.runs.saturating_add(1);
        if !fresh {
            self.stats.hits = self.stats.hits.saturating_add(1);
        }
        Ok(BucketRun {
            backend: &self.backend,
            outputs: Outputs::Static(&entry.outputs),
            batch,
            bucket: Some(bucket),
        })
    }

    /// Captures `bucket` unless it is; true when it captured now.
    fn ensure_captured(&mut self, bucket: usize) -> Result<bool> {
        if self.graphs.contains_key(&bucket) {
            return Ok(false);
        }
        let entry = self.capture_bucket(bucket, false)?;
        if entry.group.is_none() {
            self.stats.instantiations = self.stats.instantiations.saturating_add(1);
        }
        self.graphs.insert(bucket, entry);
        Ok(true)
    }

    /// Warms `bucket` up and captures it: instantiated (or joined to a shared executable),
    /// unless `deferred`, when the caller instantiates it (the graph keeps its captured graph).
    fn capture_bucket(&mut self, bucket: usize, deferred: bool) -> Result<BucketGraph<B>> {
        let backend = &self.backend;
        let inputs = self
            .widths
            .iter()
            .map(|&width| {
                let buffer = backend.alloc(elements(backend, bucket, width)?)?;
                backend.fill(&buffer, self.options.pad_value)?;
                Ok(buffer)
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&B::Buffer<f32>> = inputs.iter().collect();

        // Ordered by events rather than device-wide synchronizes (which vLLM uses): the
        // warm-up follows the inputs' fill, the capture follows the warm-up, and nothing here
        // waits for the whole device — so caches on other threads can capture meanwhile (a
        // device-wide synchronize conflicts with every capture in progress).
        let filled = backend.new_event()?;
        backend.record_event(&filled)?;
        let warmed = backend.new_event()?;
        {
            let _span =
                tracing::info_span!("warmup", bucket, iters = self.options.warmup_iters).entered();
            let _current = backend.use_stream(&self.warmup_stream)?;
            backend.wait_event(&filled)?;
            for _ in 0..self.options.warmup_iters {
                drop(self.callable.call(backend, &refs)?);
            }
            backend.record_event(&warmed)?;
        }
        {
            let _current = backend.use_stream(&self.capture_stream)?;
            backend.wait_event(&warmed)?;
        }
        // Later work on the current stream (the next batch's upload into these inputs) comes
        // after the warm-up's reads of them.
        backend.wait_event(&warmed)?;

        let sharing = self.sharing();
        let options = GraphOptions::new()
            .pool(self.pool)
            .capture_error_mode(self.options.capture_error_mode)
            // A bucket sharing an executable is the source of its parameters: never
            // instantiated itself; a deferred one is instantiated by the caller.
            .keep_graph(sharing || deferred);
        let mut graph = backend.graph(options)?;
        let outputs = {
            let callable = &mut self.callable;
            let _current = backend.use_stream(&self.capture_stream)?;
            graph.capture(|| callable.call(backend, &refs))?
        };
        check_rows(&outputs, bucket)?;
        self.stats.captures = self.stats.captures.saturating_add(1);
        let group = if sharing {
            Some(self.join_group(bucket, &graph, &refs, options)?)
        } else {
            None
        };
        drop(refs);
        Ok(BucketGraph {
            graph,
            inputs,
            outputs,
            group,
        })
    }

    /// The shared executable `graph` (bucket `bucket`'s, just captured) runs on: the first
    /// whose topology it has (the update to it succeeds), or a new one instantiated for it.
    fn join_group(
        &mut self,
        bucket: usize,
        graph: &B::Graph,
        inputs: &[&B::Buffer<f32>],
        options: GraphOptions,
    ) -> Result<usize> {
        for (index, shared) in self.shared.iter_mut().enumerate() {
            // A refused update leaves the executable as it was (still the bucket it held).
            match self.backend.update_graph(&mut shared.executable, graph) {
                Ok(()) => {
                    shared.current = Some(bucket);
                    self.stats.updates = self.stats.updates.saturating_add(1);
                    return Ok(index);
                }
                // Another topology: try the next executable.
                Err(GraphError::UpdateRefused { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // A topology of its own: capture it once more, as the executable of the topology
        // (the bucket's own graph stays the untouched source of its parameters), take the
        // bucket's parameters (its buffers: the second capture's are let go) and instantiate.
        let mut executable = self.backend.graph(options)?;
        {
            let callable = &mut self.callable;
            let backend = &self.backend;
            let _current = backend.use_stream(&self.capture_stream)?;
            drop(executable.capture(|| callable.call(backend, inputs))?);
        }
        self.backend.update_graph(&mut executable, graph)?;
        executable.instantiate()?;
        self.stats.instantiations = self.stats.instantiations.saturating_add(1);
        self.shared.push(SharedExecutable {
            executable,
            current: Some(bucket),
        });
        Ok(self.shared.len().saturating_sub(1))
    }

    /// Counters of runs, hits, captures, padding and eager fallbacks.
    pub fn stats(&self) -> BucketedCacheStats {
        self.stats
    }

    /// The buckets.
    pub fn sizes(&self) -> &CaptureSizes {
        &self.sizes
    }

    /// Buckets captured so far, ascending.
    pub fn captured_buckets(&self) -> Vec<usize> {
        self.graphs.keys().copied().collect()
    }

    /// The pool every graph of the cache allocates from.
    pub fn pool(&self) -> PoolId {
        self.pool
    }

    /// The static inputs of `bucket`, if captured (write a full batch there and pass them to
    /// [`BucketedGraphCache::run_device`] to skip the copy).
    pub fn static_inputs(&self, bucket: usize) -> Option<&[B::Buffer<f32>]> {
        self.graphs.get(&bucket).map(|g| g.inputs.as_slice())
    }

    /// The graph of `bucket`, if captured (with shared executables: the captured source of
    /// its parameters, which is not instantiated).
    pub fn graph(&self, bucket: usize) -> Option<&B::Graph> {
        self.graphs.get(&bucket).map(|g| &g.graph)
    }

    /// Executables the cache holds: one per captured bucket, or with shared executables one
    /// per topology.
    pub fn executables(&self) -> usize {
        if self.sharing() {
            self.shared.len()
        } else {
            self.graphs.len()
        }
    }

    /// Drops every graph and its buffers (the statistics stay).
    pub fn reset(&mut self) {
        self.shared.clear();
        self.graphs.clear();
    }
}

/// Elements of `rows` rows of `width`, checked: a count that overflows is memory no device
/// holds, `OutOfMemory` as for an `alloc` whose byte size overflows.
fn elements<B: Backend>(backend: &B, rows: usize, width: usize) -> Result<usize> {
    rows.checked_mul(width)
        .ok_or_else(|| GraphError::size_overflow(backend.kind().name()))
}

/// Outputs must be whole rows of `rows`, so padding rows can be cut off.
fn check_rows<T: DeviceBuffer>(outputs: &[T], rows: usize) -> Result<()> {
    match outputs
        .iter()
        .position(|o| o.len().checked_rem(rows) != Some(0))
    {
        Some(i) => Err(GraphError::ArgumentMismatch(format!(
            "bucketed graph cache: output {i} has {} elements for a batch of {rows} rows; \
             outputs must hold whole rows so padding rows can be cut off",
            outputs[i].len()
        ))),
        None => Ok(()),
    }
}
