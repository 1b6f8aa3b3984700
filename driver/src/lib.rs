//! # accel-graph-driver
//!
//! The driver layer of accel-graph: every backend is a small [`Driver`] — the device's own
//! calls, one trait per concern (streams, events, memory, capture, graphs, ops), each in its
//! own file of the backend — and the [`Backend`](accel_graph_api::Backend) is written once
//! over it, here: [`DriverBackend`] and the graph implementation [`DriverGraph`].
//!
//! What is written once, so that every backend behaves the same by construction:
//!
//! * PyTorch's graph semantics (with the front object [`accel_graph_api::Graph`]);
//! * graph memory pools ([`accel_graph_api::backend_kit::pools`]) and the **keep-alive of
//!   captured memory**: every op issued on a capturing stream takes a hold on the blocks it
//!   touches, so a buffer dropped after (or during) the capture stays allocated until its
//!   graph is reset or dropped — a replay never touches freed memory;
//! * CUDA's capture-mode rules for unsafe calls, per capture domain (the CUDA driver's global
//!   mode spans the process), and the gate that keeps device frees out of captures;
//! * the registry of captures in progress and the streams taking part in them, with the
//!   invariant that no call decides by a stream's capture membership and then acts on another
//!   (each stream's membership lock: read while a call decides and acts, written while a
//!   capture begins, ends or forks onto it — see `stream.rs`);
//! * stream order: event records and waits, synchronizes and blocking copies are reported to
//!   the pools' [`StreamOrder`](accel_graph_api::backend_kit::stream_order::StreamOrder), so a
//!   pool block freed on one stream goes to an allocation on another only when that
//!   allocation is known to run after it;
//! * host callbacks: the trampolines, their lifetime, and panics caught and reported;
//! * the error table (a driver's failure → the [`GraphError`](accel_graph_api::GraphError)
//!   variant the API promises);
//! * `record_stream`, `empty_cache`, memory statistics and snapshots.
//!
//! [`software`] holds what drivers that emulate capture (the mock, wgpu) share: CUDA's
//! stream-capture and fork/join rules over recorded commands.
//!
//! ## What is the caller's responsibility
//!
//! Work the backend does not issue itself — the user's own kernels or library calls on a
//! stream's raw handle — cannot be tracked: the backend does not know which memory it
//! touches, so it cannot keep it alive. Such work must only use memory that outlives every
//! replay of the graph it is captured into. Likewise, streams must only take part in
//! captures through the backend's API (`capture_begin`, `wait_event`): a stream forked into a
//! capture through raw handles is not known to be capturing, so ops issued on it would not be
//! kept alive. The backends mark the raw accessors that make this possible `unsafe`.
//! Likewise, the driver API's methods that can break the layer's invariants (freeing,
//! copying and launching on raw blocks, beginning and ending captures, recording and waiting
//! on events, launching executables) are `unsafe`, each with a `# Safety` section;
//! [`DriverBackend::driver()`] stays safe because every such method is unsafe to call.
#![deny(missing_docs)]

mod allocator;
pub mod api;
mod backend;
mod buffer;
mod capture;
mod collectives;
mod domain;
mod editing;
mod errors;
mod event;
mod graph;
mod host;
pub mod native;
mod newtype;
mod recycler;
mod shared;
pub mod software;
mod stream;

pub use allocator::DriverAllocator;
pub use api::{Driver, DriverError, DriverResult};
pub use backend::DriverBackend;
pub use buffer::{BufferMemory, DriverBuffer};
pub use event::DriverEvent;
pub use graph::DriverGraph;
pub use stream::DriverStream;

/// The API crate, for the macros.
#[doc(hidden)]
pub use accel_graph_api as __api;
/// `tracing`, for the macros.
#[doc(hidden)]
pub use tracing as __tracing;
