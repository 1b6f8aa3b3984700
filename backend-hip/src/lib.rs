//! # accel-graph-hip
//!
//! The HIP backend of accel-graph: a driver ([`HipDevice`]) under the driver layer that every
//! backend shares. Graphs are HIP graphs made by the runtime's own stream capture
//! (`hipStreamBeginCapture` on the thread's current stream), instantiated with
//! `hipGraphInstantiateWithFlags` and launched with `hipGraphLaunch`. Everything issued on the
//! current stream during a capture lands in the graph: the portable ops, and your own kernels
//! and hipBLAS calls on the stream's raw handle (`HipBackend::current_raw_stream`, with the
//! `runtime` feature).
//!
//! ```
//! use accel_graph_api::GraphError;
//! use accel_graph_hip::HipBackend;
//!
//! match HipBackend::new(0) {
//!     Ok(backend) => println!("HIP device: {backend:?}"),
//!     Err(GraphError::BackendUnavailable { reason, .. }) => println!("no HIP here: {reason}"),
//!     Err(other) => panic!("unexpected: {other}"),
//! }
//! ```
//!
//! ## Module map
//!
//! As the CUDA backend's, one file per concern of the driver API: `device.rs` (opening the
//! device, capabilities, synchronization), `stream.rs`, `event.rs`, `memory.rs`, `capture.rs`,
//! `graph.rs` (+ `topology.rs` and `node_kind.rs`), `ops.rs` (the kernels, from one table, and
//! host functions), `error.rs` (`hipError_t` → the driver layer's error classes) and
//! `backend.rs` (the backend type). HIP's own: `ffi.rs` (what hip-sys does not bind, and entry
//! points looked up at run time) and `probe.rs` (what the runtime itself does with an
//! allocation during a capture). The driver-level objects are named `H*` as CUDA's are `Cu*`:
//! [`HStream`], [`HEvent`], [`HBlock`], [`HGraph`], [`HGraphExec`]; the backend-level types are
//! the aliases [`HipStream`], [`HipEvent`], [`HipBuffer`], [`HipGraph`].
//!
//! ## Builds
//!
//! * With the `runtime` feature the crate links `libamdhip64` through hip-sys (ROCm 5.x; the
//!   build needs `hip/hip_runtime_api.h`, e.g. `HIP_PATH=/usr` with Debian's
//!   `libamdhip64-dev`). On a machine without an AMD GPU, [`HipBackend::new`] returns
//!   [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) with HIP's error name and
//!   text. The `hip_sys` bindings are re-exported for the raw handles' types.
//! * Without it the crate builds anywhere with the same public items (the driver's types exist
//!   but have no values, so generic code compiles), and [`HipBackend::new`] returns
//!   `BackendUnavailable` explaining the missing feature. The feature only adds: the raw-handle
//!   accessors and the `hip_sys` re-export.
//!
//! ## Runtime differences handled
//!
//! * Entry points newer than ROCm 5.2 (`hipLaunchHostFunc`, `hipGraphUpload`,
//!   `hipGraphDebugDotPrint`, `hipEventRecordWithFlags`) are looked up at run time. Without
//!   them `host_callback` is `Unsupported` (and `capabilities().host_callbacks` false), there
//!   is no upload after instantiation (`capabilities().graph_upload` false), `debug_dump`
//!   renders the DOT from the graph's nodes and edges, and an *external* event recorded in a
//!   capture is recorded like an internal one (an ordering point, not a node of its own).
//!   Event waits are always plain waits: ROCm 5.2's `hipStreamWaitEvent` takes no flags.
//! * ROCm 5.2 numbers graph node types from 1, later releases from 0: decoded by the runtime's
//!   version.
//! * Capture modes follow CUDA's rules for every call the backend makes, on every runtime: the
//!   driver layer applies them (`capabilities().capture_modes_enforced` is true). Whether the
//!   runtime *itself* refuses `hipMalloc` during a capture, as CUDA does, is probed once per
//!   process and reported by [`HipDevice::runtime_refuses_capture_alloc`]: it matters for your
//!   own native calls during a capture, which the backend does not see.
//!
//! ## Memory safety
//!
//! Every portable op captured into a graph keeps the memory it touches allocated until the
//! graph is reset or dropped, and device frees wait while any capture of the process runs
//! (`hipFree` synchronizes). Native work issued on raw handles is not tracked: memory it
//! touches in a captured graph must outlive every replay, and captures must be begun, and
//! streams forked into them, through the backend only (`capture_begin`, `wait_event`).
//!
//! ## Testing on an NVIDIA GPU
//!
//! The crate's `shim/` folder holds a small C++ library, built with nvcc, that exports the HIP
//! entry points this backend uses under the name `libamdhip64.so.5` and forwards each one to
//! CUDA (runtime, driver and NVRTC), translating enums and error codes as HIP's own NVIDIA
//! headers do. With it on `LD_LIBRARY_PATH`, the unchanged test binaries run on an NVIDIA GPU.
//! That exercises this backend's logic against a real GPU runtime; it says nothing about AMD
//! hardware or ROCm's own behaviour.
#![deny(missing_docs)]

mod backend;
/// The modules over the HIP runtime (the `runtime` feature); without it, `unavailable.rs`
/// stands in with the same public types.
macro_rules! runtime_modules {
    ($($module:ident),*) => { $(#[cfg(feature = "runtime")] mod $module;)* };
}
runtime_modules!(
    capture, device, editing, error, event, ffi, graph, kernels, memory, node_kind, ops, probe,
    stream, topology
);
#[cfg(not(feature = "runtime"))]
mod unavailable;

pub use backend::HipBackend;
#[cfg(not(feature = "runtime"))]
pub use unavailable::{
    HBlock, HEvent, HGraph, HGraphExec, HNoConditional, HNode, HStream, HipDevice,
};
#[cfg(feature = "runtime")]
pub use {
    device::HipDevice,
    editing::{HNoConditional, HNode},
    event::HEvent,
    graph::{HGraph, HGraphExec},
    memory::HBlock,
    stream::HStream,
};

accel_graph_driver::driver_type_aliases! {
    HipDevice, "HIP": HipBuffer, HipStream, HipEvent, HipGraphImpl, HipGraph
}

/// Re-export of the hip-sys version this crate is built against, for the raw handles' types.
#[cfg(feature = "runtime")]
pub use hip_sys;
