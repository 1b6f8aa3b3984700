//! # accel-graph-wgpu
//!
//! The WebGPU backend of accel-graph, through wgpu (Vulkan, Metal, DX12, GL; in CI Mesa's
//! lavapipe, Vulkan on the CPU). It is a driver ([`WgpuDevice`]) under the same driver layer
//! as the CUDA, HIP and mock backends, so a program sees the same rules, errors and memory
//! semantics on each.
//!
//! ## The model
//!
//! * **Graphs** are *software graphs*: WebGPU has none, and its command buffers are
//!   single-use. A capture records fully resolved work issued on the capturing streams
//!   (compute pipeline, bind group with its own parameter block, grid; buffer copies; host
//!   functions; external event records), following CUDA's stream-capture rules (fork/join
//!   through events, isolation and merge errors, unjoined forks: see
//!   [`accel_graph_driver::software`]). Instantiation splits the recording into runs of GPU
//!   work at the host functions; a replay re-encodes each run into one command encoder and
//!   one queue submit. What a replay saves over eager work is the per-op resolving (parameter
//!   buffers, bind groups) and the per-op submits.
//! * **Streams** are logical streams over the device's one in-order wgpu queue; each
//!   remembers its last submission. The default stream cannot be captured (as CUDA's legacy
//!   stream). Host functions run on the calling thread once their stream's earlier work has
//!   completed, eagerly and at their place during a replay.
//! * **Devices** are opened once per adapter and process and shared by every
//!   [`WgpuBackend::new`] on the adapter, so all those instances share one capture domain. A
//!   device you opened yourself is brought with [`WgpuBackend::from_device`]: see
//!   [below](#your-own-device).
//! * **Memory**: one wgpu storage buffer per block. Device addresses are synthetic (WebGPU
//!   has none) but stable per block, so pool reuse is visible. An op over more elements than
//!   one storage binding holds is [`GraphError::Unsupported`].
//! * **Events** time with GPU timestamps where the adapter has timestamp queries
//!   (`capabilities().event_timing`).
//!
//! `axpy` rounds the product before the sum, as the contract asks. WGSL lets a shader
//! compiler contract `y + a * x` into a fused multiply-add (NVIDIA's Vulkan compiler does), so
//! the kernels pass products through an integer XOR with a zero the compiler cannot see, which
//! forces the rounded f32 to exist. Replay equals eager bit for bit in any case: both run the
//! same pipelines.
//!
//! ## User kernels
//!
//! A [`Kernel`](accel_graph_api::kernel::Kernel)'s WGSL is bound as the [kernel module's
//! rules](accel_graph_api::kernel#bindings-on-each-backend) say: the entry point is the
//! kernel's name and its `@workgroup_size` the kernel's block (checked when the kernel loads);
//! buffer parameter `i` is `@group(0) @binding(i)` counting buffers only (`var<storage,
//! read>` for `Access::Read`, `var<storage, read_write>` otherwise), as `array<T>` of its
//! element type or `array<u32>` for types WGSL lacks (16-bit floats, bytes: whole words); the
//! scalars, if any, are one `var<uniform>` struct at the next binding, 4-byte fields in
//! declaration order (the block is padded to 16 bytes; a struct larger than the scalars
//! declared is refused at load). The dispatch is `grid` workgroups. WGSL that does not parse
//! or validate, or that does not match these bindings, is
//! [`GraphError::KernelFailed`] with naga's or wgpu's message when the kernel loads
//! (`prepare_kernel` or its first launch); a kernel without WGSL is
//! [`GraphError::Unsupported`].
//!
//! A view is bound from its first element, so its byte offset must be a multiple of the
//! adapter's `min_storage_buffer_offset_alignment` (256 bytes at most, often less; element 64
//! of an `f32` buffer always works): otherwise the launch is [`GraphError::Unsupported`],
//! saying so — pass the whole buffer and an offset scalar instead. An empty view binds a small
//! buffer of the backend's (a binding holds at least one word).
//!
//! Two views of one buffer (even of disjoint elements) can be bound in one launch when their
//! parameters are both read-only or both written: WebGPU forbids one buffer as read-only and
//! read-write storage in one dispatch, and a shader's access must match its binding's, so a
//! read-only and a written parameter on one buffer is [`GraphError::Unsupported`] naming
//! them (declare both `Access::ReadWrite`, or use two buffers). Overlapping written views
//! race as they would on any GPU.
//!
//! ## GEMM
//!
//! One tiled WGSL kernel per element type (`f32`, `bf16`, `f16`), built on first use: 16 × 16
//! tiles in workgroup memory, each element's products summed in `f32` in order of `k` (so
//! integer-valued operands give the reference's result exactly; the shader compiler may fuse
//! multiply-adds, within the tolerance the contract states), `C` only written when `beta` is
//! 0. 16-bit operands are bound as `array<u32>` and converted in integer arithmetic (exact,
//! subnormals included); results are rounded once to nearest-even, bit for bit as the `half`
//! crate rounds. Two 16-bit elements share a word and their writers may run in different
//! workgroups, so each invocation replaces its half of the word with an atomic AND then an
//! atomic OR on disjoint bits: views at odd element offsets and odd `n` are exact, and the
//! elements around `C`'s view keep their bits. Operands may be views of one buffer (an arena)
//! as long as `C` overlaps neither `A` nor `B` ([`GraphError::OverlappingOperands`]
//! otherwise, on every backend: the product would read elements it writes).
//!
//! ## Your own device
//!
//! [`WgpuBackend::from_device`] runs the backend on a `wgpu::Device` and `wgpu::Queue` you
//! opened, with your adapter, limits and features (timestamp queries, for timing events, are
//! optional), and leaves your uncaptured-error handler in place (the backend reports its own
//! and your pipelines' mistakes as typed errors). A device without what the backend's kernels
//! bind is [`GraphError::BackendUnavailable`] naming the limit.
//!
//! Each device you bring is a capture domain of its own, unless a backend already runs on it
//! (brought before, or a backend's own [`device()`](WgpuBackend::device)): then the new
//! instance joins that device's domain, so a `global` capture forbids unsafe calls through
//! every instance on the device. wgpu's `Device: PartialEq` cannot tell this: it compares the
//! ids of wgpu's core library, which repeat across `wgpu::Instance`s (two instances' first
//! devices compare equal), so the backend compares devices by the error sink only the handles
//! of one device share, with a harmless probe (an invalid buffer's validation error, caught
//! in error scopes).
//!
//! ## User pipelines in graphs
//!
//! [`WgpuBackend::dispatch`] issues a [`WgpuDispatch`] — your compute pipeline, bind groups
//! and workgroup counts — on the current stream: submitted now in stream order, or recorded by
//! a capture and re-encoded by every replay, in order with the portable ops, kernels and
//! GEMMs. Mistakes wgpu finds are this call's [`GraphError::KernelFailed`]; a replay whose
//! recorded bind groups reference a resource you destroyed (or mapped) since is the replay's
//! `KernelFailed`.
//!
//! What is guaranteed about memory, exactly:
//!
//! * **No use-after-free, declared or not.** A recorded dispatch holds its pipeline and bind
//!   groups, and every `wgpu::Buffer` a bind group references lives while the graph does
//!   (wgpu counts references), including an accel-graph buffer's memory after the buffer is
//!   dropped. A new allocation never gets that memory: a block outside a pool is one wgpu
//!   buffer of its own, and a pool hands its blocks only to allocations in that pool.
//! * **Declared memory is the graph's, as the portable ops' operands are.** Views bound with
//!   [`WgpuDispatch::buffer`] are declared for you; accel-graph buffers your own bind groups
//!   reference (through [`WgpuBlock::buffer`]) are declared with [`WgpuDispatch::touch`]. A
//!   declared block whose buffer is dropped stays in the backend's books as held by the graph
//!   (`memory_stats().graph_held_bytes`, `memory_snapshot()`), and in its pool, until the
//!   graph is reset or dropped.
//! * **Undeclared memory leaves the books early.** Dropping the buffer releases its block in
//!   the books at once (plain memory) or when no graph holds its pool, while the graph's bind
//!   group still keeps the wgpu buffer: the memory statistics undercount until the graph
//!   goes, and nothing else changes.
//! * **Pool blocks are reused within their pool, declared or not** — the pool contract
//!   (SEMANTICS 5.08b), not a hazard of user dispatches: a block of a dropped buffer goes
//!   back to its pool's free list, and the next capture into that pool may allocate it;
//!   graphs sharing a pool must replay in capture order, as with any op.
#![deny(missing_docs)]
// Proving `Send + Sync` of a buffer of any element type walks wgpu's deep device types.
#![recursion_limit = "256"]

#[cfg(doc)]
use accel_graph_api::GraphError;

mod adapter;
mod backend;
mod capture;
mod collectives;
mod command;
mod device;
mod editing;
mod error;
mod event;
mod gemm;
mod graph;
mod interop;
mod kernels;
mod memory;
mod nested;
mod ops;
mod stream;
mod timing;
mod user_kernels;
mod wgsl;

pub use adapter::ADAPTER_ENV;
pub use backend::{WgpuBackend, WgpuBuffer, WgpuEvent, WgpuGraph, WgpuGraphImpl, WgpuStream};
pub use device::WgpuDevice;
pub use editing::{WHILE_ITERATION_LIMIT, WgpuConditionalBuild};
pub use event::WgpuEventState;
pub use graph::{WgpuExecutable, WgpuRawGraph};
pub use interop::WgpuDispatch;
pub use kernels::{WORKGROUP_SIZE, dispatch_size};
pub use memory::WgpuBlock;
pub use ops::PORTABLE_OPS_WGSL;
pub use stream::WgpuStreamState;
pub use user_kernels::WgpuKernelModule;
