//! # accel-graph-hip
//!
//! The HIP backend of accel-graph: [`HipBackend`] captures the current stream natively with
//! `hipStreamBeginCapture`, instantiates and launches `hipGraph_t`s, and runs the portable ops
//! as HIP kernels compiled with hiprtc on first use. Everything issued on the current stream —
//! the backend's ops, your own kernels and hipBLAS calls on `HipBackend::current_raw_stream()`
//! — lands in the graph.
//!
//! Raw handles (with the `runtime` feature): `HipStream::raw()`, `HipEvent::raw()`,
//! `HipBuffer::device_ptr()`, and, through `Graph::raw_graph_impl()`,
//! `HipGraphImpl::raw_hip_graph()` / `raw_hip_graph_exec()`; the `hip_sys` bindings are
//! re-exported for the types.
//!
//! ## Builds
//!
//! * With the `runtime` feature the crate links `libamdhip64` through hip-sys (ROCm 5.x; the
//!   build needs `hip/hip_runtime_api.h`, e.g. `HIP_PATH=/usr` with Debian's
//!   `libamdhip64-dev`). On a machine without an AMD GPU, [`HipBackend::new`] returns
//!   [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) with HIP's error name and
//!   text.
//! * Without it the crate builds anywhere, every type exists (so generic code compiles), and
//!   [`HipBackend::new`] returns `BackendUnavailable` explaining the missing feature.
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
//! ## Runtime differences handled
//!
//! * Entry points newer than ROCm 5.2 (`hipLaunchHostFunc`, `hipGraphUpload`,
//!   `hipGraphDebugDotPrint`) are looked up at run time. Without them `host_callback` is
//!   `Unsupported` (and `capabilities().host_callbacks` false), there is no upload after
//!   instantiation, and `debug_dump` renders the DOT from the graph's nodes and edges.
//! * ROCm 5.2 numbers graph node types from 1, later releases from 0: decoded by version.
//! * Whether the runtime refuses `hipMalloc` during a capture (as CUDA does) is probed at
//!   start and reported as `capabilities().capture_modes_enforced`. The backend's own blocking
//!   calls (upload, download, event/stream synchronize) follow CUDA's capture-mode rules on
//!   every runtime, and a device-wide `synchronize` conflicts with every capture in progress,
//!   as `cuCtxSynchronize` does.
//!
//! ## Testing on an NVIDIA GPU
//!
//! The crate's `shim/` folder holds a small C++ library, built with nvcc, that exports the HIP
//! entry points this backend uses under the name `libamdhip64.so.5` and forwards each one to
//! CUDA (runtime, driver and NVRTC), translating enums and error codes as HIP's own NVIDIA
//! headers do. With it on `LD_LIBRARY_PATH`, the unchanged test binaries run on an NVIDIA GPU.
//! That exercises this backend's logic against a real GPU runtime; it says nothing about AMD
//! hardware or ROCm's own behaviour.

#[cfg(feature = "runtime")]
mod runtime;
#[cfg(feature = "runtime")]
pub use hip_sys;
#[cfg(feature = "runtime")]
pub use runtime::{HipBackend, HipBuffer, HipEvent, HipGraph, HipGraphImpl, HipStream};

#[cfg(not(feature = "runtime"))]
mod unavailable;
#[cfg(not(feature = "runtime"))]
pub use unavailable::{
    HipBackend, HipBuffer, HipEvent, HipGraph, HipGraphImpl, HipStream, Never, REASON,
};
