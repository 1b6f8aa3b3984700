//! # accel-graph-utils
//!
//! The tools PyTorch users reach for, generic over [`Backend`](accel_graph_api::Backend): the patterns large training and
//! inference stacks build on top of CUDA graphs, written once for every backend (re-exported by
//! the facade as `accel_graph::utils`).
//!
//! | here | counterpart |
//! |---|---|
//! | [`make_graphed_callables`], [`GraphedCallable`] | PyTorch `torch.cuda.make_graphed_callables`: warm up, capture callables in order on one pool, static inputs/outputs, eager fallback in the other train/eval mode |
//! | [`FullGraphWrapper`], [`StaticBufferLoader`] | Megatron-Core `FullCudaGraphWrapper` / `StaticBufferLoader`: eager warmup steps, then the whole training or validation step captured per stage and replayed |
//! | [`shared_capture_stream`], [`shared_graph_pool`], [`graph_pool`] | Megatron-Core `get_shared_capture_stream`, `get_shared_graph_pool`, `get_graph_pool(use_single_mempool)` |
//! | [`CaptureBarrier`], [`FullGraphWrapper::capture_barrier`], [`make_graphed_callables_across_ranks`] | Megatron's `torch.distributed.barrier()` around its captures, one capture stream per rank: data-parallel and tensor-parallel steps with collectives in the graph |
//! | [`BucketedGraphCache`], [`CaptureSizes`] | vLLM's capture sizes: one graph per batch-size bucket, inputs padded up to the nearest captured size, eager beyond the largest |
//!
//! Everything goes through the [`Backend`](accel_graph_api::Backend) and
//! [`AcceleratorGraph`](accel_graph_api::AcceleratorGraph) API only, so it runs on every backend; the
//! examples use the mock.
//!
//! ```
//! use accel_graph_api::{Backend, PortableOps};
//! use accel_graph_utils::{FullGraphWrapper, Stage};
//! use accel_graph_mock::MockBackend;
//!
//! type Buf = accel_graph_mock::MockBuffer;
//! let backend = MockBackend::new();
//! let w = backend.alloc_from(&[1.0; 4])?;
//! // One "training step": w += 0.5 * x.
//! let step = |b: &MockBackend, _stage: Stage, batches: &[&[&Buf]]| {
//!     b.axpy(&w, 0.5, batches[0][0])?;
//!     Ok(Vec::new())
//! };
//! let mut wrapper = FullGraphWrapper::new(&backend, step)?.warmup_steps(2);
//! let x = backend.alloc_from(&[2.0; 4])?;
//! for _ in 0..5 {
//!     wrapper.run(Stage::Training, &[&[&x]])?; // 2 eager steps, then capture + replays
//! }
//! assert_eq!(wrapper.captures(Stage::Training), 1);
//! drop(wrapper);
//! assert_eq!(backend.download(&w)?, vec![6.0; 4]);
//! # Ok::<(), accel_graph_api::GraphError>(())
//! ```

mod arguments;
mod bucketed;
mod callable;
mod capture_barrier;
mod capture_sizes;
mod full_graph;
mod graphed_callables;
mod outputs;
mod shared_resources;
mod signature;
mod stage;
mod static_buffer_loader;

pub use bucketed::{
    BucketRun, BucketedCacheOptions, BucketedCacheStats, BucketedGraphCache, CaptureProgress,
};
pub use callable::{Callable, Modal, ModuleMode};
pub use capture_barrier::CaptureBarrier;
pub use capture_sizes::CaptureSizes;
pub use full_graph::FullGraphWrapper;
pub use graphed_callables::{
    DEFAULT_WARMUP_ITERS, GraphedCallStats, GraphedCallable, GraphedCallableOptions,
    make_graphed_callable, make_graphed_callables, make_graphed_callables_across_ranks,
};
pub use outputs::Outputs;
pub use shared_resources::{
    graph_pool, release_shared_resources, shared_capture_stream, shared_graph_pool,
};
pub use signature::{SignaturePolicy, StepSignature};
pub use stage::Stage;
pub use static_buffer_loader::StaticBufferLoader;
