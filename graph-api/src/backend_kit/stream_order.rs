//! Stream order as the library knows it: a vector clock per stream, so that a pool block freed
//! on one stream is handed to an allocation on another stream only when that allocation is
//! known to run after every use of the block.
//!
//! # The model
//!
//! * A process-wide counter hands out *ticks*: every tick is unique and later ticks are taken
//!   later (an atomic read-modify-write always reads the last value, so a tick taken after
//!   another, in the happens-before sense, is larger).
//! * Each stream has a [`StreamClock`] with a *view*: for other streams, the latest tick it is
//!   known to run after. "Stream B knows tick `t` of stream X" means: every piece of work
//!   issued on X before tick `t` runs before the work issued on B from then on.
//! * Recording an event on stream X takes a fresh tick and snapshots X's view plus
//!   `(X, tick)` into an [`OrderStamp`]; waiting on the event merges the stamp into the
//!   waiting stream's view. In a capture that wait is a fork or join edge of the graph, so the
//!   view then describes the graph's dependencies, as CUDA's stream capture builds them.
//! * A [`FreePoint`] is taken when a pool block is freed: a fresh tick, and the streams that
//!   may still use the block (the stream it was allocated on, and every stream
//!   `record_stream` named). An allocation on stream B may take the block iff, for each of
//!   those streams X, B is X, B knows a tick of X after the free, or X's work up to the free
//!   has completed ([`StreamOrder::device_completed_before`],
//!   [`StreamClock::completed_before`], [`OrderStamp::completed`]: synchronizes, which never
//!   run during a capture of the device, so they never cover a capture's own frees).
//!
//! What is not tracked reads as unordered: knowledge is only ever dropped (views forget
//! streams that were dropped), which can only refuse a reuse, never allow a wrong one.
#![deny(clippy::arithmetic_side_effects)]

use std::sync::{
    Arc, Mutex, MutexGuard, Weak,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

/// The next tick; 0 is never handed out, so "known up to 0" means "nothing known".
static NEXT_TICK: AtomicU64 = AtomicU64::new(1);
/// Serial numbers of streams, unique in the process (drivers reuse raw handles).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A fresh tick, larger than every tick taken before it.
fn now() -> u64 {
    NEXT_TICK.fetch_add(1, Ordering::AcqRel)
}

/// Which free pool blocks an allocation may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReuseRule {
    /// The library's rule (see the module documentation): a block freed on a stream goes to an
    /// allocation on that stream, or on another stream only when the order is known.
    #[default]
    StreamOrdered,
    /// A fault: any free block of the pool fits, whatever the streams, so unordered branches
    /// of a graph may share a block — silent corruption on a device that runs them
    /// concurrently. Only for testing what a race sanitizer or a suite catches.
    Unordered,
}

/// One tick of one stream that another stream, or an event, knows.
#[derive(Debug, Clone)]
struct Known {
    serial: u64,
    tick: u64,
    /// To forget the stream once it is dropped, and to mark its completion through a stamp.
    clock: Weak<StreamClock>,
}

/// Entries sorted by serial, at most one per stream.
fn merge_into(view: &mut Vec<Known>, own: u64, entries: &[Known]) {
    for known in entries.iter().filter(|k| k.serial != own) {
        match view.binary_search_by_key(&known.serial, |k| k.serial) {
            Ok(at) => {
                if let Some(slot) = view.get_mut(at) {
                    slot.tick = slot.tick.max(known.tick);
                }
            }
            Err(at) => view.insert(at, known.clone()),
        }
    }
    // Dropped streams issue no more work and cannot allocate: forget them, so a long-lived
    // stream's view holds the live streams only.
    view.retain(|k| k.clock.upgrade().is_some_and(|c| !c.is_retired()));
}

/// One stream's place in the order: its serial, its view of the other streams, and how far
/// its work is known to have completed.
#[derive(Debug)]
pub struct StreamClock {
    serial: u64,
    /// Work issued on the stream before this tick has completed on the device.
    completed: AtomicU64,
    /// Set when the stream is dropped.
    retired: AtomicBool,
    /// For other streams, the latest tick this stream is known to run after (by serial).
    view: Mutex<Vec<Known>>,
}

