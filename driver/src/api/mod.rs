//! The driver API: what a backend implements, one trait per concern, each in its own file of
//! the backend (`stream.rs`, `event.rs`, `memory.rs`, `capture.rs`, `graph.rs`, `ops.rs`,
//! and `device.rs` for [`Driver`] itself). It is the thin layer over the device's runtime
//! (cudarc's `result` layer, HIP, wgpu, or a simulation); everything the API promises on top —
//! PyTorch's graph semantics, pools, capture-mode rules, keep-alive of captured memory — is
//! written once in this crate.
//!
//! The methods that can break the layer's invariants (use-after-free, an untracked capture,
//! a stream forked into a capture behind the layer's back) are `unsafe`, each with a
//! `# Safety` section saying what the caller guarantees; only the driver layer calls them.
//! [`DriverBackend::driver()`](crate::DriverBackend::driver) stays safe because every such
//! method is unsafe to call.

mod capture;
mod collectives;
mod editing;
mod error;
mod event;
mod graph;
mod kernels;
mod memory;
mod ops;
mod stream;

use accel_graph_api::{BackendKind, Capabilities, backend_kit::stream_order::ReuseRule};

pub use capture::DriverCapture;
pub use collectives::{CommSpec, DriverCollectives, RawCollective, collectives_unsupported};
pub use editing::{CapturePoint, DriverEditing};
pub use error::{DriverError, DriverResult};
pub use event::DriverEvents;
pub use graph::DriverGraphs;
pub use kernels::{Bytes, DriverKernels, RawArg};
pub use memory::DriverMemory;
pub use ops::{DriverOps, HostFn, Region};
pub use stream::DriverStreams;

/// A device driver: what the backend written once over it ([`crate::DriverBackend`]) needs
/// from one device.
///
/// Calls are made with the driver bound ([`Driver::bind`]) on the calling thread. Every
/// associated handle type releases its object on drop.
pub trait Driver:
    DriverOps + DriverEvents + DriverGraphs + DriverKernels + DriverEditing + DriverCollectives
{
    /// Which backend the driver is.
    const KIND: BackendKind;

    /// What the device supports.
    fn capabilities(&self) -> Capabilities;

    /// The capture domain: instances whose drivers answer the same key share capture-mode
    /// rules (a `global` capture forbids unsafe calls through every instance of the domain)
    /// and defer frees while any capture of the domain runs. The CUDA driver's global mode
    /// spans the process.
    fn capture_domain(&self) -> u64;

    /// Makes the driver's device current on the calling thread (cheap when it is already).
    fn bind(&self) -> DriverResult<()>;

    /// Waits for all work on the device.
    fn synchronize(&self) -> DriverResult<()>;

    /// Called before every buffer allocation, pooled or not (the mock counts allocations and
    /// injects faults here).
    fn on_alloc(&self, bytes: usize) -> DriverResult<()> {
        let _ = bytes;
        Ok(())
    }

    /// How the graph pools reuse free blocks across streams. Real drivers keep the default,
    /// [`ReuseRule::StreamOrdered`]; anything else is a fault switch, which only a simulated
    /// device offers, for tests of what a sanitizer or a suite catches without the rule.
    fn pool_reuse_rule(&self) -> ReuseRule {
        ReuseRule::StreamOrdered
    }
}
