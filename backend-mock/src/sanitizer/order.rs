//! The order of the device's eager work, as vector clocks: per stream, per event and for the
//! host. Kept at the device level on purpose, apart from the driver layer's own bookkeeping,
//! since the sanitizer is there to check that layer too.
//!
//! * Work issued on a stream runs after that stream's earlier work, and after everything the
//!   host had waited for when it issued the work (a host wait: a synchronize, a blocking copy,
//!   an event that completed).
//! * Recording an event marks the stream's position; a stream waiting on it runs its later
//!   work after that position.
//! * A device-wide synchronize orders everything before it before everything after it: it
//!   starts a new *generation*, so the clocks restart empty and older accesses count as
//!   ordered, and no clock grows past the streams used between two synchronizes.
//!
//! Work queued on a stalled stream is ordered when it is *issued* (what the host knew then,
//! the waits issued before it on that stream) but touches memory when it *runs*, on resume:
//! each queued command carries the order it was issued with, a [`Ticket`].
#![deny(clippy::arithmetic_side_effects)]

use std::sync::{Mutex, MutexGuard};

use super::clock::{Epoch, VectorClock};

/// The device-wide part: what the host has waited for.
#[derive(Debug)]
pub(crate) struct DeviceOrder {
    /// Bumped by each device-wide synchronize.
    pub(crate) generation: u64,
    /// The stream work the host has waited for, in this generation.
    host: VectorClock,
    /// Bumped whenever `host` grows, so a stream catches up only then.
    host_version: u64,
}

impl Default for DeviceOrder {
    fn default() -> Self {
        // Generation 0 is "never": the state of streams and events not used yet.
        DeviceOrder {
            generation: 1,
            host: VectorClock::default(),
            host_version: 1,
        }
    }
}

impl DeviceOrder {
    /// The host waited for the work `clock` stands for.
    pub(crate) fn host_waited(&mut self, clock: &VectorClock) {
        self.host.join(clock);
        self.host_version = self.host_version.saturating_add(1);
    }

    /// A device-wide synchronize: everything so far is done before anything issued later.
    pub(crate) fn synchronized(&mut self) {
        self.generation = self.generation.saturating_add(1);
        self.host.clear();
        self.host_version = self.host_version.saturating_add(1);
    }
}

/// One stream's order: the tick of its current work and what it runs after.
#[derive(Debug)]
pub(crate) struct StreamOrder {
    generation: u64,
    host_version: u64,
    /// The tick of the stream's work since its last release (an event record, a host wait).
    tick: u64,
    /// Other streams' work this stream's next work runs after.
    knows: VectorClock,
}

impl Default for StreamOrder {
    fn default() -> Self {
        StreamOrder {
            generation: 0,
            host_version: 0,
            tick: 1,
            knows: VectorClock::default(),
        }
    }
}

impl StreamOrder {
    /// Work is being issued: it runs after everything the host waited for.
    pub(crate) fn catch_up(&mut self, device: &DeviceOrder) {
        if self.generation != device.generation {
            self.generation = device.generation;
            self.knows.clear();
        }
        if self.host_version != device.host_version {
            self.host_version = device.host_version;
            self.knows.join(&device.host);
        }
    }

    /// Later work gets a new tick, which marks made up to now (events recorded, host waits)
    /// do not cover.
    pub(crate) fn advance(&mut self) {
        self.tick = self.tick.saturating_add(1);
    }

    /// The stream's next work also runs after `clock` (a wait on an event).
    pub(crate) fn wait(&mut self, clock: &VectorClock) {
        self.knows.join(clock);
    }

    /// The order of work issued now on `stream`.
    pub(crate) fn view(&self, stream: u64) -> View<'_> {
        View {
            generation: self.generation,
            stream,
            tick: self.tick,
            knows: &self.knows,
        }
    }

    /// The order of work issued now, kept for when it runs.
    pub(crate) fn ticket(&self, stream: u64) -> Ticket {
        Ticket {
            generation: self.generation,
            stream,
            tick: self.tick,
            knows: self.knows.clone(),
        }
    }
}

/// The order a command queued on a stalled stream was issued with.
#[derive(Debug)]
pub(crate) struct Ticket {
    generation: u64,
    stream: u64,
    tick: u64,
    knows: VectorClock,
}

impl Ticket {
    /// The order the command runs with.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            generation: self.generation,
            stream: self.stream,
            tick: self.tick,
            knows: &self.knows,
        }
    }
}

/// The order of one unit of work: what it runs after, and the epoch of its accesses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    generation: u64,
    pub(crate) stream: u64,
    tick: u64,
    knows: &'a VectorClock,
}

impl View<'_> {
    /// The epoch of the work's accesses.
    pub(crate) fn epoch(&self) -> Epoch {
        Epoch {
            generation: self.generation,
            component: self.stream,
            tick: self.tick,
        }
    }

    /// True when an access at `earlier` happened before this work: in an older generation
    /// (a device synchronize came between), on the same stream (stream order), or known.
    pub(crate) fn orders(&self, earlier: &Epoch) -> bool {
        earlier.generation < self.generation
            || earlier.component == self.stream
            || earlier.tick <= self.knows.get(earlier.component)
    }

    /// What an event recorded at this work's position marks.
    pub(crate) fn marked(&self) -> EventMark {
        let mut clock = self.knows.clone();
        clock.raise(self.stream, self.tick);
        EventMark {
            generation: self.generation,
            clock,
        }
    }
}

/// What an event's last record marked: the recording stream's work up to it.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventMark {
    /// 0 until recorded.
    generation: u64,
    pub(crate) clock: VectorClock,
}

impl EventMark {
    /// The marked work, unless a device synchronize since ordered it anyway.
    pub(crate) fn clock(&self, device: &DeviceOrder) -> Option<&VectorClock> {
        (self.generation == device.generation).then_some(&self.clock)
    }
}

/// An event's mark, behind the lock it is read and written under.
#[derive(Debug, Default)]
pub(crate) struct EventClock(Mutex<EventMark>);

impl EventClock {
    pub(crate) fn lock(&self) -> MutexGuard<'_, EventMark> {
        // Replaced whole or read: a panic elsewhere cannot tear it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A stream's order, behind its lock.
#[derive(Debug, Default)]
pub(crate) struct StreamClock(Mutex<StreamOrder>);

impl StreamClock {
    pub(crate) fn lock(&self) -> MutexGuard<'_, StreamOrder> {
        // Updated by steps that cannot panic half-way.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
