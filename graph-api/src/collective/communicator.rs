//! `Communicator`: one rank of a group of devices, with collectives issued on the current
//! stream and captured like any op.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{Collective, CollectiveSignature, CommElement, CommId, ControlPlane, ReduceOp, Store};
use crate::{
    Backend, GraphError, PortableOps, Result, View,
    backend_kit::{CollectiveCall, CommView, DeviceComm},
};

/// How long a meeting of ranks waits by default (torch.distributed's store timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How [`Communicator::with_options`] builds a communicator.
///
/// ```
/// use std::time::Duration;
/// use accel_graph_api::collective::CommOptions;
/// let options = CommOptions::new().name("tp").timeout(Duration::from_secs(10));
/// assert_eq!((options.name.as_str(), options.timeout.as_secs()), ("tp", 10));
/// assert!(options.id.is_none()); // rank 0 makes one and shares it through the store
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommOptions {
    /// The communicator's name: the prefix of its keys in the store and what its errors call
    /// it. Default `"world"`. A name is used once per store: communicators sharing a store
    /// need distinct names, even after one is dropped (its ranks' claims stay), and joining a
    /// name already in use is [`GraphError::CommNameClash`](crate::GraphError).
    pub name: String,
    /// The longest any meeting of the ranks waits (joining, barriers, comparing captures, a
    /// collective on the mock). Default [`DEFAULT_TIMEOUT`]; [`Duration::MAX`] waits as long
    /// as it takes.
    pub timeout: Duration,
    /// The id to join, made ahead by a launcher ([`CommId::from_env`]); `None`: rank 0 makes
    /// one and shares it through the store.
    pub id: Option<CommId>,
}

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions {
            name: "world".to_owned(),
            timeout: DEFAULT_TIMEOUT,
            id: None,
        }
    }
}

impl CommOptions {
    /// The defaults: name `"world"`, [`DEFAULT_TIMEOUT`], an id shared through the store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Joins `id` instead of sharing one through the store.
    pub fn id(mut self, id: CommId) -> Self {
        self.id = Some(id);
        self
    }
}

/// One rank of a communicator: one backend instance (one device) per rank, ranks being
/// threads of one process or processes. Collectives run on the backend's **current stream**
/// like any op: eagerly, or recorded when the stream captures — with their buffers, and the
/// communicator itself, kept alive by the graph.
///
/// Every rank must issue the same collectives in the same order (count, kind, element type,
/// sizes). Eagerly that is the caller's contract (on a GPU a rank that differs hangs its
/// peers; the mock reports [`GraphError::CollectiveMismatch`]); for captures it is checked:
/// before a capture holding collectives ends, its rank compares the sequence it recorded with
/// every other rank's (through the store, waiting at most the timeout), and a mismatch
/// discards the capture on every rank with [`GraphError::CollectiveMismatch`] — never a
/// graph that would hang.
///
/// Building one is collective too: every rank calls [`Communicator::new`] with the same store
/// and world size; it waits (bounded) for every rank, joins the device communicator and runs
/// one of each collective eagerly, so that the device sets up its connections outside any
/// capture (NCCL's first collective on a communicator must not be captured).
///
/// Generic code takes `&Communicator<B>` for any `B: Backend`; a backend without collectives
/// answers [`GraphError::Unsupported`] at construction, saying why.
///
/// ```
/// use accel_graph_api::{prelude::*, collective::{Communicator, MemoryStore, ReduceOp}};
/// use accel_graph_mock::MockBackend;
///
/// /// Written once: sums every rank's gradient, then averages.
/// fn average<B: Backend>(comm: &Communicator<B>, grads: &B::Buffer<f32>) -> Result<()> {
///     comm.all_reduce(grads, ReduceOp::Sum)?;
///     comm.backend().scale(grads, 1.0 / comm.world_size() as f32)
/// }
///
/// let store = MemoryStore::new(); // the ranks are threads: they meet in memory
/// let results = std::thread::scope(|s| {
///     let ranks: Vec<_> = (0..2)
///         .map(|rank| {
///             let store = store.clone();
///             s.spawn(move || -> Result<Vec<f32>> {
///                 let backend = MockBackend::new(); // one device per rank
///                 let comm = Communicator::new(&backend, store, rank, 2)?;
///                 let grads = backend.alloc_from(&[rank as f32 + 1.0; 4])?;
///                 average(&comm, &grads)?; // eager
///                 // Captured like any op, and replayed.
///                 let stream = backend.new_stream()?;
///                 let mut graph = backend.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
///                 backend.capture_on(&stream, &mut graph, || average(&comm, &grads))?;
///                 graph.replay()?;
///                 backend.download(&grads)
///             })
///         })
///         .collect();
///     ranks.into_iter().map(|r| r.join().unwrap()).collect::<Result<Vec<_>>>()
/// })?;
/// assert_eq!(results, vec![vec![1.5; 4]; 2]); // (1 + 2) / 2, then (1.5 + 1.5) / 2
/// # Ok::<(), GraphError>(())
/// ```
pub struct Communicator<B: Backend> {
    backend: B,
    device: Arc<dyn DeviceComm<B::Memory>>,
    control: Arc<ControlPlane>,
}

