//! # accel-graph-decode
//!
//! A Llama-architecture decode engine written once over [`accel_graph::Backend`]: the model
//! ([`model`]), a static key/value cache, per-step inputs in device memory, and an
//! [`Engine`] that runs each decode step as one graph per batch bucket — captured lazily or
//! pre-captured largest-first into one shared pool, replayed with one launch, eager where a
//! capture fails — with per-bucket telemetry ([`Summary`]).
//!
//! It uses accel-graph's public API only, as an inference engine written by a user would:
//! portable kernels ([`accel_graph::kernel::Kernel`]: CUDA C, WGSL, a host function), the
//! portable GEMM ([`accel_graph::Backend::gemm`]: cuBLAS on CUDA), streams, events and graphs.
//! On the mock the engine equals its host reference ([`model::Reference`]) bit for bit.
//!
//! [`tp`] splits the model over several devices (tensor parallelism): each rank runs its own
//! engine, whose bucket graphs hold the ranks' all-reduces.
//!
//! ```
//! use accel_graph_decode::{Config, Engine, EngineOptions, StepRow};
//!
//! let backend = accel_graph::mock::MockBackend::new();
//! let options = EngineOptions::new().buckets([1, 2, 4]);
//! let mut engine = Engine::<_, f32>::random(&backend, Config::tiny(), 7, options)?;
//! // Three sequences (cache slots 0, 1, 2), their first tokens at position 0: padded to 4.
//! let rows: Vec<StepRow> = (0..3).map(|s| StepRow::new(s, 10 + s, 0)).collect();
//! let out = engine.step(&rows)?;
//! assert_eq!((out.tokens.len(), out.bucket), (3, 4));
//! // Feed each sequence its greedy token at position 1: the bucket's graph replays.
//! let next: Vec<StepRow> = (0..3).map(|s| StepRow::new(s, out.tokens[s as usize], 1)).collect();
//! engine.step(&next)?;
//! let summary = engine.summary();
//! assert_eq!(summary.bucket(4).map(|b| b.replays), Some(2));
//! println!("{summary}");
//! # Ok::<(), accel_graph::GraphError>(())
//! ```

pub mod cli;
pub mod config;
pub mod dump;
pub mod element;
pub mod engine;
pub mod init;
pub mod model;
pub mod timing;
pub mod tp;

pub use config::Config;
pub use element::DecodeElement;

pub use engine::{
    BucketState, BucketTelemetry, CaptureProgress, Engine, EngineOptions, StepMode, StepOutput,
    Summary,
};
pub use model::{Model, StepRow};
