//! `DriverStream`: a stream of one backend instance, with the capture it takes part in and its
//! place in stream order.
//!
//! # Deciding by capture membership
//!
//! Many calls act differently on a capturing stream: an op keeps its blocks alive for the
//! graph, a host callback hands the graph its trampoline (an eager one frees itself when it
//! runs), an allocation comes from the capture's pool, an event record becomes a way into the
//! capture, a blocking copy is refused. Deciding and then acting is safe only if the stream
//! cannot start or stop capturing in between — another thread may begin or end a capture on
//! it at any time. So every stream has a lock over its membership:
//!
//! * a call that decides by the membership holds the **read** side from the decision until the
//!   driver call that acts on it returned ([`StreamInner::settled`]);
//! * whatever changes the membership holds the **write** side around the change *and* the
//!   driver call that makes it ([`StreamInner::membership_lock`]): `capture_begin` (the
//!   stream), the end or abort of a capture (its origin, then every member), a fork by
//!   `wait_event` (the forked stream, and the capture's origin for reading, so that the
//!   capture cannot end meanwhile).
//!
//! Calls into captures are moreover serialised, one turn per backend instance ([`Issuing`]): a
//! call that settled a capturing stream holds the turn until it returns, and so do a wait that
//! joins or forks a stream into a capture, a capture's end, and a call on an event whose last
//! record was made in a capture still going on (see [`crate::event`]). The turn is taken after
//! every stream lock the call takes, and no call holding it waits for a stream lock (calls
//! inside host callbacks only try), so it adds no cycle to what follows.
//!
//! Deadlock freedom: a thread waits for one stream's read lock, or a forked stream's write
//! lock and then an origin's read lock, or an origin's and then its members' write locks;
//! write locks are held around driver calls that never wait for device work, and around
//! `capture_begin`'s registration under the domain's gate (the gate may be taken under a
//! stream lock, never the other way round; its readers wait for device work only while no
//! capture runs). Calls inside host callbacks never
//! wait for a read lock or a fork's write lock (a wait holding a read lock may be waiting for
//! that very callback): the stream their issuer holds is settled already (so a wait there may
//! order it but not fork it), any other is tried once, and a call on a stream another thread
//! is beginning, ending or forking a capture on is refused there (CUDA permits no runtime call
//! in a host function anyway). A capture ended in a callback (its graph dropped there) does
//! wait for its streams' write locks: the calls holding those decide on capturing streams,
//! where nothing waits for device work. The cost on the hot path is one uncontended read
//! lock, with no allocation.

use std::{
    cell::Cell,
    fmt,
    sync::{
        Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
        atomic::{AtomicBool, Ordering},
    },
};

use accel_graph_api::{GraphError, Result, backend_kit::stream_order::StreamClock};

use crate::{Driver, capture::CaptureEntry, host::in_host_callback};

thread_local! {
    /// The stream whose membership the innermost [`Settled`] of this thread holds (its
    /// address; 0 for none): a host callback that runs inside that call (synchronous
    /// backends) finds it settled already.
    static SETTLED: Cell<usize> = const { Cell::new(0) };
}

/// A stream of a driver-based backend. Clones name the same stream; the last clone releases
/// it.
pub struct DriverStream<D: Driver> {
    pub(crate) inner: Arc<StreamInner<D>>,
}

pub(crate) struct StreamInner<D: Driver> {
    pub(crate) raw: D::Stream,
    pub(crate) key: u64,
    pub(crate) instance: u64,
    pub(crate) is_default: bool,
    /// Its place in stream order, by which pool blocks are reused across streams.
    pub(crate) clock: Arc<StreamClock>,
    /// Read: the membership is being decided by; write: it is being changed (see the module
    /// documentation).
    settle: RwLock<()>,
    /// Fast path of `capture`: most ops run on streams that are not capturing.
    capturing: AtomicBool,
    capture: Mutex<Option<Arc<CaptureEntry<D>>>>,
}

thread_local! {
    /// The issue lock (its address; 0 for none) this thread's innermost [`Issuing`] holds: a
    /// nested call into the same capture (a host callback run inside the call, a fork settling
    /// the capture's origin) holds it through the outer call.
    static ISSUING: Cell<usize> = const { Cell::new(0) };
}

