//! `MockBackend`: the [`Backend`] implementation of the simulated device.

use std::sync::{Arc, Mutex, atomic::Ordering};

use accel_graph_api::{
    Backend, BackendKind, Capabilities, Graph, GraphError, GraphOptions, HostCallback, MemoryStats,
    Result, pools::OwnedAllocation,
};

use crate::{
    FaultSite, MockBuffer, MockConfig, MockCounters, MockEvent, MockGraphImpl, MockStream,
    counters::Counters, device::Device, device::StreamSlot, event::EventState, op::Op,
};

/// The mock backend's graph type.
pub type MockGraph = Graph<MockGraphImpl>;

/// A deterministic simulated accelerator; clones share the device.
///
/// See the [crate documentation](crate) for the model. Beyond [`Backend`], it offers
/// [`counters`](MockBackend::counters) and [fault injection](MockBackend::inject_fault) for
/// users' own tests.
///
/// ```
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions};
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// assert_eq!(backend.capabilities().device_name, "mock");
/// assert_eq!(backend.clone().instance_id(), backend.instance_id());
/// assert_ne!(MockBackend::new().instance_id(), backend.instance_id());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Clone)]
pub struct MockBackend {
    device: Arc<Device>,
}

impl Default for MockBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBackend")
            .field("instance_id", &self.device.id)
            .finish()
    }
}

impl MockBackend {
    /// A new simulated device with the default [`MockConfig`].
    pub fn new() -> Self {
        Self::with_config(MockConfig::default())
    }

    /// A new simulated device set up by `config`.
    pub fn with_config(config: MockConfig) -> Self {
        MockBackend {
            device: Arc::new(Device::new(config)),
        }
    }

    /// The configuration the device was made with.
    pub fn config(&self) -> &MockConfig {
        &self.device.config
    }

    /// The activity counters (shared by clones).
    pub fn counters(&self) -> MockCounters {
        self.device.counters.snapshot()
    }

    /// Sets every counter back to zero.
    pub fn reset_counters(&self) {
        self.device.counters.reset()
    }

    /// Makes the `nth` call (1-based, counted from now) at `site` fail once with
    /// [`GraphError::InjectedFault`]; `nth == 0` disarms the site. Arming a site again replaces
    /// its earlier setting.
    ///
    /// ```
    /// use accel_graph_api::{Backend, GraphError};
    /// use accel_graph_mock::{FaultSite, MockBackend};
    /// let backend = MockBackend::new();
    /// backend.inject_fault(FaultSite::Alloc, 2);
    /// assert!(backend.alloc(1).is_ok());
    /// assert!(matches!(
    ///     backend.alloc(1),
    ///     Err(GraphError::InjectedFault { operation: "alloc", count: 2 })
    /// ));
    /// assert!(backend.alloc(1).is_ok()); // once only
    /// ```
    pub fn inject_fault(&self, site: FaultSite, nth: u64) {
        self.device.faults.arm(site, nth)
    }

    /// Disarms every injected fault.
    pub fn clear_faults(&self) {
        self.device.faults.clear()
    }

    /// True while any capture is in progress on this device.
    pub fn any_capture_active(&self) -> bool {
        self.device.rules.any_active()
    }

    /// Checks `buffers` and the current stream, then issues `op`.
    fn issue(&self, buffers: &[&MockBuffer], op: impl FnOnce() -> Op) -> Result<()> {
        for b in buffers {
            self.device.check_buffer(b)?;
        }
        self.device.submit(op())
    }

    fn same_len(op: &'static str, expected: &MockBuffer, got: &MockBuffer) -> Result<()> {
        if expected.len == got.len {
            Ok(())
        } else {
            Err(GraphError::LengthMismatch {
                op,
                expected: expected.len,
                got: got.len,
            })
        }
    }
}

impl Backend for MockBackend {
    type Stream = MockStream;
    type Event = MockEvent;
    type Buffer = MockBuffer;
    type Graph = MockGraph;

    fn kind(&self) -> BackendKind {
        BackendKind::Mock
    }

