//! `MockBackend`: the backend over the simulated device, the names of its types, and its extras
//! for users' tests.

use accel_graph_api::{GraphError, Result};
use accel_graph_driver::DriverBackend;

use crate::{FaultSite, MockConfig, MockCounters, MockDevice};

accel_graph_driver::backend_newtype! {
    /// A deterministic simulated accelerator; clones share the device.
    ///
    /// See the [crate documentation](crate) for the model. Beyond
    /// [`Backend`](accel_graph_api::Backend), it offers [counters](MockBackend::counters),
    /// [fault injection](MockBackend::inject_fault) and [stalled
    /// streams](MockBackend::stall_stream) for users' own tests.
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_mock::MockBackend;
    /// let backend = MockBackend::new();
    /// assert_eq!(backend.capabilities().device_name, "mock");
    /// assert_eq!(backend.clone().instance_id(), backend.instance_id());
    /// assert_ne!(MockBackend::new().instance_id(), backend.instance_id());
    /// ```
    pub struct MockBackend(MockDevice);
}

accel_graph_driver::driver_type_aliases! {
    MockDevice, "mock": MockBuffer, MockStream, MockEvent, MockGraphImpl, MockGraph
}

impl Default for MockBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MockBackend {
    /// A new simulated device with the default [`MockConfig`] (a device of its own).
    pub fn new() -> Self {
        match Self::with_config(MockConfig::default()) {
            Ok(backend) => backend,
            Err(e) => unreachable!("the default configuration is valid: {e}"),
        }
    }

    /// A new instance set up by `config`. Errors with
    /// [`GraphError::BackendUnavailable`] when the configured address space cannot hold an
    /// allocation.
    pub fn with_config(config: MockConfig) -> Result<Self> {
        Ok(MockBackend(DriverBackend::new(MockDevice::new(config)?)))
    }

    /// The configuration the device was made with.
    pub fn config(&self) -> &MockConfig {
        self.driver().config()
    }

    /// The activity counters (shared by clones).
    pub fn counters(&self) -> MockCounters {
        self.driver().counters.snapshot()
    }

    /// Sets every counter back to zero.
    pub fn reset_counters(&self) {
        self.driver().counters.reset()
    }

    /// The data races the race sanitizer found since the instance was made (or
    /// [`MockBackend::clear_race_reports`]), in the order found; each also failed the work
    /// that raced with [`GraphError::DataRace`]. Empty when the sanitizer is off
    /// ([`MockConfig::race_sanitizer`]). See [`crate::RaceReport`] for an example.
    pub fn race_reports(&self) -> Vec<crate::RaceReport> {
        self.driver().races.reports()
    }

    /// Forgets the races found so far.
    pub fn clear_race_reports(&self) {
        self.driver().races.clear_reports()
    }

    /// Makes the `nth` call (1-based, counted from now) at `site` fail once with
    /// [`GraphError::InjectedFault`] (or, for [`FaultSite::DeviceFault`], break the device
    /// for good); `nth == 0` disarms the site. Arming a site again replaces its earlier
    /// setting.
    ///
    /// ```
    /// use accel_graph_api::{Backend, GraphError};
    /// use accel_graph_mock::{FaultSite, MockBackend};
    /// let backend = MockBackend::new();
    /// backend.inject_fault(FaultSite::Alloc, 2);
    /// assert!(backend.alloc::<f32>(1).is_ok());
    /// assert!(matches!(
    ///     backend.alloc::<f32>(1),
    ///     Err(GraphError::InjectedFault { operation: "alloc", count: 2 })
    /// ));
    /// assert!(backend.alloc::<f32>(1).is_ok()); // once only
    /// ```
    pub fn inject_fault(&self, site: FaultSite, nth: u64) {
        self.driver().faults.arm(site, nth)
    }

    /// Disarms every injected fault.
    pub fn clear_faults(&self) {
        self.driver().faults.clear()
    }

    /// Stalls `stream`, a stand-in for a long-running kernel: work issued on it queues (and
    /// events recorded on it stay pending) until [`MockBackend::resume_stream`]. Calls that
    /// would wait for it (synchronize, download on it) fail instead of blocking forever.
    ///
    /// ```
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_mock::MockBackend;
    /// let backend = MockBackend::new();
    /// let x = backend.alloc_from(&[1.0])?;
    /// let side = backend.new_stream()?;
    /// backend.stall_stream(&side)?;
    /// let _on_side = backend.use_stream(&side)?;
    /// backend.add_scalar(&x, 1.0)?; // queued
    /// assert_eq!(backend.counters().eager_ops, 0);
    /// // A download on the stream would wait for the add forever: it fails instead.
    /// assert!(backend.download(&x).is_err());
    /// backend.resume_stream(&side)?;
    /// assert_eq!(backend.download(&x)?, vec![2.0]);
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn stall_stream(&self, stream: &MockStream) -> Result<()> {
        self.own(stream)?;
        self.driver().stall(stream.raw());
        Ok(())
    }

    /// Resumes a stream stalled by [`MockBackend::stall_stream`]: its queued work runs now,
    /// in order.
    pub fn resume_stream(&self, stream: &MockStream) -> Result<()> {
        self.own(stream)?;
        self.driver().resume(stream.raw()).map_err(|e| match e {
            accel_graph_driver::DriverError::Api(e) => e,
            other => GraphError::Driver {
                backend: "mock",
                code: -1,
                name: "resume_stream".to_owned(),
                message: other.to_string(),
            },
        })
    }

    fn own(&self, stream: &MockStream) -> Result<()> {
        if stream.instance_id() == accel_graph_api::Backend::instance_id(self) {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "stream" })
        }
    }
}
