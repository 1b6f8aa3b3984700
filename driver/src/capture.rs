//! `CaptureEntry`: one capture in progress, as the driver layer keeps it — its pool, its
//! capture-mode record, the streams taking part, and what its graph must keep alive.
//!
//! Which capture a stream takes part in is kept on the stream itself (set when the capture
//! begins on it or the stream waits on an event of the capture, cleared when the capture
//! ends), so issuing an op costs no driver query. Membership changes under the streams'
//! membership locks (see `crate::stream`). Captures begun, or streams joined, through
//! raw handles behind the backend's back are not seen here: work issued through such paths is
//! the caller's responsibility (see the driver layer's crate documentation).

use std::{
    any::Any,
    collections::HashMap,
    ffi::c_void,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, Weak,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use accel_graph_api::{
    GraphError, PoolId,
    backend_kit::{
        capture_rules::CaptureRecord,
        pools::{BlockHold, BlockId, OwnedAllocation},
        stream_order::StreamClock,
    },
};

use crate::{
    Driver,
    allocator::DriverAllocator,
    collectives::CapturedCollectives,
    editing::Recorded,
    host::HostCall,
    stream::{Issuing, StreamInner, Turn},
};

/// What a graph keeps alive for its captured work: a hold on every block an op touched (so
/// dropping a buffer cannot free memory a replay still writes) and the host callbacks its host
/// nodes call.
///
/// Each block's hold counts the operands of the graph's work that use it, so that a node
/// update rebinding one operand lets the old block go exactly when no other operand uses it.
pub(crate) struct KeepAlive<D: Driver> {
    blocks: HashMap<BlockId, (BlockHold<DriverAllocator<D>>, usize)>,
    /// Shared: a host node holds a thin pointer to each, which must not move, and a graph
    /// updated from another (or embedding it as a child) calls the other's callbacks too.
    pub(crate) callbacks: Vec<Arc<HostCall>>,
    /// Other objects captured work uses (the communicators of captured collectives).
    objects: Vec<Arc<dyn Any + Send + Sync>>,
}

impl<D: Driver> Default for KeepAlive<D> {
    fn default() -> Self {
        KeepAlive {
            blocks: HashMap::new(),
            callbacks: Vec::new(),
            objects: Vec::new(),
        }
    }
}

impl<D: Driver> KeepAlive<D> {
    /// Number of distinct blocks held.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// One more use of the block of `memory`.
    pub(crate) fn add_use(&mut self, memory: &OwnedAllocation<DriverAllocator<D>>) {
        let entry = self
            .blocks
            .entry(memory.get().id())
            .or_insert_with(|| (memory.hold(), 0));
        entry.1 = entry.1.saturating_add(1);
    }

    /// One use fewer of block `id`; the hold goes with the last use.
    pub(crate) fn release_use(&mut self, id: BlockId) {
        if let Some(entry) = self.blocks.get_mut(&id) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.blocks.remove(&id);
            }
        }
    }

    /// Holds of its own on everything `self` holds, with the same counts: what a graph taking
    /// over `self`'s work keeps alive.
    pub(crate) fn duplicate(&self) -> Self {
        KeepAlive {
            blocks: self
                .blocks
                .iter()
                .map(|(id, (hold, uses))| (*id, (hold.clone(), *uses)))
                .collect(),
            callbacks: self.callbacks.clone(),
            objects: self.objects.clone(),
        }
    }

    /// Holds everything `other` holds too, as one use per block: a node embedding `other`'s
    /// work (a child graph).
    pub(crate) fn absorb(&mut self, other: &Self) {
        for (id, (hold, _)) in &other.blocks {
            let entry = self.blocks.entry(*id).or_insert_with(|| (hold.clone(), 0));
            entry.1 = entry.1.saturating_add(1);
        }
        self.callbacks.extend(other.callbacks.iter().cloned());
        for object in &other.objects {
            let id = Arc::as_ptr(object).cast::<()>();
            if !self
                .objects
                .iter()
                .any(|o| Arc::as_ptr(o).cast::<()>() == id)
            {
                self.objects.push(Arc::clone(object));
            }
        }
    }
}