/// A thread's turn to call into the captures of one backend instance, held by a call from
/// issuing its work (on any of a capture's streams) to asking the driver which node it became,
/// by a capture's end, and by a call on an event recorded in a capture still going on.
///
/// Not per stream: the driver's answer (the stream's capture dependencies) is valid only until
/// the next call on the stream, and the graph being captured into is one object for all its
/// streams, which the driver does not synchronise (its documentation: graph objects "must not
/// be accessed concurrently from multiple threads"). Two threads issuing on two streams of one
/// capture — a stream forked into it and its origin — would otherwise grow and read the same
/// graph at once. Not per capture either: a call on an event recorded in one capture, made on
/// a stream of another, updates both inside the driver (see [`crate::event`]); with a turn per
/// capture it would hold two, which two such calls could take in opposite orders. Captures of
/// one instance made on several threads at once take turns for each call (a few microseconds
/// of the host's time each); instances, one per device, do not share a turn.
/// One backend instance's turn to call into its captures (see [`Issuing`]); clones name the
/// same turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct Turn(Arc<parking_lot::Mutex<()>>);

impl Turn {
    /// Waits for the turn; inside a host callback, where no call may wait, a turn in use
    /// elsewhere is refused with [`GraphError::Unsupported`].
    pub(crate) fn take(&self) -> Result<Issuing> {
        Issuing::of(&self.0)
    }
}

pub(crate) struct Issuing {
    _guard: Option<parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>>,
    /// The thread's previously held issue lock, restored on drop.
    outer: usize,
}

impl Issuing {
    /// Waits for the turn on `lock` ([`Turn::take`]).
    fn of(lock: &Arc<parking_lot::Mutex<()>>) -> Result<Self> {
        let address = Arc::as_ptr(lock) as usize;
        let outer = ISSUING.with(Cell::get);
        let guard = if outer == address {
            None
        } else if in_host_callback() {
            Some(lock.try_lock_arc().ok_or_else(busy_in_callback)?)
        } else {
            Some(lock.lock_arc())
        };
        ISSUING.with(|held| held.set(address));
        Ok(Issuing {
            _guard: guard,
            outer,
        })
    }
}

impl Drop for Issuing {
    fn drop(&mut self) {
        ISSUING.with(|held| held.set(self.outer));
    }
}

/// The read side of a stream's membership lock: until it drops, no capture begins, ends or
/// forks on the stream, so what [`Settled::capture`] says stays true.
pub(crate) struct Settled<'a, D: Driver> {
    /// Dropped before the read lock (fields drop in order).
    _issue: Option<Issuing>,
    _read: Option<RwLockReadGuard<'a, ()>>,
    /// The thread's previously settled stream, restored on drop.
    outer: usize,
    capture: Option<Arc<CaptureEntry<D>>>,
}

impl<D: Driver> Settled<'_, D> {
    /// The capture the stream takes part in, if any.
    pub(crate) fn capture(&self) -> Option<&Arc<CaptureEntry<D>>> {
        self.capture.as_ref()
    }
}

/// The refusal of a call inside a host callback on a stream whose membership lock is in use.
pub(crate) fn busy_in_callback() -> GraphError {
    GraphError::Unsupported {
        what: "a call inside a host callback on a stream whose capture another thread is \
               beginning, ending or forking (no runtime call is permitted in a host function); \
               make it outside the callback"
            .to_owned(),
    }
}

impl<D: Driver> Drop for Settled<'_, D> {
    fn drop(&mut self) {
        SETTLED.with(|s| s.set(self.outer));
    }
}

impl<D: Driver> StreamInner<D> {
    fn address(&self) -> usize {
        self as *const Self as usize
    }

