//! # accel-graph-mock
//!
//! A deterministic simulated accelerator: the reference semantics of accel-graph. Every other
//! backend is checked against what this one does.
//!
//! ## The model
//!
//! * **Memory** is host memory. Each allocation gets a virtual device address from a bump
//!   allocator that starts at a fixed base ([`MockConfig::base_address`]) and is 256-byte
//!   aligned, so the same program sees the same addresses on every run. Addresses are never
//!   reused. Graph pools come from [`accel_graph_api::pools::MemoryPools`]: allocations made
//!   on a capturing stream come from the capture's pool, and [`Backend::memory_stats`] reports
//!   the pools' accounting.
//! * **Streams** are synchronous: work on a stream that is not capturing runs at once, on the
//!   calling thread. Each thread has its own current stream, initially the default stream,
//!   which cannot be captured ([`GraphError::StreamNotCapturable`]), like CUDA's legacy
//!   stream; [`Backend::new_stream`] makes streams that can.
//! * **Capture** records work as graph nodes with dependency edges in stream order, and runs
//!   nothing. Events give CUDA's fork/join: recording on a capturing stream and waiting from
//!   another stream pulls that stream into the capture; `capture_end` fails with
//!   [`GraphError::CaptureUnjoined`] if work forked off was never joined back. Event record
//!   and wait become edges, not nodes. Waiting across a capture's boundary fails with CUDA's
//!   error names (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, `..._MERGE`) as a
//!   [`GraphError::Driver`].
//!
//!   Event rules in detail: waiting on an event never recorded is a no-op; waiting from a
//!   capturing stream on an event recorded outside the capture is
//!   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` and invalidates that capture (CUDA requires
//!   `cudaEventWaitExternal` for it); waiting from outside a capture (the default stream, or
//!   after the capture ended) on an event recorded inside one is
//!   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`; waiting on an event of another capture is
//!   `CUDA_ERROR_STREAM_CAPTURE_MERGE`; `event_synchronize` on an event recorded in a capture
//!   is `CUDA_ERROR_CAPTURED_EVENT`. Beginning a capture on a stream that already takes part in
//!   one is `CUDA_ERROR_ILLEGAL_STATE`.
//! * **Capture modes** follow CUDA through [`accel_graph_api::capture_rules::CaptureRules`].
//!   Unsafe calls are `synchronize`, `event_synchronize`, `upload`, `download`, a plain
//!   `alloc` (current stream not capturing) and `stream_synchronize` of a stream that is not
//!   capturing; `stream_synchronize` of a capturing stream is always an error and invalidates
//!   the capture. As on CUDA (measured on an H100), a forbidden call invalidates the capture
//!   that forbids it, also when made from another thread during a global capture, and a
//!   device-wide `synchronize` conflicts with every capture, relaxed ones included. An
//!   invalidated capture refuses further work
//!   ([`GraphError::CaptureInvalidated`]) and `capture_end` reports it.
//! * **Replay** runs the instantiated plan — the same arithmetic functions eager execution
//!   uses, so replay equals eager bit for bit — on the calling thread's current stream.
//!   Replaying on a stream that is itself capturing is [`GraphError::Unsupported`]. Upload and
//!   download wait for the current stream: with a capturing stream current they fail in every
//!   mode and invalidate the capture (as `stream_synchronize` of that stream does); with
//!   another stream current, in `Relaxed` mode, they see memory as it is, captured work not
//!   having run.
//! * **Sanitizer**: replay of a graph that touches memory returned to the device since capture
//!   (a plain buffer dropped, a pool released) fails with [`GraphError::DanglingBuffer`].
//!   Memory still owned by a held pool is not dangling.
//! * **Extras** for users' tests: [`MockBackend::counters`], [`MockBackend::inject_fault`].
//!
//! ```
//! use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, NodeKind};
//! use accel_graph_mock::MockBackend;
//!
//! let backend = MockBackend::new();
//! let x = backend.alloc_from(&[1.0, 2.0])?;
//! let y = backend.alloc_from(&[0.0, 0.0])?;
//! let stream = backend.new_stream()?;
//! let mut graph = backend.graph(GraphOptions::new().keep_graph(true))?;
//! backend.capture_on(&stream, &mut graph, || -> accel_graph_api::Result<()> {
//!     backend.axpy(&y, 2.0, &x)?;
//!     backend.add_scalar(&y, 1.0)
//! })??;
//! let nodes = graph.nodes()?;
//! assert_eq!(nodes.count(NodeKind::Kernel), 2);
//! assert!(nodes.is_chain());
//! graph.replay()?;
//! assert_eq!(backend.download(&y)?, vec![3.0, 5.0]);
//! # Ok::<(), accel_graph_api::GraphError>(())
//! ```
#![deny(missing_docs)]

#[cfg(doc)]
use accel_graph_api::{Backend, GraphError};

mod backend;
mod config;
mod counters;
mod device;
mod event;
mod faults;
mod fork_join;
mod graph_impl;
mod kernels;
mod memory;
mod op;
mod plan;
mod raw_graph;
mod stream;

pub use backend::{MockBackend, MockGraph};
pub use config::MockConfig;
pub use counters::MockCounters;
pub use event::MockEvent;
pub use faults::FaultSite;
pub use graph_impl::MockGraphImpl;
pub use memory::{ADDRESS_ALIGNMENT, MockBuffer};
pub use stream::MockStream;