/// One capture in progress.
pub(crate) struct CaptureEntry<D: Driver> {
    /// The driver's id of the capture, known once the driver began it.
    driver_id: OnceLock<u64>,
    /// The pool its allocations come from.
    pub(crate) pool: PoolId,
    /// Its thread, mode and invalidation, in the domain's rules.
    pub(crate) record: Arc<CaptureRecord>,
    /// Serial number of the graph capturing, for messages.
    pub(crate) graph: u64,
    /// The stream the capture began on: a fork holds its membership lock for reading, so the
    /// capture cannot end while a stream joins it.
    origin: Weak<StreamInner<D>>,
    /// Streams whose current capture is this one (the origin first).
    members: Mutex<Vec<Weak<StreamInner<D>>>>,
    /// Set (under `members`' lock) when the capture ends: no stream may join it any more.
    closed: AtomicBool,
    keep: Mutex<KeepAlive<D>>,
    /// The blocks and streams (by serial) reported to the pools as using them.
    seen_on: Mutex<Vec<(BlockId, u64)>>,
    host_nodes: AtomicUsize,
    /// The collectives recorded, compared with the other ranks' before the capture ends.
    pub(crate) collectives: CapturedCollectives<D>,
    /// The nodes the API issued, for graph editing.
    recorded: Mutex<Recorded<D>>,
    /// The instance's turn to call into captures, held by a call from issuing work into the
    /// capture, on any of its streams, to asking the driver which node it became (see
    /// [`crate::stream::Issuing`]).
    issue: Turn,
}

impl<D: Driver> CaptureEntry<D> {
    pub(crate) fn new(
        pool: PoolId,
        record: Arc<CaptureRecord>,
        graph: u64,
        origin: &Arc<StreamInner<D>>,
        turn: Turn,
    ) -> Arc<Self> {
        Arc::new(CaptureEntry {
            driver_id: OnceLock::new(),
            pool,
            record,
            graph,
            origin: Arc::downgrade(origin),
            members: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            keep: Mutex::new(KeepAlive::default()),
            seen_on: Mutex::new(Vec::new()),
            host_nodes: AtomicUsize::new(0),
            collectives: CapturedCollectives::default(),
            recorded: Mutex::new(Recorded::default()),
            issue: turn,
        })
    }

    /// This thread's turn to call into the instance's captures (see [`crate::stream::Issuing`]).
    pub(crate) fn issuing(&self) -> Result<Issuing, GraphError> {
        self.issue.take()
    }

    /// The nodes the API issued so far.
    pub(crate) fn recorded(&self) -> MutexGuard<'_, Recorded<D>> {
        // Records are pushed whole: a panic elsewhere cannot tear them.
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps everything `other` keeps alive, for a node embedding its work (a child graph).
    pub(crate) fn keep_all(&self, other: &KeepAlive<D>) {
        self.keep().absorb(other);
    }

    fn keep(&self) -> MutexGuard<'_, KeepAlive<D>> {
        // Holds are inserted or taken whole: a panic elsewhere cannot tear the map.
        self.keep.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the driver's id of the capture.
    pub(crate) fn set_driver_id(&self, id: u64) {
        let _ = self.driver_id.set(id);
    }

    /// The driver's id of the capture, once it began.
    pub(crate) fn driver_id(&self) -> Option<u64> {
        self.driver_id.get().copied()
    }

    /// Keeps the block of `memory` alive for the graph (one hold per block, counting its
    /// uses).
    pub(crate) fn keep_block(&self, memory: &OwnedAllocation<DriverAllocator<D>>) {
        self.keep().add_use(memory);
    }

