//! The backend proper, over the HIP runtime (`runtime` feature).

mod backend;
mod captures;
mod device;
mod error;
mod ffi;
mod graph;
mod host;
mod kernels;
mod memory;
mod node_kind;
mod probe;
mod stream;

pub use backend::HipBackend;
pub use graph::HipGraphImpl;
pub use memory::HipBuffer;
pub use stream::{HipEvent, HipStream};

/// The HIP backend's graph type: PyTorch's state machine over [`HipGraphImpl`].
pub type HipGraph = accel_graph_api::Graph<HipGraphImpl>;