    /// Settles the stream's membership for a call that decides by it (see the module
    /// documentation); inside a host callback, a stream another thread is beginning or ending
    /// a capture on is refused with [`GraphError::Unsupported`].
    #[inline]
    pub(crate) fn settled(&self) -> Result<Settled<'_, D>> {
        self.settle(true)
    }

    /// [`StreamInner::settled`] for a call that issues nothing while the stream captures (it
    /// acts only on a stream that does not): without the turn to call into captures, so that a
    /// caller holding other locks never waits for a call into a capture.
    pub(crate) fn settled_outside_capture(&self) -> Result<Settled<'_, D>> {
        self.settle(false)
    }

    #[inline]
    fn settle(&self, issuing: bool) -> Result<Settled<'_, D>> {
        let outer = SETTLED.with(Cell::get);
        let read = if outer == self.address() {
            // Held already by this thread's outer call (a callback it runs synchronously).
            None
        } else if in_host_callback() {
            match self.settle.try_read() {
                Ok(read) => Some(read),
                Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(TryLockError::WouldBlock) => return Err(busy_in_callback()),
            }
        } else {
            // Nothing is changed under the lock: a poisoned one guards valid state.
            Some(self.settle.read().unwrap_or_else(|e| e.into_inner()))
        };
        let capture = self.capture();
        // Calls into a capture are serialised (see `Issuing`).
        let issue = match &capture {
            Some(entry) if issuing => Some(entry.issuing()?),
            _ => None,
        };
        SETTLED.with(|s| s.set(self.address()));
        Ok(Settled {
            _issue: issue,
            _read: read,
            outer,
            capture,
        })
    }

    /// The write side of the membership lock: hold it around a change of the membership and
    /// the driver call that makes it.
    pub(crate) fn membership_lock(&self) -> RwLockWriteGuard<'_, ()> {
        self.settle.write().unwrap_or_else(|e| e.into_inner())
    }

    /// [`StreamInner::membership_lock`] for a call that may change the membership (a wait
    /// that forks the stream into a capture). Inside a host callback, where no wait may
    /// block: `None` if this thread's outer call holds the stream settled (nothing may change
    /// the membership then, so the caller must refuse a fork), and a lock in use elsewhere is
    /// refused with [`GraphError::Unsupported`].
    pub(crate) fn membership_lock_for_call(&self) -> Result<Option<RwLockWriteGuard<'_, ()>>> {
        if !in_host_callback() {
            return Ok(Some(self.membership_lock()));
        }
        if SETTLED.with(Cell::get) == self.address() {
            return Ok(None);
        }
        match self.settle.try_write() {
            Ok(write) => Ok(Some(write)),
            Err(TryLockError::Poisoned(e)) => Ok(Some(e.into_inner())),
            Err(TryLockError::WouldBlock) => Err(busy_in_callback()),
        }
    }

    /// The capture this stream takes part in, if any, as last set: callers that act on it
    /// hold [`StreamInner::settled`] instead; the rest only look.
    #[inline]
    pub(crate) fn capture(&self) -> Option<Arc<CaptureEntry<D>>> {
        if !self.capturing.load(Ordering::Acquire) {
            return None;
        }
        self.capture
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the capture the stream takes part in (the caller holds the membership lock).
    pub(crate) fn set_capture(&self, entry: Option<Arc<CaptureEntry<D>>>) {
        let mut slot = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        self.capturing.store(entry.is_some(), Ordering::Release);
        *slot = entry;
    }

    /// Leaves `entry`'s capture, if this stream is still in it (the caller holds the
    /// membership lock).
    pub(crate) fn leave_capture(&self, entry: &CaptureEntry<D>) {
        let mut slot = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        if slot
            .as_ref()
            .is_some_and(|c| std::ptr::eq(Arc::as_ptr(c), entry))
        {
            *slot = None;
            self.capturing.store(false, Ordering::Release);
        }
    }
}

impl<D: Driver> Drop for StreamInner<D> {
    fn drop(&mut self) {
        // No more work can be issued on it: other streams' views forget it.
        self.clock.retire();
    }
}

impl<D: Driver> DriverStream<D> {
    pub(crate) fn new(driver: &D, raw: D::Stream, instance: u64, clock: Arc<StreamClock>) -> Self {
        DriverStream {
            inner: Arc::new(StreamInner {
                key: driver.stream_key(&raw),
                is_default: driver.is_default_stream(&raw),
                raw,
                instance,
                clock,
                settle: RwLock::new(()),
                capturing: AtomicBool::new(false),
                capture: Mutex::new(None),
            }),
        }
    }

    /// The driver's stream, for native work issued on it (see the backend's documentation for
    /// what is captured and what the caller must keep alive).
    pub fn raw(&self) -> &D::Stream {
        &self.inner.raw
    }

    /// True for the default stream.
    pub fn is_default(&self) -> bool {
        self.inner.is_default
    }

    /// The [`Backend::instance_id`](accel_graph_api::Backend::instance_id) of the backend the
    /// stream belongs to.
    pub fn instance_id(&self) -> u64 {
        self.inner.instance
    }

    /// The driver's key of the stream (its raw handle).
    pub fn key(&self) -> u64 {
        self.inner.key
    }

    /// The stream's serial number: unique in the process, unlike the driver's key (drivers
    /// reuse the handles of dropped streams).
    pub fn serial(&self) -> u64 {
        self.inner.clock.serial()
    }
}

impl<D: Driver> Clone for DriverStream<D> {
    fn clone(&self) -> Self {
        DriverStream {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: Driver> PartialEq for DriverStream<D> {
    fn eq(&self, other: &Self) -> bool {
        self.inner.instance == other.inner.instance && self.inner.key == other.inner.key
    }
}

impl<D: Driver> Eq for DriverStream<D> {}

impl<D: Driver> fmt::Debug for DriverStream<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("backend", &D::KIND)
            .field("key", &format_args!("{:#x}", self.inner.key))
            .field("serial", &self.inner.clock.serial())
            .field("default", &self.inner.is_default)
            .field("instance", &self.inner.instance)
            .finish()
    }
}