    /// [`CaptureEntry::keep_block`] for work issued on the stream whose clock is `clock`: the
    /// pools learn (once per block and stream in this capture) that the stream uses the block,
    /// so the block's free point covers it (a block written on two branches is reused only
    /// after both).
    pub(crate) fn keep_block_used_on(
        &self,
        memory: &OwnedAllocation<DriverAllocator<D>>,
        clock: &Arc<StreamClock>,
    ) {
        self.keep_block(memory);
        let key = (memory.get().id(), clock.serial());
        let first = {
            let mut seen = self.seen_on.lock().unwrap_or_else(|e| e.into_inner());
            !seen.contains(&key) && {
                seen.push(key);
                true
            }
        };
        if first {
            memory.pools().note_use(key.0, clock);
        }
    }

    /// Keeps `object` alive for the graph (once per object).
    pub(crate) fn keep_object(&self, object: Arc<dyn Any + Send + Sync>) {
        let mut keep = self.keep();
        let id = Arc::as_ptr(&object).cast::<()>();
        if !keep
            .objects
            .iter()
            .any(|o| Arc::as_ptr(o).cast::<()>() == id)
        {
            keep.objects.push(object);
        }
    }

    /// Keeps a captured host callback alive for the graph; returns the pointer its host node
    /// calls it with.
    pub(crate) fn keep_callback(&self, call: Box<HostCall>) -> *mut c_void {
        let call: Arc<HostCall> = Arc::from(call);
        let data = Arc::as_ptr(&call).cast_mut().cast::<c_void>();
        self.keep().callbacks.push(call);
        data
    }

    /// The number of the next host node, for its label.
    pub(crate) fn next_host_node(&self) -> usize {
        self.host_nodes.fetch_add(1, Ordering::Relaxed)
    }

    /// The stream the capture began on, while it lives.
    pub(crate) fn origin(&self) -> Option<Arc<StreamInner<D>>> {
        self.origin.upgrade()
    }

    /// The streams taking part besides the origin (to lock before the capture ends), each
    /// once: the end takes every one's membership lock, which a stream named twice would take
    /// twice on one thread.
    pub(crate) fn forked_members(&self) -> Vec<Arc<StreamInner<D>>> {
        let origin = self.origin.as_ptr();
        let mut forked: Vec<Arc<StreamInner<D>>> = Vec::new();
        for member in self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|m| !std::ptr::eq(m.as_ptr(), origin))
            .filter_map(Weak::upgrade)
        {
            if !forked.iter().any(|f| Arc::ptr_eq(f, &member)) {
                forked.push(member);
            }
        }
        forked
    }

    /// Makes `stream` take part in this capture; false (and nothing done) once it ended. The
    /// caller holds `stream`'s membership lock, and the origin's (for reading, or writing at
    /// the capture's begin).
    pub(crate) fn join(self: &Arc<Self>, stream: &Arc<StreamInner<D>>) -> bool {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        stream.set_capture(Some(Arc::clone(self)));
        // A stream that joins again (after a failed fork left it) is listed once.
        if !members
            .iter()
            .any(|m| std::ptr::eq(m.as_ptr(), Arc::as_ptr(stream)))
        {
            members.push(Arc::downgrade(stream));
        }
        true
    }

    /// Undoes [`CaptureEntry::join`] for a fork the driver refused: `stream` leaves the
    /// capture and its member list (the caller holds `stream`'s membership lock). The origin
    /// never leaves this way.
    pub(crate) fn leave(&self, stream: &Arc<StreamInner<D>>) {
        stream.leave_capture(self);
        if std::ptr::eq(self.origin.as_ptr(), Arc::as_ptr(stream)) {
            return;
        }
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| !std::ptr::eq(m.as_ptr(), Arc::as_ptr(stream)));
    }

    /// Ends the capture's membership: no stream takes part in it any more. Returns what the
    /// graph must keep alive, and the nodes the API issued. The caller holds the membership
    /// locks of the origin and of every member.
    pub(crate) fn close(self: &Arc<Self>) -> (KeepAlive<D>, Recorded<D>) {
        let members = {
            let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut *members)
        };
        for stream in members.iter().filter_map(Weak::upgrade) {
            stream.leave_capture(self);
        }
        (
            std::mem::take(&mut *self.keep()),
            std::mem::take(&mut *self.recorded()),
        )
    }
}