impl<B: Backend> Communicator<B> {
    /// Rank `rank` of `world_size` on `backend`, meeting the other ranks through `store` (a
    /// clone of one [`MemoryStore`](super::MemoryStore) for threads, a
    /// [`FileStore`](super::FileStore) on one fresh directory for processes), with the
    /// default [`CommOptions`].
    ///
    /// Errors: `rank >= world_size`, or a world of more than
    /// [`MAX_WORLD_SIZE`](super::MAX_WORLD_SIZE) ranks ([`GraphError::ArgumentMismatch`],
    /// before anything is made for the world); a name another communicator uses on `store`
    /// ([`GraphError::CommNameClash`], on this rank and on every rank that learns of it while
    /// joining: see `docs/MULTI_GPU.md`); a backend without
    /// collectives ([`GraphError::Unsupported`], [`GraphError::LibraryUnavailable`] when
    /// NCCL is missing); a rank that does not come within the timeout
    /// ([`GraphError::CommTimeout`] naming it); a call made while a capture forbids unsafe
    /// calls ([`GraphError::UnsafeDuringCapture`]: joining allocates device memory).
    pub fn new(
        backend: &B,
        store: impl Store + 'static,
        rank: usize,
        world_size: usize,
    ) -> Result<Self> {
        Self::with_options(backend, store, rank, world_size, CommOptions::new())
    }

    /// [`Communicator::new`] with `options`.
    pub fn with_options(
        backend: &B,
        store: impl Store + 'static,
        rank: usize,
        world_size: usize,
        options: CommOptions,
    ) -> Result<Self> {
        let collectives = backend.collectives()?;
        let control = Arc::new(ControlPlane::new(
            Arc::new(store),
            options.name,
            rank,
            world_size,
            options.timeout,
        )?);
        // Each rank claims its place in the name, then every rank is here before any joins
        // the device communicator: joining blocks until all have joined (NCCL's bootstrap),
        // with no timeout of its own.
        control.join()?;
        let id = match options.id {
            Some(id) => id,
            None => control.share_id(|| collectives.new_comm_id())?,
        };
        let device = collectives.join(&id, Arc::clone(&control))?;
        let comm = Communicator {
            backend: backend.clone(),
            device,
            control,
        };
        comm.warm_up()?;
        // A rank of another communicator of this name that came while this one was made
        // fails every rank here, alike.
        comm.control.confirm_join()?;
        Ok(comm)
    }

    /// A new communicator id from `backend` (NCCL's `ncclGetUniqueId` on CUDA), for a
    /// launcher that hands it to the ranks itself ([`CommOptions::id`]).
    pub fn unique_id(backend: &B) -> Result<CommId> {
        backend.collectives()?.new_comm_id()
    }

    /// One of each collective, eagerly on a side stream, waited for (bounded: a rank that
    /// died after joining is a timeout here, not a hang): the device sets up what they need
    /// now, not inside a capture.
    fn warm_up(&self) -> Result<()> {
        let b = &self.backend;
        let stream = b.new_stream()?;
        let _on = b.use_stream(&stream)?;
        let one = b.alloc::<f32>(1)?;
        let all = b.alloc::<f32>(self.world_size())?;
        b.fill(&one, 0.0)?;
        b.fill(&all, 0.0)?;
        self.all_reduce(&one, ReduceOp::Sum)?;
        self.broadcast(&one, 0)?;
        self.all_gather(&one, &all)?;
        self.reduce_scatter(&all, &one, ReduceOp::Sum)?;
        self.wait(self.control.timeout())
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.control.rank()
    }

