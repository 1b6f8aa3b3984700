//! `DriverStreams`: streams and the device-wide wait.

use super::DriverResult;

/// Streams of a driver. Stream handles release their stream when dropped.
pub trait DriverStreams: Send + Sync + 'static {
    /// A stream (dropping it releases the stream).
    type Stream: Send + Sync + 'static;

    /// The default stream: the initial current stream of every thread. On backends where
    /// `capabilities().uncapturable_default_stream`, it cannot be captured (CUDA's legacy
    /// stream).
    fn default_stream(&self) -> Self::Stream;

    /// Creates a stream that can be captured.
    fn create_stream(&self) -> DriverResult<Self::Stream>;

    /// A key naming the stream, unique among the driver's live streams (its raw handle).
    fn stream_key(&self, stream: &Self::Stream) -> u64;

    /// True for the default stream.
    fn is_default_stream(&self, stream: &Self::Stream) -> bool;

    /// Waits for the work on `stream`.
    fn stream_synchronize(&self, stream: &Self::Stream) -> DriverResult<()>;

    /// The driver's id of the capture `stream` takes part in, if it is capturing (an
    /// invalidated capture still counts until it ends).
    fn capture_id(&self, stream: &Self::Stream) -> DriverResult<Option<u64>>;
}
