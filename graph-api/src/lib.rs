//! # accel-graph-api
//!
//! The backend-agnostic contract of accel-graph: the graph ([`AcceleratorGraph`], with
//! PyTorch's state machine in the front object [`Graph`]), the backend ([`Backend`] and its
//! portable op set [`PortableOps`]), value types mirroring `torch.accelerator.Graph`
//! ([`CaptureErrorMode`], [`PoolId`], [`GraphOptions`]) and the one error type
//! ([`GraphError`]). What backend authors build on lives apart, in [`backend_kit`].
//!
//! No backend code lives here. Examples use the mock backend, which runs anywhere.
//!
//! ```
//! use accel_graph_api::prelude::*;
//! use accel_graph_mock::MockBackend;
//!
//! let backend = MockBackend::new();
//! let x = backend.alloc_from(&[0.0; 3])?;
//! let stream = backend.new_stream()?;
//! let mut graph = backend.graph(GraphOptions::new())?;
//! backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
//! assert_eq!(backend.download(&x)?, vec![0.0; 3]); // captured, not run
//! graph.replay()?;
//! assert_eq!(backend.download(&x)?, vec![1.0; 3]);
//! # Ok::<(), GraphError>(())
//! ```
#![deny(missing_docs)]

mod backend;
pub mod backend_kit;
mod capabilities;
mod capture_mode;
pub mod collective;
mod editing;
mod element;
mod error;
mod front;
mod gemm;
mod graph;
mod instance_cache;
pub mod kernel;
mod memory_stats;
mod ops;
mod options;
mod pool_id;
mod race;
mod state;
mod topology;
mod view;

pub use backend::{Backend, BackendKind, DeviceBuffer, EventOptions, HostCallback, StreamGuard};
pub use capabilities::{Capabilities, LaunchLimits};
pub use capture_mode::CaptureErrorMode;
pub use editing::{
    CapturedNode, ConditionElement, ConditionalKind, InstantiateFlags, UpdateConflict,
    WHILE_ITERATION_LIMIT, condition_holds,
};
pub use element::{Element, FloatElement, FloatType};
pub use error::{CaptureConflict, GraphError, Result};
pub use front::Graph;
pub use gemm::{Gemm, gemm_reference};
pub use graph::{AcceleratorGraph, CaptureExt};
/// The `half` crate, for the 16-bit float element types.
pub use half;
pub use instance_cache::InstanceCache;
pub use memory_stats::{BlockInfo, BlockState, MemoryStats, PoolStats};
pub use ops::{PortableOp, PortableOps};
pub use options::GraphOptions;
pub use pool_id::PoolId;
pub use race::{AccessKind, AccessSource, RaceAccess};
pub use state::GraphState;
pub use topology::{GraphNode, GraphTopology, NodeKind};
pub use view::View;

/// What graph code imports: `use accel_graph_api::prelude::*;` (or `accel_graph::prelude`).
pub mod prelude {
    pub use crate::{
        AcceleratorGraph, Backend, CaptureErrorMode, CaptureExt, CapturedNode, DeviceBuffer,
        Element, EventOptions, FloatElement, Gemm, GraphError, GraphOptions, GraphState, PoolId,
        PortableOps, Result, View,
        kernel::{Access, Kernel, KernelArg},
    };
}
