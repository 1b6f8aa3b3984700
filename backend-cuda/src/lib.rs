//! # accel-graph-cuda
//!
//! The CUDA backend of accel-graph: graphs are CUDA graphs made by the driver's own stream
//! capture (`cuStreamBeginCapture` on the thread's current stream), instantiated as PyTorch
//! does (`AUTO_FREE_ON_LAUNCH | USE_NODE_PRIORITY`, then `cuGraphUpload`) and launched with
//! `cuGraphLaunch`. The driver is loaded at run time through cudarc, so the crate builds on
//! machines without a CUDA toolkit; there [`CudaBackend::new`] returns
//! [`accel_graph_api::GraphError::BackendUnavailable`].
//!
//! ## CUDA versions
//!
//! The bindings target the CUDA 12.8 driver API (cudarc's `cuda-12080`), which every driver
//! of CUDA 12.8 and newer provides, 13.x included: the whole conformance suite and the
//! benchmarks ran with these bindings, and with CUDA 13.0 bindings, on driver 580 (CUDA 13.0).
//! The choice is fixed rather than a cargo feature because cudarc's version features are
//! mutually exclusive and `--all-features` builds must keep working. Drivers older than
//! CUDA 12.3 are not supported: the backend uses `cuStreamGetCaptureInfo_v3` and
//! `cuGraphGetEdges_v2`. The portable ops are hand-written PTX (ISA 6.0, `sm_50` and newer)
//! that the driver compiles at load, so no toolkit or NVRTC is needed at run time.
//!
//! Keep the toolkit's `stubs/` folder off `LD_LIBRARY_PATH`: its `libcuda.so` is a link-time
//! stub, and loading it makes [`CudaBackend::new`] fail with `CUDA_ERROR_STUB_LIBRARY`.
//!
//! ## Your own kernels and libraries
//!
//! Anything issued on the current stream during a capture is captured:
//! [`CudaBackend::current_cuda_stream`] is a cudarc stream for your own launches,
//! [`CudaBackend::context`] the cudarc context, and [`CudaBuffer::device_ptr`] the raw
//! pointer of a buffer. The backend turns off cudarc's per-slice event tracking on the
//! context, because the events cudarc records and waits on its own `CudaSlice`s break a
//! capture (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`, or invalid handles after the graph is
//! destroyed). Slices you create from this context afterwards therefore do not order
//! themselves across streams: order your streams with events, and do not allocate or free
//! `CudaSlice`s during a capture (cudarc's `cuMemAllocAsync`/`cuMemFreeAsync` would become
//! graph nodes); allocate before, or use backend buffers, which come from the graph's pool.
//!
//! ## Memory
//!
//! Buffers are `cuMemAlloc` blocks managed by [`accel_graph_api::pools::MemoryPools`].
//! Allocations on a capturing stream come from the graph's pool and are made with the
//! thread's capture mode relaxed (as PyTorch's caching allocator does), so they do not
//! invalidate the capture; any other allocation is a real `cuMemAlloc`, which CUDA's capture
//! mode rules govern. `cuMemFree` is deferred while any capture is in progress.
//!
//! ## Where the backend differs from raw CUDA
//!
//! `cuStreamEndCapture` from a thread other than the capturing one (global or thread-local
//! mode) makes the driver return `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` *and terminate the
//! capture*. The backend checks the thread first and returns
//! [`accel_graph_api::GraphError::WrongThread`] without calling the driver, so the capture goes
//! on and can still be ended on its own thread, as the API promises. Instantiating one graph
//! while another captures on the same thread runs with the thread's capture mode relaxed, and
//! skips the `cuGraphUpload` when the current stream is capturing (the first launch uploads).
#![deny(missing_docs)]

mod backend;
mod capture_registry;
mod driver_error;
mod graph_impl;
mod kernels;
mod loader;
mod memory;
mod stream;
mod topology;

pub use backend::CudaBackend;
pub use graph_impl::{CudaGraphImpl, INSTANTIATE_FLAGS};
pub use kernels::PORTABLE_OPS_PTX;
pub use memory::{CudaAllocator, CudaBuffer, DevicePtr};
pub use stream::{CudaEventHandle, CudaStreamHandle};

/// The graph type of the CUDA backend.
pub type CudaGraph = accel_graph_api::Graph<CudaGraphImpl>;

/// Re-export of the cudarc version this crate is built against, for users' own kernels.
pub use cudarc;
