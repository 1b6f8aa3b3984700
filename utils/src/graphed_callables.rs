//! `make_graphed_callables`: PyTorch's `torch.cuda.make_graphed_callables` for any backend.
//!
//! Each callable is warmed up eagerly on a side stream (so lazy initialisation stays out of
//! the graphs), then captured — in the order given, all on one shared memory pool — with its
//! sample inputs as the graph's *static inputs*. A graphed call copies the caller's buffers
//! into the static inputs (only those that are not the static input already), replays, and
//! hands back the static outputs. A call made while the callable is in another [`ModuleMode`] than
//! captured runs the callable eagerly, as PyTorch does for modules.
//!
//! PyTorch also captures a backward graph per callable through autograd; there is no autograd
//! here, so pass forward and backward passes as separate callables, in the order they run
//! (`fwd 1, fwd 2, bwd 2, bwd 1`): graphs sharing a pool must replay in capture order.

use std::sync::Arc;

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, CaptureExt, DeviceBuffer, GraphError,
    GraphOptions, PoolId, Result,
};

use crate::{
    arguments::check_inputs,
    callable::{Callable, ModuleMode},
    capture_barrier::CaptureBarrier,
    outputs::Outputs,
    shared_resources::shared_capture_stream,
};

/// PyTorch runs three warmup iterations before capture.
pub const DEFAULT_WARMUP_ITERS: usize = 3;

/// How [`make_graphed_callables`] warms up and captures.
///
/// ```
/// use accel_graph_utils::GraphedCallableOptions;
/// let opts = GraphedCallableOptions::new().warmup_iters(1);
/// assert_eq!(opts.warmup_iters, 1);
/// assert_eq!(GraphedCallableOptions::new().warmup_iters, 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphedCallableOptions {
    /// Eager iterations of each callable on a side stream before capture (PyTorch: 3).
    pub warmup_iters: usize,
    /// The pool all captures share; `None`: a fresh `graph_pool_handle()`.
    pub pool: Option<PoolId>,
    /// Capture error mode of the graphs.
    pub capture_error_mode: CaptureErrorMode,
}

impl Default for GraphedCallableOptions {
    fn default() -> Self {
        GraphedCallableOptions {
            warmup_iters: DEFAULT_WARMUP_ITERS,
            pool: None,
            capture_error_mode: CaptureErrorMode::Default,
        }
    }
}

impl GraphedCallableOptions {
    /// PyTorch's behaviour: 3 warmup iterations, a fresh shared pool, default capture mode.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the number of warmup iterations.
    pub fn warmup_iters(mut self, iters: usize) -> Self {
        self.warmup_iters = iters;
        self
    }

    /// Captures into `pool` (e.g. to share it with other graphs).
    pub fn pool(mut self, pool: PoolId) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Sets the capture error mode.
    pub fn capture_error_mode(mut self, mode: CaptureErrorMode) -> Self {
        self.capture_error_mode = mode;
        self
    }
}

/// Counters of one graphed callable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphedCallStats {
    /// Calls answered by a replay.
    pub replays: u64,
    /// Calls run eagerly because the callable's mode differed from the captured one.
    pub eager_calls: u64,
    /// Input buffers copied into static inputs (a caller passing the static input itself
    /// costs no copy).
    pub input_copies: u64,
}

/// A callable captured by [`make_graphed_callables`]; call it like the original.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{make_graphed_callable, GraphedCallableOptions};
/// use accel_graph_mock::MockBackend;
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let backend = MockBackend::new();
/// let sample = vec![backend.alloc_from(&[0.0; 4])?];
/// let add_one = |b: &MockBackend, x: &[&Buf]| {
///     let y = b.alloc(x[0].len())?;
///     b.copy(&y, x[0])?;
///     b.add_scalar(&y, 1.0)?;
///     Ok(vec![y])
/// };
/// let mut graphed = make_graphed_callable(&backend, add_one, sample, GraphedCallableOptions::new())?;
/// let x = backend.alloc_from(&[1.0, 2.0, 3.0, 4.0])?;
/// let y = graphed.call(&[&x])?; // copies x into the static input, replays
/// assert!(y.is_replayed());
/// assert_eq!(backend.download(&y[0])?, vec![2.0, 3.0, 4.0, 5.0]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct GraphedCallable<B: Backend, C> {
    backend: B,
    index: usize,
    callable: C,
    captured_mode: ModuleMode,
    graph: B::Graph,
    static_inputs: Vec<Arc<B::Buffer<f32>>>,
    static_outputs: Vec<B::Buffer<f32>>,
    stats: GraphedCallStats,
}

