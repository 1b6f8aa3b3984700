//! # accel-graph-cuda
//!
//! The CUDA backend of accel-graph: a driver ([`CudaDevice`]) under the driver layer that
//! every backend shares. Graphs are CUDA graphs made by the driver's own stream capture
//! (`cuStreamBeginCapture` on the thread's current stream), instantiated as PyTorch does
//! (`AUTO_FREE_ON_LAUNCH | USE_NODE_PRIORITY`, then `cuGraphUpload`) and launched with
//! `cuGraphLaunch`. The driver is loaded at run time through cudarc, so the crate builds on
//! machines without a CUDA toolkit; there [`CudaBackend::new`] returns
//! [`GraphError::BackendUnavailable`](accel_graph_api::GraphError).
//!
//! ## Module map
//!
//! One file per concern of the driver API: `device.rs` (context, capabilities,
//! synchronization), `stream.rs`, `event.rs`, `memory.rs`, `capture.rs`, `graph.rs` (+
//! `topology.rs`), `ops.rs` (the kernels, in PTX, and host functions), `error.rs` (CUDA's
//! results → the driver layer's error classes), and `backend.rs` (the backend type). Calls go
//! through cudarc's `result` layer where it loses nothing, and its raw `sys` bindings where it
//! does (each place says why).
//!
//! ## CUDA versions and linking
//!
//! The bindings target the CUDA 12.8 driver API (cudarc's `cuda-12080`), which every driver
//! of CUDA 12.8 and newer provides, 13.x included. The choice is fixed rather than a cargo
//! feature because cudarc's version features are mutually exclusive and `--all-features`
//! builds must keep working; a build that picks another version for cudarc (another crate's
//! `cuda-1xxx0` feature, or `CUDARC_CUDA_VERSION` set to anything but `12080`) makes cudarc
//! compile two sets of bindings, and fail. CUDA's libraries are loaded at run time (cudarc's
//! `fallback-dynamic-loading`) unless another crate of the build has cudarc link them, as
//! candle-core's `cuda` feature does: then this crate is linked the same way, so it builds
//! beside candle and cubecl (`docs/INTEROP.md`). The `nccl` feature adds cudarc's NCCL
//! bindings. Drivers older than CUDA 12.3 are not supported: the backend uses
//! `cuStreamGetCaptureInfo_v3` and `cuGraphGetEdges_v2`. The portable ops are PTX (ISA 6.0,
//! `sm_50` and newer) that the driver compiles at load, so no toolkit or NVRTC is needed at run
//! time. Keep the toolkit's `stubs/` folder off `LD_LIBRARY_PATH`: its `libcuda.so` is a
//! link-time stub, and loading it makes [`CudaBackend::new`] fail with
//! `CUDA_ERROR_STUB_LIBRARY`.
//!
//! ## Memory safety
//!
//! Every portable op captured into a graph keeps the memory it touches allocated until the
//! graph is reset or dropped (the driver layer takes a hold on each block), so dropping a
//! buffer after capture is harmless. Device frees are deferred while any capture of the
//! process runs (`cuMemFree` synchronizes, which a capture forbids).
//!
//! ## Your own kernels and libraries
//!
//! Anything issued on the current stream during a capture is captured:
//! [`CudaBackend::current_cuda_stream`] is a cudarc stream for your own launches,
//! [`CudaDevice::context`] the cudarc context, [`CuBlock::device_ptr`] (through
//! `buffer.block()`) the raw pointer of a buffer. The cudarc objects are handed out by
//! `unsafe` functions because their safety rests on contracts the backend cannot check:
//!
//! * cudarc's per-slice event tracking is off on the context (its events break a capture with
//!   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`), so `CudaSlice`s used on several streams must be
//!   ordered with events by you;
//! * captures must be begun, and streams forked into captures, through the backend
//!   (`capture_begin`, `wait_event`), so that it knows which of its streams capture;
//! * memory your own captured work touches is not known to the backend and must outlive every
//!   replay of the graph (do not allocate or free `CudaSlice`s during a capture either:
//!   cudarc's `cuMemAllocAsync`/`cuMemFreeAsync` would become graph nodes).
//!
//! ## Where the backend differs from raw CUDA
//!
//! `cuStreamEndCapture` from a thread other than the capturing one (global or thread-local
//! mode) makes the driver return `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` *and terminate the
//! capture*. The driver layer checks the thread first and returns
//! [`GraphError::WrongThread`](accel_graph_api::GraphError) without calling the driver, so the
//! capture goes on and can still be ended on its own thread, as the API promises.
#![deny(missing_docs)]

mod backend;
mod capture;
mod device;
mod error;
mod event;
mod graph;
mod kernels;
mod memory;
#[cfg(feature = "nvtx")]
mod nvtx;
mod ops;
mod stream;
mod topology;

pub use backend::CudaBackend;
pub use device::CudaDevice;
pub use event::CuEvent;
pub use graph::{CuGraph, CuGraphExec, INSTANTIATE_FLAGS};
pub use memory::CuBlock;
#[cfg(feature = "nvtx")]
pub use nvtx::NvtxLayer;
pub use ops::portable_ops_ptx;
pub use stream::CuStream;

accel_graph_driver::driver_type_aliases! {
    CudaDevice, "CUDA": CudaBuffer, CudaStreamHandle, CudaEventHandle, CudaGraphImpl, CudaGraph
}

/// Re-export of the cudarc version this crate is built against, for users' own kernels.
pub use cudarc;
