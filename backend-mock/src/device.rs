//! `MockDevice`: the simulated device, as a [`Driver`]: its state, capabilities, capture
//! domain and the device-wide calls.

use std::sync::{
    Mutex, Weak,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use accel_graph_api::{
    BackendKind, Capabilities, LaunchLimits, backend_kit::stream_order::ReuseRule,
};
use accel_graph_driver::{Driver, DriverError, DriverResult, software::SoftwareCapture};

use crate::{
    MockConfig, counters::Counters, faults::Faults, memory::AddressSpace, ops::MockCommand,
    sanitizer::RaceState, stream::MockStreamState,
};

/// Capture domains of devices that share none (the high bit keeps them apart from the
/// numbers of [`MockConfig::shared_device`]).
static NEXT_PRIVATE_DOMAIN: AtomicU64 = AtomicU64::new(1 << 63);

/// The simulated device: the mock backend's driver. Reach it through
/// [`MockBackend::driver`](accel_graph_driver::DriverBackend::driver) (or the shortcuts on
/// [`crate::MockBackend`]).
pub struct MockDevice {
    pub(crate) config: MockConfig,
    domain: u64,
    pub(crate) memory: AddressSpace,
    pub(crate) capture: SoftwareCapture<MockCommand>,
    /// The captures as CUDA's device-side mode checks see them.
    pub(crate) device_captures: crate::capture::DeviceCaptures,
    pub(crate) counters: Counters,
    pub(crate) faults: Faults,
    /// The race sanitizer's clocks and log.
    pub(crate) races: RaceState,
    /// Virtual time in microseconds: every command run advances it by one.
    pub(crate) clock: AtomicU64,
    /// Set by an injected device fault: every later call fails.
    broken: AtomicBool,
    pub(crate) next_stream: AtomicU64,
    /// Streams stalled by [`crate::MockBackend::stall_stream`].
    pub(crate) stalled: Mutex<Vec<Weak<MockStreamState>>>,
}

impl MockDevice {
    /// A device set up by `config`; errors when its address space cannot hold an allocation.
    pub(crate) fn new(config: MockConfig) -> accel_graph_api::Result<Self> {
        let memory = AddressSpace::new(
            config.base_address,
            config.memory_capacity,
            config.poison_new_memory,
        )?;
        let domain = match config.shared_device {
            Some(device) => u64::from(device),
            None => NEXT_PRIVATE_DOMAIN.fetch_add(1, Ordering::Relaxed),
        };
        let race_sanitizer = config.race_sanitizer;
        Ok(MockDevice {
            config,
            domain,
            memory,
            // The mock is where the driver layer's handling of CUDA's races is checked.
            capture: SoftwareCapture::modelling_driver_races(),
            device_captures: Default::default(),
            counters: Counters::default(),
            faults: Faults::default(),
            races: RaceState::new(race_sanitizer),
            clock: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            next_stream: AtomicU64::new(1),
            stalled: Mutex::new(Vec::new()),
        })
    }

    /// The configuration the device was made with.
    pub fn config(&self) -> &MockConfig {
        &self.config
    }

    /// `Err` once an injected device fault made the device unusable.
    pub(crate) fn alive(&self) -> DriverResult<()> {
        if self.broken.load(Ordering::Acquire) {
            Err(crate::error::device_fault())
        } else {
            Ok(())
        }
    }

    /// `Err` when a call that waits for `stream`'s work (`operation`) cannot finish: the
    /// device is broken, or the stream is stalled.
    pub(crate) fn check_can_wait(
        &self,
        stream: &crate::MockStreamState,
        operation: &str,
    ) -> DriverResult<()> {
        self.alive()?;
        self.unsafe_call(operation, false)?;
        if stream.is_stalled() {
            return Err(crate::error::stalled(operation));
        }
        Ok(())
    }

    /// Makes the device unusable from now on (an injected device fault).
    pub(crate) fn break_device(&self) {
        self.broken.store(true, Ordering::Release);
    }

    /// Advances the virtual clock by one command; returns the new time.
    pub(crate) fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    }

    /// An injected fault at `site`, as the error the driver layer passes on.
    pub(crate) fn fault(&self, site: crate::FaultSite) -> DriverResult<()> {
        self.faults.check(site).map_err(DriverError::Api)
    }
}

impl Driver for MockDevice {
    const KIND: BackendKind = BackendKind::Mock;

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::none("mock");
        caps.host_callbacks = true;
        caps.multi_stream_capture = true;
        caps.uncapturable_default_stream = true;
        caps.capture_modes_enforced = true;
        caps.event_timing = true;
        // Graph editing in software: records patched in place, children inlined, conditions
        // read from simulated memory when their node runs.
        caps.graph_update = true;
        caps.child_graphs = true;
        caps.conditional_nodes = true;
        caps.conditional_if_else = true;
        // A GPU's launch limits, not the host's: a test on the mock refuses the launch a
        // device would.
        caps.launch_limits = LaunchLimits::CUDA;
        caps
    }

    fn capture_domain(&self) -> u64 {
        self.domain
    }

    fn bind(&self) -> DriverResult<()> {
        self.alive()
    }

    fn synchronize(&self) -> DriverResult<()> {
        self.alive()?;
        self.unsafe_call("synchronize", true)?;
        // Work runs synchronously, so there is nothing to wait for, except stalled streams,
        // which would never finish.
        let mut stalled = self.stalled.lock().unwrap_or_else(|e| e.into_inner());
        stalled.retain(|s| s.upgrade().is_some_and(|s| s.is_stalled()));
        if !stalled.is_empty() {
            return Err(crate::error::stalled("synchronize"));
        }
        self.host_waited_for_device();
        Ok(())
    }

    /// The fault switch [`MockConfig::unordered_pool_reuse`].
    fn pool_reuse_rule(&self) -> ReuseRule {
        if self.config.unordered_pool_reuse {
            ReuseRule::Unordered
        } else {
            ReuseRule::StreamOrdered
        }
    }

    fn on_alloc(&self, _bytes: usize) -> DriverResult<()> {
        self.alive()?;
        self.fault(crate::FaultSite::Alloc)?;
        Counters::bump(&self.counters.allocations, 1);
        Ok(())
    }
}

impl std::fmt::Debug for MockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockDevice")
            .field("domain", &self.domain)
            .field("config", &self.config)
            .finish()
    }
}
