//! `DriverCapture`: stream capture.

use accel_graph_api::CaptureErrorMode;

use super::{DriverResult, DriverStreams};

/// Stream capture of a driver: work issued on a capturing stream (and on streams forked into
/// its capture through events) is recorded into a graph instead of run.
pub trait DriverCapture: DriverStreams {
    /// A captured graph (dropping it releases it).
    type Graph: Send + 'static;

    /// Begins capturing `stream` in `mode` (resolved: never `Default`).
    ///
    /// # Safety
    /// Only the driver layer may call this: it counts the capture in its capture domain (so
    /// that device frees wait until the capture ends) and records the stream's membership (so
    /// that ops issued on it keep their memory alive). A capture begun behind its back lets
    /// frees and untracked ops into the graph, whose replays then touch freed memory.
    unsafe fn begin_capture(
        &self,
        stream: &Self::Stream,
        mode: CaptureErrorMode,
    ) -> DriverResult<()>;

    /// Ends the capture that began on `stream`. The capture is over afterwards, whatever the
    /// result: on error, whatever it recorded is dropped.
    ///
    /// # Safety
    /// Only the driver layer may call this, for a capture it began with
    /// [`begin_capture`](Self::begin_capture): it ends the capture in its books (the capture
    /// domain's count, the streams' membership, the kept blocks) along with the driver's. A
    /// capture ended behind its back leaves those books wrong: frees stay gated or streams
    /// stay marked capturing, and the graph it returns holds no memory alive.
    unsafe fn end_capture(&self, stream: &Self::Stream) -> DriverResult<Self::Graph>;

    /// Sets the calling thread's capture mode (CUDA's `cuThreadExchangeStreamCaptureMode`)
    /// and returns the previous one. Drivers that do not enforce modes themselves return
    /// `mode`.
    fn exchange_capture_mode(&self, mode: CaptureErrorMode) -> DriverResult<CaptureErrorMode>;
}
