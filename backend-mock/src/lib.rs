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
//! * **Race sanitizer** (on by default, [`MockConfig::race_sanitizer`]): two accesses to
//!   overlapping bytes of one block, at least one a write, that nothing orders fail with
//!   [`GraphError::DataRace`] naming both — nodes of a captured graph with no path between
//!   them (checked once, when the capture ends, which then fails and discards the capture),
//!   and eager work on two streams with no event wait or synchronize between them (ops,
//!   uploads, downloads, and replays, each one unit of work on its stream; the work that races
//!   fails before it runs). The mock's streams run at once, so the sanitizer models the order
//!   a device would give: vector clocks per stream and event, a history per block. Host
//!   callbacks touch memory the device cannot see and are not checked. Races are logged
//!   ([`MockBackend::race_reports`]) and counted ([`MockCounters::data_races`]).
//! * **Timing**: a virtual clock advances one microsecond per command run; timing events
//!   measure it, external events recorded in a capture become graph nodes.
//! * **Extras** for users' tests: [`MockBackend::counters`], [`MockBackend::inject_fault`],
//!   [`MockBackend::stall_stream`], [`MockBackend::race_reports`].
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
//!
//! A test of your own code catches work it forgot to order. Here two streams write one buffer
//! and nothing orders the second write after the first; an event wait fixes it:
//!
//! ```
//! use accel_graph_api::prelude::*;
//! use accel_graph_mock::MockBackend;
//!
//! let backend = MockBackend::new();
//! let x = backend.alloc_from(&[0.0; 4])?;
//! let (producer, consumer) = (backend.new_stream()?, backend.new_stream()?);
//! {
//!     let _on = backend.use_stream(&producer)?;
//!     backend.fill(&x, 1.0)?;
//! }
//! let racy = {
//!     let _on = backend.use_stream(&consumer)?;
//!     backend.scale(&x, 2.0) // forgot: wait for the producer's fill
//! };
//! let Err(GraphError::DataRace { first, second }) = racy else {
//!     panic!("the race went unnoticed");
//! };
//! assert!(first.label.starts_with("fill") && second.label.starts_with("scale"));
//! assert_eq!(backend.race_reports().len(), 1);
//!
//! // Ordered by an event, the same work is fine.
//! let filled = backend.new_event()?;
//! {
//!     let _on = backend.use_stream(&producer)?;
//!     backend.fill(&x, 1.0)?;
//!     backend.record_event(&filled)?;
//! }
//! let _on = backend.use_stream(&consumer)?;
//! backend.wait_event(&filled)?;
//! backend.scale(&x, 2.0)?;
//! assert_eq!(backend.download(&x)?, vec![2.0; 4]);
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
mod editing;
mod error;
mod event;
mod faults;
mod graph;
mod kernels;
mod memory;
mod ops;
mod sanitizer;
mod stream;

pub use backend::{MockBackend, MockBuffer, MockEvent, MockGraph, MockGraphImpl, MockStream};
pub use config::MockConfig;
pub use counters::MockCounters;
pub use device::MockDevice;
pub use editing::{MockConditionalBuild, WHILE_ITERATION_LIMIT};
pub use event::MockEventState;
pub use faults::FaultSite;
pub use graph::{MockExecutable, MockRawGraph};
pub use memory::{ADDRESS_ALIGNMENT, MockBlock};
pub use sanitizer::RaceReport;
pub use stream::MockStreamState;
