//! `DriverEvent`: an event of one backend instance.

use std::{
    fmt,
    sync::{Arc, Mutex, Weak},
};

use accel_graph_api::{EventOptions, backend_kit::stream_order::OrderStamp};

use crate::{Driver, capture::CaptureEntry};

/// An event of a driver-based backend.
pub struct DriverEvent<D: Driver> {
    pub(crate) raw: D::Event,
    pub(crate) instance: u64,
    pub(crate) options: EventOptions,
    /// The capture its last record was made in (a wait on it forks the waiting stream into
    /// that capture).
    pub(crate) recorded_in: Mutex<Weak<CaptureEntry<D>>>,
    /// What its last record knew of stream order: a wait on it merges this into the waiting
    /// stream's view.
    pub(crate) stamp: Mutex<OrderStamp>,
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

    pub(crate) fn set_recorded_in(&self, capture: Option<&Arc<CaptureEntry<D>>>) {
        *self.recorded_in.lock().unwrap_or_else(|e| e.into_inner()) =
            capture.map_or_else(Weak::new, Arc::downgrade);
    }

    pub(crate) fn set_stamp(&self, stamp: OrderStamp) {
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
    }

    /// What the event's last record knew of stream order.
    pub(crate) fn stamp(&self) -> OrderStamp {
        self.stamp.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The capture the event was last recorded in, if that capture is still going on.
    pub(crate) fn recorded_in(&self) -> Option<Arc<CaptureEntry<D>>> {
        self.recorded_in
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .upgrade()
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