/// Shows everything but the callable (closures have no `Debug`).
impl<B: Backend, C> std::fmt::Debug for GraphedCallable<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphedCallable")
            .field("index", &self.index)
            .field("captured_mode", &self.captured_mode)
            .field("graph", &self.graph)
            .field("static_inputs", &self.static_inputs)
            .field("static_outputs", &self.static_outputs)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, C: Callable<B>> GraphedCallable<B, C> {
    /// Runs the callable: when its mode is the captured one, copies each input that is not
    /// the static input already into it, replays the graph on the current stream and returns
    /// the static outputs; otherwise runs the callable eagerly on `inputs` as they are.
    ///
    /// Errors with [`GraphError::ArgumentMismatch`] when `inputs` do not match the sample
    /// inputs in number or lengths.
    pub fn call(&mut self, inputs: &[&B::Buffer<f32>]) -> Result<Outputs<'_, B>> {
        if self.callable.mode() != self.captured_mode {
            self.stats.eager_calls += 1;
            return Ok(Outputs::Eager(self.callable.call(&self.backend, inputs)?));
        }
        let index = self.index;
        check_inputs(
            || format!("graphed callable {index}"),
            self.static_inputs.iter().map(|b| b.len()),
            inputs,
        )?;
        if inputs
            .iter()
            .any(|b| b.instance_id() != self.backend.instance_id())
        {
            return Err(GraphError::ForeignObject { what: "buffer" });
        }
        for (input, static_input) in inputs.iter().zip(&self.static_inputs) {
            // Identity is (instance, address): another instance's buffer may sit at the same
            // address (mock instances share a base address).
            if !input.same_memory(static_input) {
                self.backend.copy(&**static_input, *input)?;
                self.stats.input_copies += 1;
            }
        }
        self.graph.replay()?;
        self.stats.replays += 1;
        Ok(Outputs::Static(&self.static_outputs))
    }

    /// The static input buffers (the sample inputs given at capture), shared so a caller can
    /// keep a handle: writing the next input straight into them and passing them to
    /// [`GraphedCallable::call`] saves the copy.
    pub fn static_inputs(&self) -> &[Arc<B::Buffer<f32>>] {
        &self.static_inputs
    }

    /// The static output buffers every replay writes.
    pub fn static_outputs(&self) -> &[B::Buffer<f32>] {
        &self.static_outputs
    }

    /// The original callable.
    pub fn callable(&self) -> &C {
        &self.callable
    }

    /// The original callable, mutably (e.g. to switch its mode).
    pub fn callable_mut(&mut self) -> &mut C {
        &mut self.callable
    }

    /// The mode the callable was captured in.
    pub fn captured_mode(&self) -> ModuleMode {
        self.captured_mode
    }

    /// Position of this callable in the list given to [`make_graphed_callables`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// The pool the graph allocated from (shared by every callable graphed together).
    pub fn pool(&self) -> Result<PoolId> {
        self.graph.pool()
    }

    /// The captured graph (for introspection or a debug dump).
    pub fn graph(&self) -> &B::Graph {
        &self.graph
    }

    /// Counters of replays, eager calls and input copies.
    pub fn stats(&self) -> GraphedCallStats {
        self.stats
    }
}

/// Graphs one callable: [`make_graphed_callables`] with a single callable.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{make_graphed_callable, GraphedCallableOptions};
/// use accel_graph_mock::MockBackend;
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let backend = MockBackend::new();
/// let double = |b: &MockBackend, x: &[&Buf]| {
///     let y = b.alloc(x[0].len())?;
///     b.copy(&y, x[0])?;
///     b.axpy(&y, 1.0, x[0])?; // y = 2x
///     Ok(vec![y])
/// };
/// let sample = vec![backend.alloc_from(&[1.0, 1.0])?];
/// let mut g = make_graphed_callable(&backend, double, sample, GraphedCallableOptions::new())?;
/// // Write the next input straight into the static input and pass it: no copy is made.
/// let static_x = g.static_inputs()[0].clone();
/// backend.upload(&*static_x, &[3.0, 4.0])?;
/// let y = g.call(&[&static_x])?;
/// assert_eq!(backend.download(&y[0])?, vec![6.0, 8.0]);
/// assert_eq!(g.stats().input_copies, 0);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn make_graphed_callable<B: Backend, C: Callable<B>>(
    backend: &B,
    callable: C,
    sample_args: Vec<B::Buffer<f32>>,
    options: GraphedCallableOptions,
) -> Result<GraphedCallable<B, C>> {
    let mut graphed = make_graphed_callables(backend, vec![callable], vec![sample_args], options)?;
    graphed
        .pop()
        .ok_or_else(|| GraphError::ArgumentMismatch("no callable was graphed".into()))
}

