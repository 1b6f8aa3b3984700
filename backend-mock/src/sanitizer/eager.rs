//! The eager half of the sanitizer: every unit of work outside a graph is checked, as it
//! runs, against the access histories of the blocks it touches, in the device's order
//! ([`super::order`]), then remembered there.

use std::{
    ops::Range,
    sync::{Arc, Mutex, MutexGuard},
};

use accel_graph_api::{AccessKind, AccessSource, RaceAccess};
use accel_graph_driver::{DriverError, DriverResult};

use super::{
    access::{ByteSpan, Work, accesses},
    history::{History, Record},
    order::{DeviceOrder, Ticket, View},
    replay::ReplayAccesses,
    report::RaceReport,
};
use crate::{
    MockDevice, counters::Counters, event::MockEventState, memory::MockBlock, ops::MockCommand,
    stream::MockStreamState,
};

/// What an eager access is reported as.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    work: Work,
    stream: u64,
    source: AccessSource,
}

impl Site {
    fn report(&self, address: u64, bytes: Range<usize>, kind: AccessKind) -> RaceAccess {
        RaceAccess {
            label: self.work.label(),
            stream: self.stream,
            address,
            bytes,
            kind,
            source: self.source,
        }
    }
}

/// A block's eager access history, behind its lock.
#[derive(Debug, Default)]
pub(crate) struct BlockHistory(Mutex<History<Site>>);

impl BlockHistory {
    fn lock(&self) -> MutexGuard<'_, History<Site>> {
        // Updated by steps that cannot panic half-way.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sanitizer's device-wide state.
#[derive(Debug)]
pub(crate) struct RaceState {
    enabled: bool,
    /// Taken first by every check, so the clocks and histories change one unit of work at a
    /// time.
    device: Mutex<DeviceOrder>,
    log: Mutex<Vec<RaceReport>>,
}

impl RaceState {
    pub(crate) fn new(enabled: bool) -> Self {
        RaceState {
            enabled,
            device: Mutex::default(),
            log: Mutex::default(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    fn device(&self) -> MutexGuard<'_, DeviceOrder> {
        // Updated by steps that cannot panic half-way.
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self) -> MutexGuard<'_, Vec<RaceReport>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The races found so far.
    pub(crate) fn reports(&self) -> Vec<RaceReport> {
        self.log().clone()
    }

    /// Forgets the races found so far.
    pub(crate) fn clear_reports(&self) {
        self.log().clear();
    }
}

/// The order a command queued on a stalled stream was issued with.
#[derive(Debug, Clone)]
pub(crate) struct QueuedOrder {
    ticket: Arc<Ticket>,
    /// The node, for the nodes of a queued replay.
    node: Option<usize>,
}

/// A command queued on a stalled stream.
pub(crate) struct Queued {
    pub(crate) command: MockCommand,
    pub(crate) order: Option<QueuedOrder>,
}

/// One access of a unit of work, as checked.
struct Checked<'a> {
    block: &'a MockBlock,
    bytes: Range<usize>,
    kind: AccessKind,
    site: Site,
}

/// Checks the accesses `make` lists (all of one unit of work, ordered by `view`) against their
/// blocks' histories and returns the first race, or remembers them all if none races. A block
/// returned to the device is left to the use-after-free check, which fails the work next.
fn race_or_record<'a, I>(view: &View<'_>, make: impl Fn() -> I) -> Option<RaceReport>
where
    I: Iterator<Item = Checked<'a>>,
{
    if make().any(|a| a.block.is_released()) {
        return None;
    }
    let ordered = |e: &_| view.orders(e);
    let race = |r: &Record<Site>, a: Checked<'_>| RaceReport {
        first: r.site.report(a.block.address(), r.bytes.clone(), r.kind),
        second: a.site.report(a.block.address(), a.bytes, a.kind),
    };
    let mut accesses = make();
    if let (Some(a), None) = (accesses.next(), accesses.next()) {
        // One access (most work): checked and remembered under one lock.
        let mut history = a.block.accesses.lock();
        if let Some(r) = history.conflict(&a.bytes, a.kind, ordered) {
            return Some(race(r, a));
        }
        let record = Record {
            epoch: view.epoch(),
            bytes: a.bytes,
            kind: a.kind,
            site: a.site,
        };
        history.record(record, ordered);
        return None;
    }
    for a in make() {
        let history = a.block.accesses.lock();
        if let Some(r) = history.conflict(&a.bytes, a.kind, ordered) {
            return Some(race(r, a));
        }
    }
    for a in make() {
        a.block.accesses.lock().record(
            Record {
                epoch: view.epoch(),
                bytes: a.bytes,
                kind: a.kind,
                site: a.site,
            },
            ordered,
        );
    }
    None
}

