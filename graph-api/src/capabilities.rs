//! `Capabilities`: what a backend can do, so generic code and the conformance suite can skip
//! what a backend lacks and say why.

/// What a backend supports. New flags may be added: build one from [`Capabilities::none`].
///
/// ```
/// use accel_graph_api::Capabilities;
/// let mut caps = Capabilities::none("my device");
/// caps.host_callbacks = true;
/// assert!(!caps.native_graphs);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The device's name.
    pub device_name: String,
    /// Graphs are captured by the driver (CUDA, HIP) rather than recorded in software.
    pub native_graphs: bool,
    /// `host_callback` works (and is captured).
    pub host_callbacks: bool,
    /// Work forked to other streams through events is pulled into a capture.
    pub multi_stream_capture: bool,
    /// The default stream refuses capture (as CUDA's legacy stream does).
    pub uncapturable_default_stream: bool,
    /// Capture error modes are enforced (unsafe calls during capture are detected).
    pub capture_modes_enforced: bool,
    /// The executable graph can be uploaded to the device ahead of its first launch.
    pub graph_upload: bool,
    /// Native work (user kernels, vendor libraries) issued on the raw stream is captured.
    pub native_work_capture: bool,
    /// Events can measure time (`elapsed_time`), also across a replayed graph.
    pub event_timing: bool,
}

impl Capabilities {
    /// A capabilities record for `device_name` with every flag off.
    pub fn none(device_name: impl Into<String>) -> Self {
        Capabilities {
            device_name: device_name.into(),
            native_graphs: false,
            host_callbacks: false,
            multi_stream_capture: false,
            uncapturable_default_stream: false,
            capture_modes_enforced: false,
            graph_upload: false,
            native_work_capture: false,
            event_timing: false,
        }
    }

    /// The capabilities of a device whose driver captures streams natively (CUDA, HIP):
    /// native graphs of any work on the stream, fork/join across streams, an uncapturable
    /// default stream, enforced capture modes and timing events. Host callbacks and graph
    /// upload are the driver's to set.
    pub fn native_capture(device_name: impl Into<String>) -> Self {
        Capabilities {
            native_graphs: true,
            multi_stream_capture: true,
            uncapturable_default_stream: true,
            capture_modes_enforced: true,
            native_work_capture: true,
            event_timing: true,
            ..Capabilities::none(device_name)
        }
    }
}