/// Graphs `callables` (PyTorch's `make_graphed_callables`): `sample_args[i]` are the sample
/// inputs of `callables[i]` and become its static inputs.
///
/// Steps, as in PyTorch: synchronize; run each callable `options.warmup_iters` times on a side
/// stream; synchronize; capture each callable, in the given order, on the shared capture
/// stream ([`super::shared_capture_stream`]) into one memory pool (so pass callables in the
/// order they run in the live workload). A callable's mode is read at capture.
///
/// Errors: [`GraphError::ArgumentMismatch`] for no callables or a count of sample-argument
/// lists that differs from the count of callables; any error of a warmup run or capture
/// (nothing stays capturing: a failed capture is discarded).
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{make_graphed_callables, Callable, GraphedCallableOptions};
/// use accel_graph_mock::MockBackend;
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let backend = MockBackend::new();
/// let w = backend.alloc_from(&[0.5; 4])?;
/// // Two layers graphed together; boxed because closures have distinct types.
/// let layer1: Box<dyn Callable<MockBackend>> = Box::new(|b: &MockBackend, x: &[&Buf]| {
///     let h = b.alloc(x[0].len())?;
///     b.copy(&h, x[0])?;
///     b.axpy(&h, 2.0, &w)?; // h = x + 2w
///     Ok(vec![h])
/// });
/// let layer2: Box<dyn Callable<MockBackend>> = Box::new(|b: &MockBackend, h: &[&Buf]| {
///     let y = b.alloc(h[0].len())?;
///     b.copy(&y, h[0])?;
///     b.scale(&y, 3.0)?;
///     Ok(vec![y])
/// });
/// let samples = vec![vec![backend.alloc(4)?], vec![backend.alloc(4)?]];
/// let mut g = make_graphed_callables(&backend, vec![layer1, layer2], samples, GraphedCallableOptions::new())?;
/// assert_eq!(g[0].pool()?, g[1].pool()?); // one shared pool
/// let x = backend.alloc_from(&[1.0, 2.0, 3.0, 4.0])?;
/// let h = backend.alloc(4)?;
/// backend.copy(&h, &g[0].call(&[&x])?[0])?;
/// let y = g[1].call(&[&h])?;
/// assert_eq!(backend.download(&y[0])?, vec![6.0, 9.0, 12.0, 15.0]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn make_graphed_callables<B: Backend, C: Callable<B>>(
    backend: &B,
    callables: Vec<C>,
    sample_args: Vec<Vec<B::Buffer<f32>>>,
    options: GraphedCallableOptions,
) -> Result<Vec<GraphedCallable<B, C>>> {
    graph_callables(backend, callables, sample_args, options, None)
}

