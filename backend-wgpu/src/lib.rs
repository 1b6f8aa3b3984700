//! # accel-graph-wgpu
//!
//! The WebGPU backend of accel-graph, through wgpu (Vulkan, Metal, DX12, GL; in CI Mesa's
//! lavapipe, Vulkan on the CPU).
//!
//! WebGPU has no graphs: command buffers are single-use. So graphs here are *software graphs*:
//! a capture records fully resolved work (compute pipeline, bind group with its own parameter
//! block, grid size; buffer copies; host callbacks) issued on the capturing stream,
//! `instantiate` turns the recording into a replay plan, and `replay` re-encodes the plan into
//! one command encoder (one compute pass per run of kernels) and one queue submit. What a
//! replay saves over eager work is the per-op resolving (parameter buffers, bind groups) and
//! the per-op submits.
//!
//! Everything else follows the shared front ([`accel_graph_api::Graph`]): PyTorch's state
//! machine, graph memory pools, the four capture error modes (emulated with
//! [`accel_graph_api::capture_rules::CaptureRules`]), fork/join across streams through events,
//! DOT dumps and `nodes()`.
//!
//! Streams are ordered submission queues over the device's one wgpu queue; the default stream
//! cannot be captured (as CUDA's legacy stream). Device addresses are synthetic (WebGPU has
//! none) but stable per block, so pool reuse is visible.
//!
//! `axpy` rounds the product before the sum, as the contract asks. WGSL lets a shader compiler
//! contract `y + a * x` into a fused multiply-add (NVIDIA's Vulkan compiler does), so the shader
//! passes the product through an integer XOR with a zero the compiler cannot see, which forces
//! the rounded f32 to exist. Replay equals eager bit for bit in any case: both run the same
//! pipeline.
#![deny(missing_docs)]

mod backend;
mod capture;
mod command;
mod context;
mod driver_error;
mod event;
mod gpu;
mod graph;
mod kernels;
mod memory;
mod plan;
mod stream;

pub use backend::{WgpuBackend, WgpuGraph};
pub use event::WgpuEvent;
pub use gpu::ADAPTER_ENV;
pub use graph::WgpuGraphImpl;
pub use kernels::{PORTABLE_OPS_WGSL, WORKGROUP_SIZE, dispatch_size};
pub use memory::{RawBlock, WgpuAllocator, WgpuBuffer};
pub use stream::WgpuStream;