    /// Ranks of the communicator.
    pub fn world_size(&self) -> usize {
        self.control.world_size()
    }

    /// The communicator's name.
    pub fn name(&self) -> &str {
        self.control.name()
    }

    /// The backend instance (device) of this rank.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// This rank's handle on the host-side meetings (barriers, capture comparisons).
    pub fn control(&self) -> &Arc<ControlPlane> {
        &self.control
    }

    fn issue<T: CommElement>(
        &self,
        collective: Collective,
        count: usize,
        send: View<'_, B::Buffer<T>>,
        recv: View<'_, B::Buffer<T>>,
    ) -> Result<()> {
        let call = CollectiveCall {
            signature: CollectiveSignature {
                collective,
                dtype: T::DTYPE,
                count,
            },
            send: CommView::of(send),
            recv: CommView::of(recv),
        };
        self.device.issue(&call)
    }

    /// Every rank's `buffer` (a buffer or a [`View`] of one) becomes the reduction by `op` of
    /// all ranks' buffers, in place. Every rank passes the same length.
    pub fn all_reduce<'a, T: CommElement>(
        &self,
        buffer: impl Into<View<'a, <B as PortableOps>::Buffer<T>>>,
        op: ReduceOp,
    ) -> Result<()> {
        let buffer = buffer.into();
        self.issue(Collective::AllReduce(op), buffer.len(), buffer, buffer)
    }

    /// `recv` (of `world_size × send.len()` elements) becomes every rank's `send`,
    /// concatenated in rank order. In place when `send` is this rank's part of `recv`
    /// (`recv.view(rank * n..(rank + 1) * n)`); otherwise the two must not overlap.
    pub fn all_gather<'a, 'b, T: CommElement>(
        &self,
        send: impl Into<View<'a, <B as PortableOps>::Buffer<T>>>,
        recv: impl Into<View<'b, <B as PortableOps>::Buffer<T>>>,
    ) -> Result<()> {
        let (send, recv) = (send.into(), recv.into());
        let n = send.len();
        self.check_len("all_gather receive buffer", n, recv.len())?;
        self.check_overlap("all_gather", send, recv, recv, n)?;
        self.issue(Collective::AllGather, n, send, recv)
    }

    /// `recv` (of `n` elements) becomes part `rank` (elements `rank·n .. (rank+1)·n`) of the
    /// reduction by `op` of every rank's `send` (of `world_size × n` elements). In place when
    /// `recv` is this rank's part of `send`; otherwise the two must not overlap.
    pub fn reduce_scatter<'a, 'b, T: CommElement>(
        &self,
        send: impl Into<View<'a, <B as PortableOps>::Buffer<T>>>,
        recv: impl Into<View<'b, <B as PortableOps>::Buffer<T>>>,
        op: ReduceOp,
    ) -> Result<()> {
        let (send, recv) = (send.into(), recv.into());
        let n = recv.len();
        self.check_len("reduce_scatter send buffer", n, send.len())?;
        self.check_overlap("reduce_scatter", recv, send, send, n)?;
        self.issue(Collective::ReduceScatter(op), n, send, recv)
    }

    /// Every rank's `buffer` becomes rank `root`'s, in place.
    pub fn broadcast<'a, T: CommElement>(
        &self,
        buffer: impl Into<View<'a, <B as PortableOps>::Buffer<T>>>,
        root: usize,
    ) -> Result<()> {
        if root >= self.world_size() {
            return Err(GraphError::ArgumentMismatch(format!(
                "communicator {}: broadcast from root {root}, outside a world of {} rank(s)",
                self.name(),
                self.world_size()
            )));
        }
        let buffer = buffer.into();
        self.issue(Collective::Broadcast { root }, buffer.len(), buffer, buffer)
    }

    /// `got` must be `world_size × share` elements.
    fn check_len(&self, what: &'static str, share: usize, got: usize) -> Result<()> {
        let expected = share
            .checked_mul(self.world_size())
            .ok_or(GraphError::size_overflow("collective"))?;
        if got == expected {
            Ok(())
        } else {
            Err(GraphError::LengthMismatch {
                op: what,
                expected,
                got,
            })
        }
    }

    /// `part` (of `n` elements) may overlap `other` only as this rank's part of `whole`.
    fn check_overlap<T: CommElement>(
        &self,
        name: &str,
        part: View<'_, B::Buffer<T>>,
        other: View<'_, B::Buffer<T>>,
        whole: View<'_, B::Buffer<T>>,
        n: usize,
    ) -> Result<()> {
        if !part.overlaps(&other) {
            return Ok(());
        }
        let start = self.rank() * n;
        let in_place = whole
            .view(start..start + n)
            .is_ok_and(|mine| mine.same_memory(&part));
        if in_place {
            Ok(())
        } else {
            Err(GraphError::ArgumentMismatch(format!(
                "communicator {}: {name}: the send and receive buffers overlap without being \
                 in place (in place, the smaller one is this rank's part of the larger: \
                 elements {start}..{} of it)",
                self.name(),
                start + n
            )))
        }
    }

    /// Waits (bounded by the timeout) until every rank calls `barrier`. It touches no device:
    /// it may be called during a capture. A timeout, or the store becoming unreachable
    /// (`StoreUnavailable`), makes the communicator unusable: the ranks' barrier counts no
    /// longer agree.
    pub fn barrier(&self) -> Result<()> {
        self.device.check_usable()?;
        self.control.barrier("barrier").inspect_err(|e| {
            if matches!(
                e,
                GraphError::CommTimeout { .. } | GraphError::StoreUnavailable { .. }
            ) {
                self.abort(&e.to_string());
            }
        })
    }

    /// Waits for the work issued so far on the current stream, at most `timeout`: the way to
    /// wait for collectives without hanging when a rank is gone. On timeout the communicator
    /// is aborted (on CUDA `ncclCommAbort` ends its kernels still waiting for the missing
    /// rank) and the error is [`GraphError::CommTimeout`]; it is unusable from then on.
    /// Event queries are unsafe calls during a capture, so this follows the capture modes.
    ///
    /// Work that completed while another rank had aborted the communicator is not reported
    /// as done: an abort ends the peers' collectives early, with whatever their buffers held
    /// then. The error is [`GraphError::CommUnusable`] naming that rank (and this rank's
    /// communicator is aborted too); a rank whose collectives had all finished before the
    /// peer's abort gets it as well — it cannot tell them apart.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        self.device.check_usable()?;
        let event = self.backend.new_event()?;
        self.backend.record_event(&event)?;
        let started = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            if self.backend.event_query(&event)? {
                self.device.check_usable()?;
                return match self.control.aborted_peer()? {
                    None => Ok(()),
                    Some((peer, why)) => {
                        let reason = format!("rank {peer} aborted the communicator ({why})");
                        self.abort(&reason);
                        Err(GraphError::CommUnusable {
                            communicator: self.name().to_owned(),
                            rank: self.rank(),
                            reason,
                        })
                    }
                };
            }
            if started.elapsed() >= timeout {
                let error = GraphError::CommTimeout {
                    communicator: self.name().to_owned(),
                    rank: self.rank(),
                    operation: "wait".to_owned(),
                    missing: Vec::new(),
                    waited_ms: started.elapsed().as_millis() as u64,
                };
                self.abort(&error.to_string());
                return Err(error);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// `Ok` while the communicator can be used on this rank;
    /// [`GraphError::CommUnusable`] after a timeout or [`Communicator::abort`].
    pub fn check_usable(&self) -> Result<()> {
        self.device.check_usable()
    }

    /// Makes the communicator unusable on this rank, ending device work waiting on it, and
    /// tells the other ranks first (their [`Communicator::wait`] then fails rather than
    /// report collectives the abort cut short).
    pub fn abort(&self, reason: &str) {
        // Best effort: an unreachable store must not keep the device work running.
        let _ = self.control.announce_abort(reason);
        self.device.abort(reason)
    }
}

impl<B: Backend> fmt::Debug for Communicator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("name", &self.name())
            .field("rank", &self.rank())
            .field("world_size", &self.world_size())
            .field("backend", &self.backend)
            .finish()
    }
}
