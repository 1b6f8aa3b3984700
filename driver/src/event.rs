//! `DriverEvent`: an event of one backend instance.
//!
//! # Events recorded in a capture
//!
//! An event recorded in a capture refers to that capture inside the driver until it is
//! recorded again, and the capture refers to it: a record, wait or destruction of the event
//! updates the capture, and the capture's growth and end update the event. The CUDA driver does
//! not synchronise the two: an event re-recorded on another stream while another thread ends
//! or grows the capture it was last recorded in crashes the process inside
//! `cuEventRecordWithFlags` (a segmentation fault at a small address, on H100 and H200; see
//! `backend-cuda/probes/`). So a driver call on an event whose last record was made in a
//! capture still going on is made in the instance's turn to call into captures
//! ([`crate::stream::Issuing`]), which every call into a capture and every capture's end
//! hold.

use std::{
    fmt,
    mem::ManuallyDrop,
    sync::{Arc, Mutex, MutexGuard, Weak},
};

use accel_graph_api::{EventOptions, Result, backend_kit::stream_order::OrderStamp};

use crate::{
    Driver,
    capture::CaptureEntry,
    stream::{Issuing, Turn},
};

/// An event of a driver-based backend.
pub struct DriverEvent<D: Driver> {
    /// Dropped in `Drop`, in the turn if a capture still refers to it. Shared with the graphs
    /// whose external event nodes record or wait on it: the driver's event lives as long as
    /// the last of them.
    pub(crate) raw: ManuallyDrop<Arc<D::Event>>,
    pub(crate) instance: u64,
    pub(crate) options: EventOptions,
    /// The capture its last record was made in (a wait on it forks the waiting stream into
    /// that capture). Held around driver calls on the event ([`DriverEvent::linked`]).
    recorded_in: Mutex<Link<D>>,
    /// The instance's turn to call into captures (see the module documentation).
    turn: Turn,
    /// What its last record knew of stream order: a wait on it merges this into the waiting
    /// stream's view.
    pub(crate) stamp: Mutex<OrderStamp>,
}

/// A driver call on an event in progress: no other call on the event runs meanwhile, and, if
/// the event's last record was made in a capture still going on, the call is made in the
/// instance's turn to call into captures (see the module documentation).
pub(crate) struct LinkedCall<'a, D: Driver> {
    /// Dropped before the turn (fields drop in order).
    recorded_in: MutexGuard<'a, Link<D>>,
    _turn: Option<Issuing>,
}

/// Where an event's last record was made: the capture, and the driver's number of the graph
/// it was recorded into (the capture's own, or a conditional body's).
struct Link<D: Driver> {
    capture: Weak<CaptureEntry<D>>,
    graph: Option<u64>,
}

impl<D: Driver> Link<D> {
    fn none() -> Self {
        Link {
            capture: Weak::new(),
            graph: None,
        }
    }
}

impl<D: Driver> LinkedCall<'_, D> {
    /// The capture the event was last recorded in, if that capture is still going on: the
    /// record the driver call made now meets.
    pub(crate) fn capture(&self) -> Option<Arc<CaptureEntry<D>>> {
        self.recorded_in.capture.upgrade()
    }

    /// The driver's number of the graph the event's last record was made into, if it was made
    /// in a capture.
    pub(crate) fn graph(&self) -> Option<u64> {
        self.recorded_in.graph
    }

    /// Records where the event's new record was made (after the driver recorded it).
    pub(crate) fn set_recorded_in(
        &mut self,
        capture: Option<&Arc<CaptureEntry<D>>>,
        graph: Option<u64>,
    ) {
        *self.recorded_in = Link {
            capture: capture.map_or_else(Weak::new, Arc::downgrade),
            graph: capture.and(graph),
        };
    }
}

impl<D: Driver> DriverEvent<D> {
    pub(crate) fn new(raw: D::Event, instance: u64, options: EventOptions, turn: Turn) -> Self {
        DriverEvent {
            raw: ManuallyDrop::new(Arc::new(raw)),
            instance,
            options,
            recorded_in: Mutex::new(Link::none()),
            turn,
            stamp: Mutex::default(),
        }
    }

    /// The driver's event, for native work.
    pub fn raw(&self) -> &D::Event {
        &self.raw
    }

    /// A hold on the driver's event, for a graph whose node names it (an external event's
    /// record or wait): the event is destroyed when the last hold goes.
    pub(crate) fn hold(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        Arc::clone(&*self.raw) as Arc<dyn std::any::Any + Send + Sync>
    }

    /// How the event was made.
    pub fn options(&self) -> EventOptions {
        self.options
    }

    /// Holds the event for a driver call that does not wait for device work (a record, a
    /// wait, a query): see the module documentation. Inside a host callback, a turn in use
    /// elsewhere is refused with [`accel_graph_api::GraphError::Unsupported`].
    pub(crate) fn linked(&self) -> Result<LinkedCall<'_, D>> {
        // The turn comes before the event's lock (a call holding the turn may be waiting for
        // the event's lock), so a link found without it is taken again in the turn.
        let mut turn = None;
        loop {
            // Only a `Weak` is kept under the lock: a poisoned one is as good as a sound one.
            let recorded_in = self.recorded_in.lock().unwrap_or_else(|e| e.into_inner());
            if turn.is_some() || recorded_in.capture.strong_count() == 0 {
                return Ok(LinkedCall {
                    recorded_in,
                    _turn: turn,
                });
            }
            drop(recorded_in);
            turn = Some(self.turn.take()?);
        }
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
            .capture
            .upgrade()
    }
}

impl<D: Driver> Drop for DriverEvent<D> {
    fn drop(&mut self) {
        let linked = self
            .recorded_in
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .capture
            .strong_count()
            > 0;
        // Destroying an event a capture still refers to updates that capture (see the module
        // documentation). Inside a host callback, where no call may wait, a turn in use
        // elsewhere is not waited for (CUDA permits no runtime call there anyway).
        let _turn = linked.then(|| self.turn.take().ok());
        // SAFETY: dropped once, here; nothing uses the event after `drop`.
        unsafe { ManuallyDrop::drop(&mut self.raw) };
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
