//! # accel-graph-api
//!
//! The backend-agnostic core of accel-graph: the graph contract ([`AcceleratorGraph`]), the
//! backend contract ([`Backend`]), value types mirroring `torch.accelerator.Graph`
//! ([`CaptureErrorMode`], [`PoolId`], [`GraphOptions`]), the one error type ([`GraphError`]),
//! and the bookkeeping every backend shares: the front object [`Graph`] with PyTorch's state
//! machine, graph memory pools ([`pools`]), per-thread current streams ([`CurrentStream`]) and
//! CUDA's capture-mode rules for software backends ([`capture_rules`]).
//!
//! No backend code lives here. Examples use the mock backend, which runs anywhere.
//!
//! ```
//! use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions};
//! use accel_graph_mock::MockBackend;
//!
//! let backend = MockBackend::new();
//! let x = backend.alloc_from(&[0.0; 3])?;
//! let stream = backend.new_stream()?;
//! let mut graph = backend.graph(GraphOptions::new())?;
//! backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))??;
//! assert_eq!(backend.download(&x)?, vec![0.0; 3]); // captured, not run
//! graph.replay()?;
//! assert_eq!(backend.download(&x)?, vec![1.0; 3]);
//! # Ok::<(), accel_graph_api::GraphError>(())
//! ```
#![deny(missing_docs)]

mod backend;
mod capabilities;
mod capture_mode;
pub mod capture_rules;
mod current_stream;
mod emulated_cuda_error;
mod error;
mod front;
mod graph;
mod graph_impl;
mod memory_stats;
mod options;
mod pool_id;
pub mod pools;
mod state;
mod topology;
pub mod utils;

pub use backend::{Backend, BackendKind, DeviceBuffer, HostCallback, StreamGuard};
pub use capabilities::Capabilities;
pub use capture_mode::CaptureErrorMode;
pub use current_stream::CurrentStream;
pub use emulated_cuda_error::EmulatedCudaError;
pub use error::{GraphError, Result};
pub use front::Graph;
pub use graph::{AcceleratorGraph, CaptureExt};
pub use graph_impl::{GraphImpl, write_topology_dot};
pub use memory_stats::MemoryStats;
pub use options::GraphOptions;
pub use pool_id::PoolId;
pub use state::GraphState;
pub use topology::{GraphNode, GraphTopology, NodeKind};