impl StreamClock {
    fn view(&self) -> MutexGuard<'_, Vec<Known>> {
        // Every update is a merge of sorted entries that cannot panic half-way.
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream's serial number, unique in the process.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The stream was dropped: views forget it from now on.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The stream's work issued before `tick` has completed (a stream synchronize or blocking
    /// copy that began at `tick` returned).
    pub fn completed_before(&self, tick: u64) {
        self.completed.fetch_max(tick, Ordering::AcqRel);
    }

    /// The tick of `serial` this stream knows (0: none).
    fn knows(view: &[Known], serial: u64) -> u64 {
        view.binary_search_by_key(&serial, |k| k.serial)
            .ok()
            .and_then(|at| view.get(at))
            .map_or(0, |k| k.tick)
    }
}

/// What an event's record knows: the recording stream's view and its own tick at the record.
/// Empty for an event never recorded (a wait on it orders nothing).
#[derive(Debug, Clone, Default)]
pub struct OrderStamp {
    entries: Vec<Known>,
}

impl OrderStamp {
    /// The event's work completed (an `event_synchronize` returned): so did the work of every
    /// stream it knows, up to the ticks it knows.
    pub fn completed(&self) {
        for known in &self.entries {
            if let Some(clock) = known.clock.upgrade() {
                clock.completed_before(known.tick);
            }
        }
    }
}

/// The point in stream order at which a pool block was freed: a tick, and the streams that may
/// still use the block.
#[derive(Debug, Clone)]
pub struct FreePoint {
    tick: u64,
    streams: Vec<Arc<StreamClock>>,
}

/// The stream order of one backend instance: its streams' clocks, device-wide completion and
/// the reuse rule its pools apply.
///
/// ```
/// use accel_graph_api::backend_kit::stream_order::{ReuseRule, StreamOrder};
/// let order = StreamOrder::new(ReuseRule::StreamOrdered);
/// let (a, b) = (order.new_stream(), order.new_stream());
/// let freed = order.free_point([&a]);
/// assert!(order.may_reuse(&freed, &a)); // the same stream: ordered by it
/// assert!(!order.may_reuse(&freed, &b)); // another stream, no known order
/// let event = order.stamp(&a); // record an event on a after the free ...
/// order.wait(&b, &event); // ... and make b wait on it
/// assert!(order.may_reuse(&freed, &b));
/// ```
#[derive(Debug, Default)]
pub struct StreamOrder {
    rule: ReuseRule,
    /// Work issued on any stream before this tick has completed (a device-wide synchronize).
    device_completed: AtomicU64,
}

impl StreamOrder {
    /// The order of an instance whose pools apply `rule`.
    pub fn new(rule: ReuseRule) -> Self {
        StreamOrder {
            rule,
            device_completed: AtomicU64::new(0),
        }
    }

    /// A fresh tick: take it *before* the driver call it stands for (a record, a wait for
    /// completion), so that every free it covers was made before that call was issued.
    pub fn now(&self) -> u64 {
        now()
    }

    /// The clock of a new stream, knowing nothing of the others.
    pub fn new_stream(&self) -> Arc<StreamClock> {
        Arc::new(StreamClock {
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            completed: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            view: Mutex::new(Vec::new()),
        })
    }

    /// What recording an event on `stream` now knows (take it before the driver's record).
    pub fn stamp(&self, stream: &Arc<StreamClock>) -> OrderStamp {
        let tick = now();
        let mut entries = stream.view().clone();
        let own = Known {
            serial: stream.serial,
            tick,
            clock: Arc::downgrade(stream),
        };
        merge_into(&mut entries, 0, std::slice::from_ref(&own));
        OrderStamp { entries }
    }

    /// `stream` waits on an event whose record knew `stamp` (after the driver's wait
    /// succeeded): from now on its work runs after everything the stamp knows.
    pub fn wait(&self, stream: &StreamClock, stamp: &OrderStamp) {
        merge_into(&mut stream.view(), stream.serial, &stamp.entries);
    }

    /// Work issued on any stream before `tick` has completed (a device-wide synchronize that
    /// began at `tick` returned; never during a capture, which it would conflict with).
    pub fn device_completed_before(&self, tick: u64) {
        self.device_completed.fetch_max(tick, Ordering::AcqRel);
    }

    /// A free point now, for a block `streams` may still use.
    pub fn free_point<'a>(
        &self,
        streams: impl IntoIterator<Item = &'a Arc<StreamClock>>,
    ) -> FreePoint {
        let mut streams: Vec<Arc<StreamClock>> = streams.into_iter().cloned().collect();
        streams.sort_by_key(|s| s.serial);
        streams.dedup_by_key(|s| s.serial);
        FreePoint {
            tick: now(),
            streams,
        }
    }

