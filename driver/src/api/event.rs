//! `DriverEvents`: events for ordering streams, timing, and joining captures.

use accel_graph_api::EventOptions;

use super::{DriverResult, DriverStreams};

/// Events of a driver. Event handles release their event when dropped.
///
/// During a capture the driver follows CUDA: recording an internal event on a capturing stream
/// and waiting on it from another stream forks that stream into the capture (and a wait back
/// joins it); an *external* event ([`EventOptions::external`]) becomes a node of the graph.
pub trait DriverEvents: DriverStreams {
    /// An event (dropping it releases the event).
    type Event: Send + Sync + 'static;

    /// Creates an event.
    fn create_event(&self, options: EventOptions) -> DriverResult<Self::Event>;

    /// Records `event` on `stream`.
    ///
    /// # Safety
    /// A record on a capturing stream makes `event` a way into that capture: a stream that
    /// later waits on it is forked into the capture. The caller must make the driver layer
    /// aware of every such fork (the waiting stream's membership in the capture), else the
    /// ops issued on the forked stream are not kept alive.
    unsafe fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> DriverResult<()>;

    /// Makes `stream` wait for `event`.
    ///
    /// # Safety
    /// A wait on an event recorded in a capture forks `stream` into that capture. The caller
    /// must make the driver layer aware of it (the stream's membership in the capture), else
    /// the ops issued on `stream` afterwards are not kept alive by the capture's graph.
    unsafe fn wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> DriverResult<()>;

    /// Blocks until `event` completes.
    fn event_synchronize(&self, event: &Self::Event) -> DriverResult<()>;

    /// Whether `event` has completed (never blocks; a never-recorded event has).
    fn event_query(&self, event: &Self::Event) -> DriverResult<bool>;

    /// Milliseconds between two completed timing events.
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> DriverResult<f32>;
}
