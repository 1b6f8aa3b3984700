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
//!   [`WgpuBackend`] on the adapter, so all instances share one capture domain.
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
#![deny(missing_docs)]
// Proving `Send + Sync` of a buffer of any element type walks wgpu's deep device types.
#![recursion_limit = "256"]

#[cfg(doc)]
use accel_graph_api::GraphError;

mod adapter;
mod backend;
mod capture;
mod command;
mod device;
mod editing;
mod error;
mod event;
mod graph;
mod kernels;
mod memory;
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
pub use kernels::{WORKGROUP_SIZE, dispatch_size};
pub use memory::WgpuBlock;
pub use ops::PORTABLE_OPS_WGSL;
pub use stream::WgpuStreamState;