/// The accesses of one eager command.
fn command_accesses<'a>(
    command: &'a MockCommand,
    work: Work,
    stream: u64,
    source: AccessSource,
) -> impl Iterator<Item = Checked<'a>> {
    accesses(command).map(move |a| Checked {
        block: a.block,
        bytes: a.bytes,
        kind: a.kind,
        site: Site {
            work: work.clone(),
            stream,
            source,
        },
    })
}

impl MockDevice {
    /// Logs and counts `report`, and makes it the error of the work that raced.
    pub(super) fn race_found(&self, report: RaceReport) -> DriverError {
        Counters::bump(&self.counters.data_races, 1);
        tracing::warn!(first = %report.first, second = %report.second, "data race");
        self.races.log().push(report.clone());
        DriverError::Api(report.into())
    }

    /// Checks eager `command` on `stream` before it runs: queued with `order` (on a stalled
    /// stream, now resumed), or issued now.
    pub(crate) fn sanitize_eager(
        &self,
        stream: &MockStreamState,
        command: &MockCommand,
        order: Option<&QueuedOrder>,
    ) -> DriverResult<()> {
        if !self.races.enabled {
            return Ok(());
        }
        let record = match command {
            MockCommand::RecordEvent(event) => Some(event),
            _ => None,
        };
        let work = Work::of(command);
        if work.is_none() && record.is_none() {
            return Ok(());
        }
        let device = self.races.device();
        let race = |view: &View<'_>, source| {
            work.as_ref().and_then(|work| {
                race_or_record(view, || {
                    command_accesses(command, work.clone(), view.stream, source)
                })
            })
        };
        match order {
            Some(queued) => {
                let view = queued.ticket.view();
                let source = match queued.node {
                    Some(node) => AccessSource::Replay { node },
                    None => AccessSource::Eager,
                };
                if let Some(report) = race(&view, source) {
                    return Err(self.race_found(report));
                }
                if let Some(event) = record {
                    *event.clock.lock() = view.marked();
                }
            }
            None => {
                let mut st = stream.clock.lock();
                st.catch_up(&device);
                let view = st.view(stream.index());
                if let Some(report) = race(&view, AccessSource::Eager) {
                    return Err(self.race_found(report));
                }
                if let Some(event) = record {
                    *event.clock.lock() = view.marked();
                    st.advance();
                }
            }
        }
        Ok(())
    }

    /// The order `command`, being queued on stalled `stream`, is issued with.
    pub(crate) fn queued_order(
        &self,
        stream: &MockStreamState,
        command: &MockCommand,
    ) -> Option<QueuedOrder> {
        let record = matches!(command, MockCommand::RecordEvent(_));
        if !self.races.enabled || (Work::of(command).is_none() && !record) {
            return None;
        }
        let device = self.races.device();
        let mut st = stream.clock.lock();
        st.catch_up(&device);
        let ticket = Arc::new(st.ticket(stream.index()));
        if record {
            st.advance();
        }
        Some(QueuedOrder { ticket, node: None })
    }

    /// `stream`'s later work runs after what `event` marks (an eager `wait_event`).
    pub(crate) fn sanitize_wait(&self, stream: &MockStreamState, event: &MockEventState) {
        if !self.races.enabled {
            return;
        }
        let device = self.races.device();
        let mark = event.clock.lock();
        if let Some(clock) = mark.clock(&device) {
            let mut st = stream.clock.lock();
            st.catch_up(&device);
            st.wait(clock);
        }
    }

    /// The host waited for `stream`'s work so far (a stream synchronize).
    pub(crate) fn host_waited_for_stream(&self, stream: &MockStreamState) {
        if !self.races.enabled {
            return;
        }
        let mut device = self.races.device();
        let mut st = stream.clock.lock();
        st.catch_up(&device);
        let mark = st.view(stream.index()).marked();
        st.advance();
        device.host_waited(&mark.clock);
    }

    /// The host waited for what `event` marks (an event synchronize, or a query that found it
    /// complete).
    pub(crate) fn host_waited_for_event(&self, event: &MockEventState) {
        if !self.races.enabled {
            return;
        }
        let mut device = self.races.device();
        let clock = event.clock.lock().clock(&device).cloned();
        if let Some(clock) = clock {
            device.host_waited(&clock);
        }
    }

    /// The host waited for all work (a device-wide synchronize).
    pub(crate) fn host_waited_for_device(&self) {
        if self.races.enabled {
            self.races.device().synchronized();
        }
    }

    /// Checks a blocking copy of `bytes` of `block` on `stream` (`Write` for an upload,
    /// `Read` for a download) before it runs; the host then waits for the stream, as the copy
    /// does.
    pub(crate) fn sanitize_copy(
        &self,
        stream: &MockStreamState,
        block: &MockBlock,
        bytes: Range<usize>,
        kind: AccessKind,
    ) -> DriverResult<()> {
        if !self.races.enabled {
            return Ok(());
        }
        let span = ByteSpan::of(block, bytes.clone());
        let work = match kind {
            AccessKind::Read => Work::Download(span),
            _ => Work::Upload(span),
        };
        let mut device = self.races.device();
        let mut st = stream.clock.lock();
        st.catch_up(&device);
        let view = st.view(stream.index());
        let access = || {
            std::iter::once(Checked {
                block,
                bytes: bytes.clone(),
                kind,
                site: Site {
                    work: work.clone(),
                    stream: view.stream,
                    source: AccessSource::Eager,
                },
            })
        };
        if let Some(report) = race_or_record(&view, access) {
            return Err(self.race_found(report));
        }
        let mark = view.marked();
        st.advance();
        device.host_waited(&mark.clock);
        Ok(())
    }

    /// Checks a replay on `stream` — one unit of work touching everything its nodes touch —
    /// before it runs.
    pub(crate) fn sanitize_replay(
        &self,
        stream: &MockStreamState,
        replay: &ReplayAccesses,
    ) -> DriverResult<()> {
        if !self.races.enabled {
            return Ok(());
        }
        let device = self.races.device();
        let mut st = stream.clock.lock();
        st.catch_up(&device);
        for event in &replay.waits {
            if let Some(clock) = event.clock.lock().clock(&device) {
                st.wait(clock);
            }
        }
        let view = st.view(stream.index());
        let access = || {
            replay.accesses.iter().map(|a| Checked {
                block: &a.block,
                bytes: a.bytes.clone(),
                kind: a.kind,
                site: Site {
                    work: a.work.clone(),
                    stream: view.stream,
                    source: AccessSource::Replay { node: a.node },
                },
            })
        };
        if let Some(report) = race_or_record(&view, access) {
            return Err(self.race_found(report));
        }
        if !replay.records.is_empty() {
            let mark = view.marked();
            for event in &replay.records {
                *event.clock.lock() = mark.clone();
            }
            st.advance();
        }
        Ok(())
    }

    /// The order a replay being queued on stalled `stream` is issued with: its nodes run with
    /// it, each as node `n` of the replay.
    pub(crate) fn queued_replay_order(
        &self,
        stream: &MockStreamState,
        replay: &ReplayAccesses,
    ) -> Option<Arc<Ticket>> {
        if !self.races.enabled {
            return None;
        }
        let device = self.races.device();
        let mut st = stream.clock.lock();
        st.catch_up(&device);
        for event in &replay.waits {
            if let Some(clock) = event.clock.lock().clock(&device) {
                st.wait(clock);
            }
        }
        let ticket = Arc::new(st.ticket(stream.index()));
        if !replay.records.is_empty() {
            st.advance();
        }
        Some(ticket)
    }
}

impl QueuedOrder {
    /// The order of node `node` of a queued replay.
    pub(crate) fn replay_node(ticket: &Arc<Ticket>, node: usize) -> Self {
        QueuedOrder {
            ticket: Arc::clone(ticket),
            node: Some(node),
        }
    }
}
