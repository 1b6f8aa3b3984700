//! `DriverEvent`: an event of one backend instance.

use std::fmt;

use accel_graph_api::EventOptions;

use crate::Driver;

/// An event of a driver-based backend.
pub struct DriverEvent<D: Driver> {
    pub(crate) raw: D::Event,
    pub(crate) instance: u64,
    pub(crate) options: EventOptions,
}

impl<D: Driver> DriverEvent<D> {
    /// The driver's event, for native work.
    pub fn raw(&self) -> &D::Event {
        &self.raw
    }

    /// How the event was made.
    pub fn options(&self) -> EventOptions {
        self.options
    }
}

impl<D: Driver> fmt::Debug for DriverEvent<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("backend", &D::KIND)
            .field("options", &self.options)
            .field("instance", &self.instance)
            .finish()
    }
}
