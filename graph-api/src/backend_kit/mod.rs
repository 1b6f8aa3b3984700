//! The implementor kit: what a backend is built from, apart from the user API.
//!
//! Users never need this module. Backend authors (and the driver layer `accel-graph-driver`,
//! which builds every backend of this workspace) use:
//!
//! * [`GraphImpl`] and [`new_graph`]: the eight-method graph contract behind the front object
//!   [`crate::Graph`], which owns PyTorch's state machine;
//! * [`pools`]: graph memory pools with graph holds on pools and blocks;
//! * [`stream_order`]: what is known of the order of work across streams, by which the pools
//!   reuse blocks;
//! * [`capture_rules`]: CUDA's capture-mode rules, for backends that check them themselves;
//! * [`CurrentStream`]: the per-thread current stream of a backend instance;
//! * [`EmulatedCudaError`], [`ErrorClass`]: CUDA's error codes and names for software
//!   backends, and the kinds of driver failure that get API variants of their own;
//! * [`write_topology_dot`]: the default DOT dump;
//! * [`CollectiveBackend`], [`DeviceComm`]: a backend's collectives, what
//!   [`Communicator`](crate::collective::Communicator) is built on.

pub mod capture_rules;
mod collectives;
mod current_stream;
mod emulated_cuda_error;
mod graph_impl;
pub mod pools;
pub mod stream_order;

pub use collectives::{CollectiveBackend, CollectiveCall, CommView, DeviceComm};
pub use current_stream::CurrentStream;
pub use emulated_cuda_error::{EmulatedCudaError, ErrorClass};
pub use graph_impl::{GraphImpl, new_graph, write_topology_dot};