/// [`make_graphed_callables`] on one rank of several, for callables that issue collectives:
/// every rank calls it with the same callables, and meets the others at `barrier` after its
/// warm-up (so every rank's eager collectives are over before any rank captures) and after
/// its captures (so no rank's later device-wide synchronize meets another's capture). Each
/// rank captures on its own instance's capture stream; capture in `thread_local` mode
/// (`options.capture_error_mode`) when ranks are threads of one process.
///
/// ```
/// use std::sync::Arc;
/// use accel_graph_api::{Backend, CaptureErrorMode, DeviceBuffer, PortableOps};
/// use accel_graph_api::collective::{Communicator, MemoryStore, ReduceOp};
/// use accel_graph_mock::MockBackend;
/// use accel_graph_utils::{CaptureBarrier, GraphedCallableOptions, make_graphed_callables_across_ranks};
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let store = MemoryStore::new();
/// let outs = std::thread::scope(|s| {
///     let ranks: Vec<_> = (0..2).map(|rank| {
///         let store = store.clone();
///         s.spawn(move || -> accel_graph_api::Result<Vec<f32>> {
///             let b = MockBackend::new();
///             let comm = Arc::new(Communicator::new(&b, store, rank, 2)?);
///             // A tensor-parallel layer's tail: sum the ranks' partial outputs.
///             let reduce = |b: &MockBackend, x: &[&Buf]| {
///                 let y = b.alloc(x[0].len())?;
///                 b.copy(&y, x[0])?;
///                 comm.all_reduce(&y, ReduceOp::Sum)?;
///                 Ok(vec![y])
///             };
///             let options = GraphedCallableOptions::new()
///                 .warmup_iters(1)
///                 .capture_error_mode(CaptureErrorMode::ThreadLocal);
///             let mut g = make_graphed_callables_across_ranks(
///                 &b, vec![reduce], vec![vec![b.alloc(3)?]], options, &CaptureBarrier::of(&comm),
///             )?;
///             let x = b.alloc_from(&[rank as f32 + 1.0; 3])?;
///             let y = g[0].call(&[&x])?;
///             b.download(&y[0])
///         })
///     }).collect();
///     ranks.into_iter().map(|r| r.join().unwrap()).collect::<accel_graph_api::Result<Vec<_>>>()
/// })?;
/// assert_eq!(outs, vec![vec![3.0; 3]; 2]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn make_graphed_callables_across_ranks<B: Backend, C: Callable<B>>(
    backend: &B,
    callables: Vec<C>,
    sample_args: Vec<Vec<B::Buffer<f32>>>,
    options: GraphedCallableOptions,
    barrier: &CaptureBarrier,
) -> Result<Vec<GraphedCallable<B, C>>> {
    graph_callables(backend, callables, sample_args, options, Some(barrier))
}

/// [`make_graphed_callables`], meeting the other ranks at `barrier` if there is one.
fn graph_callables<B: Backend, C: Callable<B>>(
    backend: &B,
    callables: Vec<C>,
    sample_args: Vec<Vec<B::Buffer<f32>>>,
    options: GraphedCallableOptions,
    barrier: Option<&CaptureBarrier>,
) -> Result<Vec<GraphedCallable<B, C>>> {
    if callables.is_empty() {
        return Err(GraphError::ArgumentMismatch(
            "make_graphed_callables needs at least one callable".into(),
        ));
    }
    if callables.len() != sample_args.len() {
        return Err(GraphError::ArgumentMismatch(format!(
            "make_graphed_callables got {} callable(s) but {} sample_args tuple(s): pass one \
             tuple of sample buffers per callable",
            callables.len(),
            sample_args.len()
        )));
    }
    let mut callables = callables;
    let sample_args: Vec<Vec<Arc<B::Buffer<f32>>>> = sample_args
        .into_iter()
        .map(|args| args.into_iter().map(Arc::new).collect())
        .collect();
    let pool = options.pool.unwrap_or_else(|| backend.graph_pool_handle());

    // Warmup: keeps lazy initialisation (library handles, autotuning) out of the captures.
    backend.synchronize()?;
    {
        let side = backend.new_stream()?;
        let _current = backend.use_stream(&side)?;
        for (callable, args) in callables.iter_mut().zip(&sample_args) {
            let inputs = as_refs(args);
            for _ in 0..options.warmup_iters {
                drop(callable.call(backend, &inputs)?);
            }
        }
    }
    backend.synchronize()?;
    if let Some(barrier) = barrier {
        barrier.wait()?;
    }

    // Capture in order, all into one pool.
    let stream = shared_capture_stream(backend)?;
    let graph_options = GraphOptions::new()
        .pool(pool)
        .capture_error_mode(options.capture_error_mode);
    let mut captured = Vec::with_capacity(callables.len());
    for (callable, args) in callables.iter_mut().zip(&sample_args) {
        let mut graph = backend.graph(graph_options)?;
        let inputs = as_refs(args);
        let outputs = {
            let _current = backend.use_stream(&stream)?;
            graph.capture(|| callable.call(backend, &inputs))?
        };
        captured.push((graph, outputs, callable.mode()));
    }
    if let Some(barrier) = barrier {
        barrier.wait()?;
    }

    Ok(callables
        .into_iter()
        .zip(sample_args)
        .zip(captured)
        .enumerate()
        .map(
            |(index, ((callable, static_inputs), (graph, static_outputs, captured_mode)))| {
                GraphedCallable {
                    backend: backend.clone(),
                    index,
                    callable,
                    captured_mode,
                    graph,
                    static_inputs,
                    static_outputs,
                    stats: GraphedCallStats::default(),
                }
            },
        )
        .collect())
}

fn as_refs<T>(buffers: &[Arc<T>]) -> Vec<&T> {
    buffers.iter().map(|b| &**b).collect()
}
