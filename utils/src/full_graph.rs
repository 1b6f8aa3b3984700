//! `FullGraphWrapper`: Megatron-Core's `FullCudaGraphWrapper` — the whole training (or
//! validation) step as one graph.
//!
//! The first `warmup_steps` steps of a stage run eagerly. The next one loads its inputs into
//! static buffers ([`StaticBufferLoader`]), captures the step on the shared capture stream
//! ([`shared_capture_stream`]) into [`graph_pool`]`(use_single_mempool)`, and replays it (a
//! capture records, it does not run); every later step loads its inputs and replays. Training
//! and validation have separate graphs, buffers and counters. Before a replay the step's
//! [`StepSignature`] is checked against the captured one, and a mismatch is handled by the
//! [`SignaturePolicy`].

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, CaptureExt, GraphError, GraphOptions, Result,
};

use crate::{
    capture_barrier::CaptureBarrier,
    shared_resources::{graph_pool, shared_capture_stream},
    signature::{SignaturePolicy, StepSignature},
    stage::Stage,
    static_buffer_loader::StaticBufferLoader,
};

/// Megatron's default `cuda_graph_warmup_steps`.
const DEFAULT_WARMUP_STEPS: u64 = 1;

/// Graph, outputs and counters of one stage.
#[derive(Debug)]
struct StageState<B: Backend> {
    graph: Option<B::Graph>,
    signature: Option<StepSignature>,
    /// The static outputs of the graph, or the outputs of the last eager step.
    outputs: Vec<B::Buffer<f32>>,
    iteration: u64,
    captures: u64,
    replays: u64,
    eager_steps: u64,
}

impl<B: Backend> StageState<B> {
    fn new() -> Self {
        StageState {
            graph: None,
            signature: None,
            outputs: Vec::new(),
            iteration: 0,
            captures: 0,
            replays: 0,
            eager_steps: 0,
        }
    }
}

/// Runs a step function eagerly for a few warmup steps, then as one captured graph per
/// [`Stage`].
///
/// The step function `step(backend, stage, microbatches)` gets the step's inputs as
/// `microbatches[m][i]` (the caller's buffers when eager, the static buffers when captured),
/// issues its work on the current stream and returns its outputs (allocated with
/// [`Backend::alloc`]; during capture they come from the graph's pool). State it updates in
/// place (weights, optimizer moments) must live in buffers allocated before the capture.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, GraphError, PortableOps};
/// use accel_graph_utils::{FullGraphWrapper, SignaturePolicy, Stage};
/// use accel_graph_mock::MockBackend;
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let backend = MockBackend::new();
/// // Returns the sum of its microbatches.
/// let step = |b: &MockBackend, _stage: Stage, batches: &[&[&Buf]]| {
///     let sum = b.alloc(batches[0][0].len())?;
///     b.fill(&sum, 0.0)?;
///     for inputs in batches {
///         b.axpy(&sum, 1.0, inputs[0])?;
///     }
///     Ok(vec![sum])
/// };
/// let mut wrapper = FullGraphWrapper::new(&backend, step)?; // 1 warmup step, then capture
/// let (a, c) = (backend.alloc_from(&[1.0, 2.0])?, backend.alloc_from(&[10.0, 20.0])?);
/// for _ in 0..3 {
///     let out = wrapper.run(Stage::Validation, &[&[&a], &[&c]])?;
///     assert_eq!(backend.download(&out[0])?, vec![11.0, 22.0]);
/// }
/// assert_eq!((wrapper.eager_steps(Stage::Validation), wrapper.replays(Stage::Validation)), (1, 2));
/// // Three microbatches do not match the captured signature (default policy: error).
/// let err = wrapper.run(Stage::Validation, &[&[&a], &[&c], &[&a]]).unwrap_err();
/// assert!(matches!(err, GraphError::ArgumentMismatch(_)));
/// # Ok::<(), GraphError>(())
/// ```
pub struct FullGraphWrapper<B: Backend, F> {
    backend: B,
    step: F,
    warmup_steps: u64,
    use_single_mempool: bool,
    policy: SignaturePolicy,
    capture_error_mode: CaptureErrorMode,
    barrier: Option<CaptureBarrier>,
    loader: StaticBufferLoader<B>,
    stages: [StageState<B>; 2],
}

/// Shows everything but the step function (closures have no `Debug`).
impl<B: Backend, F> std::fmt::Debug for FullGraphWrapper<B, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullGraphWrapper")
            .field("warmup_steps", &self.warmup_steps)
            .field("use_single_mempool", &self.use_single_mempool)
            .field("policy", &self.policy)
            .field("capture_error_mode", &self.capture_error_mode)
            .field("barrier", &self.barrier)
            .field("loader", &self.loader)
            .field("stages", &self.stages)
            .finish_non_exhaustive()
    }
}

