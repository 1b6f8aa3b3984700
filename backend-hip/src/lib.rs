//! # accel-graph-hip
//!
//! The HIP backend of accel-graph: a driver ([`HipDevice`]) under the driver layer that every
//! backend shares. Graphs are HIP graphs made by the runtime's own stream capture
//! (`hipStreamBeginCapture` on the thread's current stream), instantiated with
//! `hipGraphInstantiateWithFlags` and launched with `hipGraphLaunch`. Everything issued on the
//! current stream during a capture lands in the graph: the portable ops, users' kernels, GEMM,
//! and your own kernels and library calls on the stream's raw handle
//! (`HipBackend::current_raw_stream`, with the `runtime` feature).
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
//! `graph.rs` (+ `topology.rs` and `node_kind.rs`), `ops.rs` (the portable ops' kernels, from
//! one table, and host functions), `kernels.rs` (users' kernels and GEMM), `error.rs`
//! (`hipError_t` → the driver layer's error classes) and `backend.rs` (the backend type and
//! its interop constructors). HIP's own: `gemm.rs` (the GEMM kernel), `rtc.rs` (hiprtc),
//! `code_cache.rs` (compiled code cached in memory and on disk), `module.rs` (loaded code
//! objects), `ffi.rs` (what hip-sys does not bind, and entry points looked up at run time) and
//! `probe.rs` (what the runtime itself does with an allocation during a capture). The
//! driver-level objects are named `H*` as CUDA's are `Cu*`: [`HStream`], [`HEvent`],
//! [`HBlock`], [`HGraph`], [`HGraphExec`]; the backend-level types are the aliases
//! [`HipStream`], [`HipEvent`], [`HipBuffer`], [`HipGraph`].
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
//!   accessors (`HipBackend::current_raw_stream`, `HipBackend::stream_from_raw`,
//!   `HStream::raw`) and the `hip_sys` re-export.
//!
//! ## Users' kernels, GEMM and the kernel cache
//!
//! * **Kernels** ([`Kernel`](accel_graph_api::kernel::Kernel)) run their CUDA C source,
//!   compiled with hiprtc for the device's architecture — one source for the CUDA and HIP
//!   backends, so keep to what both accept (`extern "C" __global__`, `blockIdx`/`threadIdx`,
//!   no CUDA-only headers or intrinsics). The module is loaded and its entry point looked up
//!   when the kernel is first launched or prepared (`prepare_kernel`), so launches inside a
//!   capture compile nothing. A kernel without CUDA C source is `Unsupported`; a source hiprtc
//!   rejects is `KernelFailed` with the compiler's log; on AMD targets, a missing compiler
//!   (ROCm's hiprtc compiles through `libamd_comgr.so.2`, and ROCm 5.2 crashes instead of
//!   reporting its absence) is `LibraryUnavailable { library: "libhiprtc", .. }`, checked
//!   before hiprtc is called.
//! * **GEMM: a kernel, not hipBLAS, because** this build links only `libamdhip64` (Debian
//!   ships no hipBLAS development package beside HIP 5.2, and the HIP-on-CUDA shim would have
//!   to fake it), and a kernel of our own makes a stronger promise: a tiled kernel compiled with
//!   hiprtc with the portable ops, which sums each element in `f32` in order of `k`, rounding
//!   every product and sum (no fused multiply-add), then `alpha · sum + beta · c`, rounded once
//!   to `f32`, `bf16` or `f16` (round-to-nearest-even, converted by hand from the values'
//!   bits). That is [`gemm_reference`](accel_graph_api::gemm_reference)'s arithmetic in its
//!   order: results equal the reference bit for bit, not only within a tolerance. Row-major,
//!   transposes, batches of contiguous matrices; `beta == 0` writes `C` without reading it.
//!   It is no tuned library: expect a fraction of hipBLAS's throughput on large products.
//! * **The kernel cache**: compiled code objects are kept for the process and on disk, under
//!   `ACCEL_GRAPH_KERNEL_CACHE`, else `$XDG_CACHE_HOME/accel-graph/kernels`, else
//!   `~/.cache/accel-graph/kernels`, filed under the source, entry point, options, the device's
//!   `gcnArchName`, and the hiprtc and runtime versions; files are written atomically and
//!   checked against their key and a checksum when read. An unwritable directory costs a
//!   warning and the disk cache, nothing else. The cache holds code that runs on your GPU:
//!   point it only at a directory no one else can write.
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
//! * ROCm defines `__fadd_rn`/`__fmul_rn` as plain `+`/`*`, which its compiler fuses into
//!   multiply-adds by default: the built-in kernels are compiled with `-ffp-contract=off` on AMD
//!   targets, so the portable ops and GEMM round as on every backend.
//! * Capture modes follow CUDA's rules for every call the backend makes, on every runtime: the
//!   driver layer applies them (`capabilities().capture_modes_enforced` is true). Whether the
//!   runtime *itself* refuses `hipMalloc` during a capture, as CUDA does, is probed once per
//!   process and reported by [`HipDevice::runtime_refuses_capture_alloc`]: it matters for your
//!   own native calls during a capture, which the backend does not see.
//!
//! ## Memory safety, and your own HIP objects
//!
//! Every portable op, kernel and GEMM captured into a graph keeps the memory it touches
//! allocated until the graph is reset or dropped, and device frees wait while any capture of
//! the process runs (`hipFree` synchronizes). Native work issued on raw handles is tracked
//! when you take its pointers with [`HipBackend::raw_ptr_for`] (the pointer of a view's first
//! element, the use recorded for the capture the stream takes part in and for the stream's
//! queued work); memory it touches otherwise must outlive every replay. Captures must be begun,
//! and streams forked into them, through the backend only (`capture_begin`, `wait_event`).
//!
//! An application that uses HIP itself brings its device with the `unsafe`
//! [`HipBackend::from_raw_device`] (the thread's current device left as it was, no probe) and
//! its streams with the `unsafe` `HipBackend::stream_from_raw` (the `runtime` feature); each
//! states its safety contract. Memory the application allocated cannot become a backend
//! buffer: see `docs/INTEROP.md` for why, and for the whole picture.
//!
//! ## Testing on an NVIDIA GPU
//!
//! The crate's `shim/` folder holds a small C++ library, built with nvcc, that exports the HIP
//! entry points this backend uses under the name `libamdhip64.so.5` and forwards each one to
//! CUDA (runtime, driver and NVRTC), translating enums and error codes as HIP's own NVIDIA
//! headers do; there `gcnArchName` is the CUDA architecture (`sm_90`) and code objects are
//! cubins. With it on `LD_LIBRARY_PATH`, the unchanged test binaries run on an NVIDIA GPU.
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
    capture, code_cache, device, editing, error, event, ffi, gemm, graph, kernels, memory, module,
    node_kind, ops, probe, rtc, stream, topology
);
#[cfg(not(feature = "runtime"))]
mod unavailable;

pub use backend::HipBackend;
#[cfg(not(feature = "runtime"))]
pub use unavailable::{
    HBlock, HEvent, HGraph, HGraphExec, HNoConditional, HNode, HStream, HipDevice, HipKernelModule,
};
#[cfg(feature = "runtime")]
pub use {
    device::HipDevice,
    editing::{HNoConditional, HNode},
    event::HEvent,
    graph::{HGraph, HGraphExec},
    kernels::HipKernelModule,
    memory::HBlock,
    stream::HStream,
};

accel_graph_driver::driver_type_aliases! {
    HipDevice, "HIP": HipBuffer, HipStream, HipEvent, HipGraphImpl, HipGraph
}

/// Re-export of the hip-sys version this crate is built against, for the raw handles' types.
#[cfg(feature = "runtime")]
pub use hip_sys;
