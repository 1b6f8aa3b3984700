//! `MockConfig`: how a simulated device is set up.

/// Settings of a [`crate::MockBackend`], for [`crate::MockBackend::with_config`].
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, GraphError};
/// use accel_graph_mock::{MockBackend, MockConfig};
/// let backend = MockBackend::with_config(MockConfig {
///     base_address: 0x1000,
///     memory_capacity: Some(4096),
///     ..MockConfig::default()
/// })?;
/// assert_eq!(backend.alloc::<f32>(4)?.device_address(), 0x1000);
/// assert!(matches!(backend.alloc::<f32>(2048), Err(GraphError::OutOfMemory { .. })));
/// // An address space that cannot hold an allocation is refused up front.
/// assert!(MockBackend::with_config(MockConfig { base_address: u64::MAX, ..MockConfig::default() }).is_err());
/// # Ok::<(), GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockConfig {
    /// First virtual device address handed out (rounded up to 256 bytes).
    pub base_address: u64,
    /// Device memory size in bytes; allocations beyond it fail with
    /// [`accel_graph_api::GraphError::OutOfMemory`]. `None`: limited by host memory only.
    pub memory_capacity: Option<usize>,
    /// Fill new device memory with NaN instead of zeros, so reads of memory that was never
    /// written show up (allocation contents are unspecified on real devices).
    pub poison_new_memory: bool,
    /// Instances made with the same `shared_device` model one device, as CUDA instances of
    /// one device share its context: their capture-mode rules are one (a `global` capture
    /// forbids unsafe calls through every one of them) and frees wait for any of their
    /// captures. `None` (the default): a device of its own, so independent tests running in
    /// parallel threads do not disturb each other's captures.
    pub shared_device: Option<u32>,
    /// The race sanitizer (on by default): work that touches bytes other work writes, or
    /// writes bytes other work touches, with nothing ordering the two, fails with
    /// [`accel_graph_api::GraphError::DataRace`] — eager work on streams not ordered by an
    /// event wait or a synchronize, and nodes of a captured graph with no path between them
    /// (checked when the capture ends). Off, the mock keeps no access history.
    pub race_sanitizer: bool,
    /// **A fault switch, for testing sanitizers and suites**: when set, a graph pool hands a
    /// free block to any allocation of the pool, whatever the streams — also to a branch of
    /// a capture that is not ordered after the block's last use, so that two branches of one
    /// graph share memory (silent corruption on a device that runs them concurrently; the
    /// mock runs them in recording order, which hides it from the values). Off by default;
    /// real backends have no such switch.
    pub unordered_pool_reuse: bool,
    /// Keep device blocks nothing uses any more for later allocations, as the CUDA and HIP
    /// backends do (their frees wait for the whole device): a block let go goes back into use
    /// only after a device-wide wait that began after it was let go, and the simulated
    /// device sees no free until `empty_cache` or the backend's end. Off by default, so the
    /// sanitizer reports work that touches a dropped buffer at once.
    pub recycle_memory: bool,
}

impl MockConfig {
    /// The default first address: recognisable in dumps and far from zero.
    pub const DEFAULT_BASE_ADDRESS: u64 = 0x7f00_0000_0000;

    /// The default configuration on the shared simulated device `device` (see
    /// [`MockConfig::shared_device`]).
    pub fn shared(device: u32) -> Self {
        MockConfig {
            shared_device: Some(device),
            ..MockConfig::default()
        }
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            base_address: Self::DEFAULT_BASE_ADDRESS,
            memory_capacity: None,
            poison_new_memory: false,
            shared_device: None,
            race_sanitizer: true,
            unordered_pool_reuse: false,
            recycle_memory: false,
        }
    }
}
