//! # accel-graph
//!
//! One backend-agnostic API for accelerator graphs — CUDA graphs and their kin: capture a
//! stream's work once, replay it with one launch. The API mirrors PyTorch's
//! `torch.accelerator.Graph`: [`AcceleratorGraph`] (capture_begin / capture_end / instantiate /
//! replay / reset / pool / debug mode), [`GraphOptions`] (`keep_graph`, `pool`,
//! `capture_error_mode`), and [`Backend`] for streams, events, memory and a small set of
//! portable ops ([`PortableOps`]), so graph logic is written once and unit-tested on the mock
//! without a GPU. Memory a graph's captured work uses stays allocated until the graph is reset
//! or dropped: a replay never touches freed memory.
//!
//! Backends are chosen with cargo features — `mock` (default), `cuda`, `hip`, `wgpu` — at
//! compile time ([`DefaultBackend`]) or at run time ([`BackendChoice`], the
//! `ACCEL_GRAPH_BACKEND` variable, and a [`BackendJob`] visitor over generic code). Graphs of
//! different backends can live side by side as [`AnyGraph`]. [`utils`] holds the tools PyTorch
//! users reach for (graphed callables, Megatron's full-iteration wrapper, bucketed caches).
//!
//! ```
//! # #[cfg(feature = "mock")] {
//! use accel_graph::prelude::*;
//!
//! // `with stream, graph: x += 1` then `graph.replay()`, on the mock:
//! let backend = accel_graph::mock::MockBackend::new();
//! let x = backend.alloc_from(&[0.0; 4])?;
//! let stream = backend.new_stream()?;
//! let mut graph = backend.graph(GraphOptions::new())?;
//! backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
//! graph.replay()?;
//! assert_eq!(backend.download(&x)?, vec![1.0; 4]);
//! # }
//! # Ok::<(), accel_graph::GraphError>(())
//! ```
//!
//! Backend authors: the implementor kit is [`backend_kit`], and every backend of this
//! workspace is a driver of `accel-graph-driver`; see `docs/ARCHITECTURE.md`.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "mock", feature = "cuda", feature = "hip", feature = "wgpu")))]
compile_error!("accel-graph needs at least one backend feature: mock, cuda, hip or wgpu");

pub use accel_graph_api::*;

/// The tools PyTorch users reach for, over any backend (`accel-graph-utils`).
pub use accel_graph_utils as utils;

/// The deterministic mock backend (feature `mock`).
#[cfg(feature = "mock")]
#[cfg_attr(docsrs, doc(cfg(feature = "mock")))]
pub use accel_graph_mock as mock;

/// The CUDA backend (feature `cuda`).
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use accel_graph_cuda as cuda;

/// The HIP backend (feature `hip`).
#[cfg(feature = "hip")]
#[cfg_attr(docsrs, doc(cfg(feature = "hip")))]
pub use accel_graph_hip as hip;

/// The wgpu backend (feature `wgpu`).
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
pub use accel_graph_wgpu as wgpu;

mod any_graph;
mod default_backend;
mod selection;

pub use any_graph::AnyGraph;
pub use default_backend::{DefaultBackend, default_backend};
pub use selection::{BACKEND_ENV, BackendChoice, BackendJob, compiled_backends, run_on};

/// What graph code imports: `use accel_graph::prelude::*;`.
pub mod prelude {
    pub use accel_graph_api::prelude::*;

    pub use crate::{AnyGraph, BackendChoice, BackendJob, DefaultBackend};
}
