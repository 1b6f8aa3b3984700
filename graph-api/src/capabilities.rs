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
    /// Graphs can be updated in place: from another capture of the same topology
    /// (`update_from`) and node by node (`update_node`).
    pub graph_update: bool,
    /// A graph replayed while the current stream captures becomes a child node of that
    /// capture.
    pub child_graphs: bool,
    /// `if_then` and `while_loop` nodes (on the device, or in an emulation with the same
    /// results).
    pub conditional_nodes: bool,
    /// `if_else` nodes (CUDA needs a 12.8 driver for them).
    pub conditional_if_else: bool,
    /// Graphs can be instantiated for launch from the device
    /// ([`InstantiateFlags::device_launch`](crate::InstantiateFlags)).
    pub device_launch: bool,
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
            graph_update: false,
            child_graphs: false,
            conditional_nodes: false,
            conditional_if_else: false,
            device_launch: false,
        }
    }

    /// The capabilities of a device whose driver captures streams natively (CUDA, HIP):
    /// native graphs of any work on the stream, fork/join across streams, an uncapturable
    /// default stream, enforced capture modes and timing events. Host callbacks, graph
    /// upload and the graph-editing flags are the driver's to set.
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
