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
    /// The largest grid and block a user kernel may be launched with: a launch beyond them is
    /// refused before it reaches the device, as
    /// [`GraphError::KernelArguments`](crate::GraphError::KernelArguments), on every backend
    /// alike.
    pub launch_limits: LaunchLimits,
}

impl Capabilities {
    /// A capabilities record for `device_name` with every flag off, and CUDA's launch limits
    /// ([`LaunchLimits::CUDA`]).
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
            launch_limits: LaunchLimits::CUDA,
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

/// The launch sizes a device accepts for a user kernel: blocks (workgroups) per grid
/// dimension, threads per block dimension, and threads per block in all. Every dimension of a
/// grid and of a block must also be at least 1.
///
/// ```
/// use accel_graph_api::LaunchLimits;
/// let limits = LaunchLimits::CUDA;
/// assert_eq!(limits.max_grid, [2_147_483_647, 65_535, 65_535]);
/// assert_eq!(limits.max_threads_per_block, 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LaunchLimits {
    /// The most blocks along x, y and z.
    pub max_grid: [u32; 3],
    /// The most threads of a block along x, y and z.
    pub max_block: [u32; 3],
    /// The most threads of one block (the product of its three dimensions).
    pub max_threads_per_block: u32,
}

impl LaunchLimits {
    /// CUDA's limits, the same on every GPU since compute capability 3.0: grid x up to
    /// 2^31 − 1, y and z up to 65,535; block x and y up to 1,024, z up to 64, and 1,024
    /// threads in all. HIP takes them too: AMD's GPUs accept at least these, and so a kernel
    /// that launches on one of the two launches on the other. The mock takes them so that a
    /// test on it refuses what a GPU would.
    pub const CUDA: LaunchLimits = LaunchLimits {
        max_grid: [(1 << 31) - 1, 65_535, 65_535],
        max_block: [1024, 1024, 64],
        max_threads_per_block: 1024,
    };

    /// Limits of `max_grid` blocks per grid dimension, `max_block` threads per block
    /// dimension and `max_threads_per_block` threads per block (for a backend that reads its
    /// device's, such as wgpu's adapter limits).
    pub const fn new(max_grid: [u32; 3], max_block: [u32; 3], max_threads_per_block: u32) -> Self {
        LaunchLimits {
            max_grid,
            max_block,
            max_threads_per_block,
        }
    }
}