    /// Whether an allocation on `stream` may take a block freed at `point`: for every stream
    /// that may still use the block, `stream` is that stream, knows a later tick of it, or its
    /// work up to the free completed (see the module documentation).
    pub fn may_reuse(&self, point: &FreePoint, stream: &StreamClock) -> bool {
        self.reuse_check(stream).allows(point)
    }

    /// The reuse check of allocations on `stream`, for several free points in a row (the
    /// stream's view is read once).
    pub fn reuse_check<'a>(&'a self, stream: &'a StreamClock) -> ReuseCheck<'a> {
        ReuseCheck {
            order: self,
            stream,
            view: None,
        }
    }
}

/// [`StreamOrder::may_reuse`] for one allocating stream; reads its view on first need.
#[derive(Debug)]
pub struct ReuseCheck<'a> {
    order: &'a StreamOrder,
    stream: &'a StreamClock,
    view: Option<MutexGuard<'a, Vec<Known>>>,
}

impl ReuseCheck<'_> {
    /// Whether the allocating stream may take a block freed at `point`.
    pub fn allows(&mut self, point: &FreePoint) -> bool {
        if self.order.rule == ReuseRule::Unordered
            || point.tick < self.order.device_completed.load(Ordering::Acquire)
        {
            return true;
        }
        let Self { stream, view, .. } = self;
        point.streams.iter().all(|user| {
            user.serial == stream.serial
                || point.tick < user.completed.load(Ordering::Acquire)
                || point.tick
                    < StreamClock::knows(view.get_or_insert_with(|| stream.view()), user.serial)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> StreamOrder {
        StreamOrder::new(ReuseRule::StreamOrdered)
    }

    #[test]
    fn a_stamp_taken_before_the_free_does_not_cover_it() {
        let order = order();
        let (a, b) = (order.new_stream(), order.new_stream());
        let early = order.stamp(&a);
        let freed = order.free_point([&a]);
        order.wait(&b, &early);
        assert!(!order.may_reuse(&freed, &b));
        order.wait(&b, &order.stamp(&a));
        assert!(order.may_reuse(&freed, &b));
    }

    #[test]
    fn order_is_transitive_through_events() {
        let order = order();
        let (a, b, c) = (order.new_stream(), order.new_stream(), order.new_stream());
        let freed = order.free_point([&a]);
        order.wait(&b, &order.stamp(&a));
        order.wait(&c, &order.stamp(&b));
        assert!(order.may_reuse(&freed, &c));
    }

    #[test]
    fn every_recorded_stream_must_be_ordered() {
        let order = order();
        let (a, b, c) = (order.new_stream(), order.new_stream(), order.new_stream());
        let freed = order.free_point([&a, &b]);
        // The allocation stream itself still needs the other user ordered.
        assert!(!order.may_reuse(&freed, &a));
        order.wait(&a, &order.stamp(&b));
        assert!(order.may_reuse(&freed, &a));
        assert!(!order.may_reuse(&freed, &c));
    }

    #[test]
    fn completion_covers_earlier_frees_only() {
        let order = order();
        let (a, b) = (order.new_stream(), order.new_stream());
        let freed = order.free_point([&a]);
        let sync = order.now();
        let later = order.free_point([&a]);
        a.completed_before(sync);
        assert!(order.may_reuse(&freed, &b));
        assert!(!order.may_reuse(&later, &b));
        order.device_completed_before(order.now());
        assert!(order.may_reuse(&later, &b));
    }

    #[test]
    fn an_event_synchronize_completes_what_the_stamp_knows() {
        let order = order();
        let (a, b, c) = (order.new_stream(), order.new_stream(), order.new_stream());
        let freed = order.free_point([&a]);
        order.wait(&b, &order.stamp(&a));
        order.stamp(&b).completed();
        assert!(order.may_reuse(&freed, &c));
    }

    #[test]
    fn views_forget_dropped_streams() {
        let order = order();
        let main = order.new_stream();
        for _ in 0..1000 {
            let side = order.new_stream();
            order.wait(&main, &order.stamp(&side));
            side.retire();
        }
        order.wait(&main, &OrderStamp::default());
        assert!(main.view().len() <= 1, "{:?}", main.view().len());
    }

    #[test]
    fn the_unordered_fault_reuses_anything() {
        let order = StreamOrder::new(ReuseRule::Unordered);
        let (a, b) = (order.new_stream(), order.new_stream());
        assert!(order.may_reuse(&order.free_point([&a]), &b));
    }
}
