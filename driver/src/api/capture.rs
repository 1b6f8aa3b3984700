//! `DriverCapture`: stream capture.

use accel_graph_api::CaptureErrorMode;

use super::{DriverResult, DriverStreams};

/// Stream capture of a driver: work issued on a capturing stream (and on streams forked into
/// its capture through events) is recorded into a graph instead of run.
pub trait DriverCapture: DriverStreams {
    /// A captured graph (dropping it releases it).
    type Graph: Send + 'static;

    /// Begins capturing `stream` in `mode` (resolved: never `Default`).
    fn begin_capture(&self, stream: &Self::Stream, mode: CaptureErrorMode) -> DriverResult<()>;

    /// Ends the capture that began on `stream`. The capture is over afterwards, whatever the
    /// result: on error, whatever it recorded is dropped.
    fn end_capture(&self, stream: &Self::Stream) -> DriverResult<Self::Graph>;

    /// Sets the calling thread's capture mode (CUDA's `cuThreadExchangeStreamCaptureMode`)
    /// and returns the previous one. Drivers that do not enforce modes themselves return
    /// `mode`.
    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode>;
}