impl<B, F> FullGraphWrapper<B, F>
where
    B: Backend,
    F: FnMut(&B, Stage, &[&[&B::Buffer<f32>]]) -> Result<Vec<B::Buffer<f32>>>,
{
    /// Wraps `step` with Megatron's defaults: 1 warmup step, a new pool per capture,
    /// [`SignaturePolicy::Error`], `thread_local` capture mode (as Megatron captures).
    pub fn new(backend: &B, step: F) -> Result<Self> {
        Ok(FullGraphWrapper {
            backend: backend.clone(),
            step,
            warmup_steps: DEFAULT_WARMUP_STEPS,
            use_single_mempool: false,
            policy: SignaturePolicy::default(),
            capture_error_mode: CaptureErrorMode::ThreadLocal,
            barrier: None,
            loader: StaticBufferLoader::new(backend)?,
            stages: [StageState::new(), StageState::new()],
        })
    }

    /// Eager steps per stage before the capture (`cuda_graph_warmup_steps`).
    pub fn warmup_steps(mut self, steps: u64) -> Self {
        self.warmup_steps = steps;
        self
    }

    /// Capture every stage into the backend's [`shared_graph_pool`](crate::shared_graph_pool)
    /// instead of a new pool per capture.
    pub fn use_single_mempool(mut self, single: bool) -> Self {
        self.use_single_mempool = single;
        self
    }

    /// What a step with another signature than captured does.
    pub fn signature_policy(mut self, policy: SignaturePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Capture error mode of the captures.
    pub fn capture_error_mode(mut self, mode: CaptureErrorMode) -> Self {
        self.capture_error_mode = mode;
        self
    }

    /// Meets every rank at `barrier` around each capture (Megatron's
    /// `torch.distributed.barrier()`): after the synchronize before the capture, and before
    /// the synchronize after it — so no rank synchronizes the device while another captures,
    /// and every rank's warm-up is over before any captures. Use it when the step holds
    /// collectives ([`CaptureBarrier::of`] a communicator); each rank's wrapper captures on
    /// its own instance's capture stream.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use accel_graph_api::{Backend, PortableOps, collective::{Communicator, MemoryStore, ReduceOp}};
    /// use accel_graph_mock::MockBackend;
    /// use accel_graph_utils::{CaptureBarrier, FullGraphWrapper, Stage};
    ///
    /// type Buf = accel_graph_mock::MockBuffer;
    /// let store = MemoryStore::new();
    /// let sums = std::thread::scope(|s| {
    ///     let ranks: Vec<_> = (0..2).map(|rank| {
    ///         let store = store.clone();
    ///         s.spawn(move || -> accel_graph_api::Result<Vec<f32>> {
    ///             let b = MockBackend::new();
    ///             let comm = Arc::new(Communicator::new(&b, store, rank, 2)?);
    ///             let total = b.alloc_from(&[0.0; 2])?;
    ///             // Data-parallel step: every rank adds the sum of all ranks' inputs.
    ///             let step = |b: &MockBackend, _: Stage, batches: &[&[&Buf]]| {
    ///                 let x = b.alloc(2)?;
    ///                 b.copy(&x, batches[0][0])?;
    ///                 comm.all_reduce(&x, ReduceOp::Sum)?;
    ///                 b.axpy(&total, 1.0, &x)?;
    ///                 Ok(Vec::new())
    ///             };
    ///             let mut wrapper = FullGraphWrapper::new(&b, step)?.capture_barrier(CaptureBarrier::of(&comm));
    ///             let x = b.alloc_from(&[rank as f32 + 1.0; 2])?;
    ///             for _ in 0..3 {
    ///                 wrapper.run(Stage::Training, &[&[&x]])?; // eager, capture + replay, replay
    ///             }
    ///             drop(wrapper);
    ///             b.download(&total)
    ///         })
    ///     }).collect();
    ///     ranks.into_iter().map(|r| r.join().unwrap()).collect::<accel_graph_api::Result<Vec<_>>>()
    /// })?;
    /// assert_eq!(sums, vec![vec![9.0; 2]; 2]); // 3 steps x (1 + 2)
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    pub fn capture_barrier(mut self, barrier: CaptureBarrier) -> Self {
        self.barrier = Some(barrier);
        self
    }

    /// Runs one step of `stage` with inputs `microbatches[m][i]` and returns its outputs:
    /// eagerly during warmup, else by replaying the stage's graph (capturing it first if there
    /// is none). The outputs are the graph's static outputs, overwritten by the next replay.
    ///
    /// A step whose signature differs from the captured one fails with
    /// [`GraphError::ArgumentMismatch`] or is captured again, per the [`SignaturePolicy`].
    /// A failed step does not count as an iteration.
    pub fn run(
        &mut self,
        stage: Stage,
        microbatches: &[&[&B::Buffer<f32>]],
    ) -> Result<&[B::Buffer<f32>]> {
        let s = stage.index();
        if let Some(captured) = &self.stages[s].signature
            && !captured.matches(microbatches)
        {
            match self.policy {
                SignaturePolicy::Error => {
                    return Err(GraphError::ArgumentMismatch(format!(
                        "full-iteration graph of stage {stage} was captured for {captured}, \
                         but this step has {}: call reset(Stage::{stage:?}) to capture again, \
                         or use SignaturePolicy::Recapture",
                        StepSignature::of(microbatches)
                    )));
                }
                SignaturePolicy::Recapture => self.reset(stage),
            }
        }
        let mut loaded = false;
        if self.stages[s].graph.is_none() && self.stages[s].iteration >= self.warmup_steps {
            self.capture(stage, microbatches)?;
            loaded = true;
        }
        let state = &mut self.stages[s];
        match state.graph.as_mut() {
            Some(graph) => {
                if !loaded {
                    self.loader.load_all(stage, microbatches)?;
                }
                graph.replay()?;
                state.replays += 1;
            }
            None => {
                state.outputs = (self.step)(&self.backend, stage, microbatches)?;
                state.eager_steps += 1;
            }
        }
        state.iteration += 1;
        Ok(&state.outputs)
    }

    /// Loads the inputs into fresh static buffers and captures the step on them.
    fn capture(&mut self, stage: Stage, microbatches: &[&[&B::Buffer<f32>]]) -> Result<()> {
        tracing::info!(%stage, "capturing full-iteration graph");
        self.loader.clear(stage);
        let statics = self.loader.load_all(stage, microbatches)?;
        let rows: Vec<Vec<&B::Buffer<f32>>> =
            statics.iter().map(|mb| mb.iter().collect()).collect();
        let static_microbatches: Vec<&[&B::Buffer<f32>]> = rows.iter().map(Vec::as_slice).collect();

        let backend = &self.backend;
        let step = &mut self.step;
        backend.synchronize()?;
        if let Some(barrier) = &self.barrier {
            barrier.wait()?;
        }
        let options = GraphOptions::new()
            .pool(graph_pool(backend, self.use_single_mempool))
            .capture_error_mode(self.capture_error_mode);
        let mut graph = backend.graph(options)?;
        let stream = shared_capture_stream(backend)?;
        let outputs = {
            let _current = backend.use_stream(&stream)?;
            graph.capture(|| step(backend, stage, &static_microbatches))?
        };
        if let Some(barrier) = &self.barrier {
            barrier.wait()?;
        }
        backend.synchronize()?;

        let state = &mut self.stages[stage.index()];
        state.graph = Some(graph);
        state.signature = Some(StepSignature::of(microbatches));
        state.outputs = outputs;
        state.captures += 1;
        Ok(())
    }
}

impl<B: Backend, F> FullGraphWrapper<B, F> {
    /// Drops the graph, outputs and static buffers of `stage` (Megatron's
    /// `reset_cuda_graph(stage)`); its next step captures again (warmup is not repeated:
    /// the iteration counter keeps counting).
    pub fn reset(&mut self, stage: Stage) {
        let state = &mut self.stages[stage.index()];
        state.graph = None;
        state.signature = None;
        state.outputs.clear();
        self.loader.clear(stage);
    }

    /// [`FullGraphWrapper::reset`] for both stages (`reset_cuda_graph()`).
    pub fn reset_all(&mut self) {
        for stage in Stage::ALL {
            self.reset(stage);
        }
    }

    /// Steps run so far for `stage` (Megatron's `curr_iter(stage)`).
    pub fn iteration(&self, stage: Stage) -> u64 {
        self.stages[stage.index()].iteration
    }

    /// Captures made for `stage`.
    pub fn captures(&self, stage: Stage) -> u64 {
        self.stages[stage.index()].captures
    }

    /// Steps of `stage` answered by a replay.
    pub fn replays(&self, stage: Stage) -> u64 {
        self.stages[stage.index()].replays
    }

    /// Steps of `stage` run eagerly.
    pub fn eager_steps(&self, stage: Stage) -> u64 {
        self.stages[stage.index()].eager_steps
    }

    /// Whether `stage` has a captured graph.
    pub fn is_captured(&self, stage: Stage) -> bool {
        self.stages[stage.index()].graph.is_some()
    }

    /// The graph of `stage`, if captured.
    pub fn graph(&self, stage: Stage) -> Option<&B::Graph> {
        self.stages[stage.index()].graph.as_ref()
    }

    /// The signature `stage` was captured with.
    pub fn signature(&self, stage: Stage) -> Option<&StepSignature> {
        self.stages[stage.index()].signature.as_ref()
    }

    /// The outputs of the last step of `stage`.
    pub fn outputs(&self, stage: Stage) -> &[B::Buffer<f32>] {
        &self.stages[stage.index()].outputs
    }

    /// The static input buffers of `stage`: `[microbatch][input]`.
    pub fn static_buffers(&self, stage: Stage) -> &[Vec<B::Buffer<f32>>] {
        self.loader.buffers(stage)
    }
}
