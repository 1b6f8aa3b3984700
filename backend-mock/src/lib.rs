//! # accel-graph-mock
//!
//! A deterministic simulated accelerator: the reference device of accel-graph. It is a driver
//! ([`MockDevice`]) under the same driver layer as the CUDA, HIP and wgpu backends, so a
//! program tested here meets the same rules, errors and memory semantics there.
//!
//! ## The model
//!
//! * **Memory** is host memory. Each allocation gets a virtual device address from a bump
//!   allocator that starts at a fixed base ([`MockConfig::base_address`]) and is 256-byte
//!   aligned, so the same program sees the same addresses on every run. Addresses are never
//!   reused. Graph pools, the keep-alive of captured memory and the accounting are the driver
//!   layer's, as on every backend.
//! * **Streams** are synchronous: work on a stream that is not capturing runs at once, on the
//!   calling thread — unless the stream is *stalled* ([`MockBackend::stall_stream`], a
//!   stand-in for a long-running kernel), when it queues until resumed. Each thread has its
//!   own current stream, initially the default stream, which cannot be captured
//!   ([`GraphError::StreamNotCapturable`]), like CUDA's legacy stream.
//! * **Capture** records work as graph nodes with dependency edges in stream order, and runs
//!   nothing, following CUDA's stream-capture rules (fork/join through events, isolation and
//!   merge errors, unjoined forks): see [`accel_graph_driver::software`].
//! * **Capture modes** follow CUDA through the driver layer's rules, as measured on an H100.
//!   Instances share a capture domain only when made on the same
//!   [`MockConfig::shared_device`]; by default each instance is a device of its own, so tests
//!   running in parallel do not disturb each other.
//! * **Replay** runs the instantiated plan — the same arithmetic eager execution uses, so
//!   replay equals eager bit for bit — on the calling thread's current stream.
//! * **Sanitizer**: each node of a replay first checks that the memory it touches was not
//!   returned to the device; if it was, the replay fails with [`GraphError::DanglingBuffer`]
//!   (on a GPU that is silent memory corruption). Memory the graph's own ops touch is kept
//!   alive by the driver layer, so this catches work the layer cannot track.
//! * **Timing**: a virtual clock advances one microsecond per command run; timing events
//!   measure it, external events recorded in a capture become graph nodes.
//! * **Extras** for users' tests: [`MockBackend::counters`], [`MockBackend::inject_fault`],
//!   [`MockBackend::stall_stream`].
//!
//! ```
//! use accel_graph_api::prelude::*;
//! use accel_graph_api::NodeKind;
//! use accel_graph_mock::MockBackend;
//!
//! let backend = MockBackend::new();
//! let x = backend.alloc_from(&[1.0, 2.0])?;
//! let y = backend.alloc_from(&[0.0, 0.0])?;
//! let stream = backend.new_stream()?;
//! let mut graph = backend.graph(GraphOptions::new().keep_graph(true))?;
//! backend.capture_on(&stream, &mut graph, || {
//!     backend.axpy(&y, 2.0, &x)?;
//!     backend.add_scalar(&y, 1.0)
//! })?;
//! let nodes = graph.nodes()?;
//! assert_eq!(nodes.count(NodeKind::Kernel), 2);
//! assert!(nodes.is_chain());
//! graph.replay()?;
//! assert_eq!(backend.download(&y)?, vec![3.0, 5.0]);
//! # Ok::<(), GraphError>(())
//! ```
#![deny(missing_docs)]

#[cfg(doc)]
use accel_graph_api::GraphError;

mod backend;
mod capture;
mod config;
mod counters;
mod device;
mod error;
mod event;
mod faults;
mod graph;
mod memory;
mod ops;
mod sanitizer;
mod stream;

pub use backend::{MockBackend, MockBuffer, MockEvent, MockGraph, MockGraphImpl, MockStream};
pub use config::MockConfig;
pub use counters::MockCounters;
pub use device::MockDevice;
pub use event::MockEventState;
pub use faults::FaultSite;
pub use graph::{MockExecutable, MockRawGraph};
pub use memory::{ADDRESS_ALIGNMENT, MockBlock};
pub use sanitizer::RaceReport;
pub use stream::MockStreamState;