    fn instance_id(&self) -> u64 {
        self.device.id
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            device_name: "mock".to_owned(),
            native_graphs: false,
            host_callbacks: true,
            multi_stream_capture: true,
            uncapturable_default_stream: true,
            capture_modes_enforced: true,
            graph_upload: false,
            native_work_capture: false,
        }
    }

    fn default_stream(&self) -> MockStream {
        *self.device.current.default_stream()
    }

    fn new_stream(&self) -> Result<MockStream> {
        let mut state = self.device.lock();
        state.streams.push(StreamSlot::default());
        Ok(MockStream {
            device: self.device.id,
            index: state.streams.len() - 1,
        })
    }

    fn current_stream(&self) -> MockStream {
        self.device.current.get()
    }

    fn set_current_stream(&self, stream: &MockStream) -> MockStream {
        // A foreign stream is stored as given: every op on it then fails with ForeignObject.
        self.device.current.set(*stream)
    }

    fn synchronize(&self) -> Result<()> {
        // Work runs synchronously, so there is nothing to wait for; only the rules apply.
        self.device.rules.check_device_synchronize("synchronize")
    }

    fn stream_synchronize(&self, stream: &MockStream) -> Result<()> {
        self.device.wait_for_stream(stream, "stream_synchronize")
    }

    fn is_capturing(&self, stream: &MockStream) -> Result<bool> {
        Ok(self.device.stream_capture(stream)?.is_some())
    }

    fn new_event(&self) -> Result<MockEvent> {
        Ok(MockEvent {
            device: self.device.id,
            index: self.device.next_event.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(EventState::NeverRecorded),
        })
    }

    fn record_event(&self, event: &MockEvent) -> Result<()> {
        self.device.record_event(event)
    }

    fn wait_event(&self, event: &MockEvent) -> Result<()> {
        self.device.wait_event(event)
    }

    fn event_synchronize(&self, event: &MockEvent) -> Result<()> {
        self.device.event_synchronize(event)
    }

    fn alloc(&self, len: usize) -> Result<MockBuffer> {
        let device = &self.device;
        let stream = device.current_stream()?;
        let bytes = len.checked_mul(4).ok_or(GraphError::OutOfMemory {
            backend: "mock",
            requested_bytes: usize::MAX,
        })?;
        let pool = {
            let state = device.lock();
            match state.streams[stream.index].capture {
                Some(id) => {
                    device.ensure_valid(id)?;
                    state.capture(id).map(|c| c.pool)
                }
                None => None,
            }
        };
        if pool.is_none() {
            device.rules.check_unsafe_call("alloc")?;
        }
        device.faults.check(FaultSite::Alloc)?;
        let allocation = match pool {
            Some(pool) => device.pools.alloc_in(pool, bytes)?,
            None => device.pools.alloc_plain(bytes)?,
        };
        Counters::bump(&device.counters.allocations, 1);
        Ok(MockBuffer {
            device: device.id,
            len,
            allocation: OwnedAllocation::new(&device.pools, allocation),
        })
    }

    fn upload(&self, dst: &MockBuffer, src: &[f32]) -> Result<()> {
        self.device.check_buffer(dst)?;
        if src.len() != dst.len() {
            return Err(GraphError::LengthMismatch {
                op: "upload",
                expected: dst.len(),
                got: src.len(),
            });
        }
        self.device
            .wait_for_stream(&self.current_stream(), "upload")?;
        for (cell, value) in dst.region().cells().iter().zip(src) {
            cell.store(value.to_bits(), Ordering::Relaxed);
        }
        Ok(())
    }

    fn download(&self, src: &MockBuffer) -> Result<Vec<f32>> {
        self.device.check_buffer(src)?;
        self.device
            .wait_for_stream(&self.current_stream(), "download")?;
        Ok(src
            .region()
            .cells()
            .iter()
            .map(|c| f32::from_bits(c.load(Ordering::Relaxed)))
            .collect())
    }

    fn memory_stats(&self) -> MemoryStats {
        self.device.pools.stats()
    }

    fn fill(&self, x: &MockBuffer, value: f32) -> Result<()> {
        self.issue(&[x], || Op::Fill {
            x: x.region(),
            value,
        })
    }

    fn copy(&self, dst: &MockBuffer, src: &MockBuffer) -> Result<()> {
        Self::same_len("copy", dst, src)?;
        self.issue(&[dst, src], || Op::Copy {
            dst: dst.region(),
            src: src.region(),
        })
    }

    fn add_scalar(&self, x: &MockBuffer, c: f32) -> Result<()> {
        self.issue(&[x], || Op::AddScalar { x: x.region(), c })
    }

    fn scale(&self, x: &MockBuffer, a: f32) -> Result<()> {
        self.issue(&[x], || Op::Scale { x: x.region(), a })
    }

    fn axpy(&self, y: &MockBuffer, a: f32, x: &MockBuffer) -> Result<()> {
        Self::same_len("axpy", y, x)?;
        self.issue(&[y, x], || Op::Axpy {
            y: y.region(),
            a,
            x: x.region(),
        })
    }

    fn host_callback(&self, f: HostCallback) -> Result<()> {
        self.issue(&[], || Op::Host { f })
    }

    fn graph(&self, options: GraphOptions) -> Result<MockGraph> {
        Graph::new(MockGraphImpl::new(Arc::clone(&self.device)), options)
    }
}
