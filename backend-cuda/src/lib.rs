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
//! `topology.rs`), `ops.rs` (the kernels, in PTX, and host functions), `kernels.rs` (users'
//! kernels and GEMM: + `nvrtc.rs`, `kernel_cache.rs`, `blas.rs`, and `libs.rs`, which finds
//! NVRTC and cuBLAS at run time), `error.rs` (CUDA's results → the driver layer's error
//! classes), `backend.rs` (the backend type) and `interop.rs` (cudarc users' contexts, streams
//! and slices). Calls go through cudarc's `result` layer where it loses nothing, and its raw
//! `sys` bindings where it does (each place says why).
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
//! time for them; users' kernels need NVRTC, and GEMM cuBLAS, found on the loader path under
//! the names cudarc tries for CUDA 12 (`libnvrtc.so`, `libnvrtc.so.12`, ...). Keep the
//! toolkit's `stubs/` folder off `LD_LIBRARY_PATH`: its `libcuda.so` is a link-time stub, and
//! loading it makes [`CudaBackend::new`] fail with `CUDA_ERROR_STUB_LIBRARY`.
//!
//! ## Memory safety
//!
//! Every portable op, user kernel and GEMM captured into a graph keeps the memory it touches
//! allocated until the graph is reset or dropped (the driver layer takes a hold on each
//! block), so dropping a buffer after capture is harmless — as is dropping a buffer lent to
//! cudarc work captured on an adopted stream. Device frees are deferred while any capture of
//! the process runs (`cuMemFree` synchronizes, which a capture forbids).
//!
//! ## Your own kernels and libraries
//!
//! **Portable kernels** ([`Kernel`](accel_graph_api::kernel::Kernel) with a CUDA C source,
//! launched with `Backend::launch_kernel`) are compiled by NVRTC, loaded at run time like the
//! driver, into a cubin for the device's `sm_XY` (PTX for the newest architecture NVRTC knows
//! only when NVRTC is older than the device), loaded in the backend's context with the entry
//! point forced loaded (a lazily loaded kernel's first launch inside a capture would be an
//! implicit synchronization), and cached: per backend instance in memory, across processes on
//! disk (`$ACCEL_GRAPH_KERNEL_CACHE`, else `$XDG_CACHE_HOME/accel-graph/kernels`, else
//! `~/.cache/accel-graph/kernels`; an empty `ACCEL_GRAPH_KERNEL_CACHE` turns it off, and a
//! folder that cannot be written only disables it, with a warning). Without NVRTC the launch
//! is [`GraphError::LibraryUnavailable`](accel_graph_api::GraphError); a compile error is
//! `KernelFailed` with NVRTC's log.
//!
//! **GEMM** (`Backend::gemm`) is cuBLAS's `cublasGemmStridedBatchedEx` with `f32` accumulation
//! (no TF32, no 16-bit reductions), one handle per backend instance, and a workspace per stream
//! set on every call, as PyTorch keeps them: allocated the first time a stream runs a GEMM (in
//! relaxed capture mode, as PyTorch allocates during a capture), kept while a graph may use it
//! — until the backend instance drops, which graphs prevent — and reused by later streams once
//! a stream that never captured a GEMM is gone. Graphs captured on one stream share its
//! workspace: replay them in order, not concurrently on several streams.
//!
//! **cudarc users** keep their own objects, with no `unsafe` for memory safety:
//!
//! * [`CudaBackend::from_context`] builds the backend on the user's `CudaContext`;
//! * [`CudaBackend::adopt_stream`] makes the user's `CudaStream` a stream of the backend: set
//!   it current and capture on it, and the user's cudarc launches and cuBLAS calls on it land
//!   in the same graph as the backend's work;
//! * [`CudaBackend::adopt_slice`] takes ownership of a `CudaSlice`: its memory becomes a buffer
//!   that graphs keep alive and the backend frees;
//! * [`CudaBackend::lend`] hands a buffer to cudarc as a [`Lent`], a launch-builder argument
//!   and a `DevicePtr`/`DevicePtrMut` operand (cuBLAS's wrappers) whose every use is recorded
//!   with the capture its stream takes part in, so the graph keeps the memory alive — also for
//!   streams the user forked into the capture with their own event waits.
//!
//! cudarc's event tracking may stay on: nothing the backend issues, nor work on adopted slices
//! or lent buffers, records cudarc events, and the backend's own streams never put a context
//! into cudarc's multi-stream mode (in which tracking waits on events). On a context with
//! tracking on *and* several streams of the user's, a `CudaSlice` last used before a capture
//! cannot be used inside it (CUDA refuses cudarc's wait for its last write there with
//! `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`): adopt it. cudarc code that allocates and frees
//! inside a capture (`alloc`, `clone_dtod`, drops) is captured as it is: graph memory nodes,
//! freed on the next launch; a pageable host copy in a capture is refused at its end. Work the backend would issue on an adopted
//! stream that cudarc put into a capture behind the backend's back is refused
//! (`GraphError::Unsupported`), as that graph would not keep the memory alive.
//! `docs/INTEROP.md` walks through it; `examples/cudarc_interop.rs` runs it.
//!
//! The older raw path stays for other uses: [`CudaBackend::current_cuda_stream`],
//! [`CudaDevice::context`] and [`CuBlock::device_ptr`] (through `buffer.block()`), handed out by
//! `unsafe` functions because their safety rests on contracts the backend cannot check:
//!
//! * on the context [`CudaBackend::new`] makes, cudarc's per-slice event tracking is off, so
//!   `CudaSlice`s used on several streams must be ordered with events by you;
//! * captures must be begun, and streams forked into captures, through the backend
//!   (`capture_begin`, `wait_event`), so that it knows which of its streams capture;
//! * memory your own captured work touches through raw pointers is not known to the backend
//!   and must outlive every replay of the graph (slices allocated inside the capture are the
//!   graph's own memory: see `docs/INTEROP.md`, "Work that allocates inside a capture").
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
mod blas;
mod capture;
mod collectives;
mod device;
mod editing;
mod error;
mod event;
mod graph;
mod host_copies;
mod interop;
mod kernel_cache;
mod kernels;
mod libs;
mod memory;
mod nvrtc;
#[cfg(feature = "nvtx")]
mod nvtx;
mod ops;
mod stream;
mod topology;

pub use backend::CudaBackend;
#[cfg(feature = "nccl")]
pub use collectives::NcclComm;
pub use device::CudaDevice;
pub use editing::{CuConditional, CuNode};
pub use event::CuEvent;
pub use graph::{CuGraph, CuGraphExec, INSTANTIATE_FLAGS, instantiate_flags};
pub use interop::{AdoptError, Lent};
pub use kernels::{CuModule, PROGRAMMATIC_LAUNCH_ENV};
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
