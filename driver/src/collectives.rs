//! Collectives written once for every driver: joining a communicator, issuing a collective on
//! the current stream (kept alive like any op when the stream captures), NCCL's capture-mode
//! rule for several ranks in one process, and the comparison of the ranks' captures before
//! they end.
//!
//! # Why captures are compared
//!
//! A graph holding collectives is itself collective: every rank must replay a graph with the
//! same collectives in the same order, or the replays hang (NCCL waits forever for a peer's
//! matching operation) or corrupt memory (a size mismatch). So each capture that recorded
//! collectives of a communicator reports its sequence of signatures to the other ranks as it
//! ends, before `capture_end` returns ([`at_capture_end`], through the communicator's store,
//! bounded by its timeout), and a capture whose sequence differs from any rank's is discarded
//! with `CollectiveMismatch`. A capture that failed on one rank — its body's error or panic,
//! an invalidation, a driver error at its end — tells the others at once
//! ([`at_capture_discard`]), so they discard theirs too, fast, instead of keeping a graph
//! whose peers have none (its replay would hang).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock, Weak},
};

use accel_graph_api::{
    BackendKind, CaptureErrorMode, GraphError, Result,
    backend_kit::{CollectiveBackend, CollectiveCall, CommView, DeviceComm},
    collective::{Collective, CollectiveSignature, CommId, ControlPlane},
};

use crate::{
    BufferMemory, Driver, DriverBackend,
    api::{Bytes, CommSpec, RawCollective},
    capture::CaptureEntry,
    errors::CallSite,
    shared::Shared,
};

/// Live communicator ranks per capture domain: more than one means ranks are threads of one
/// process sharing the domain (CUDA's spans the process), where NCCL needs `thread_local`
/// captures.
fn domain_ranks() -> &'static Mutex<HashMap<(BackendKind, u64), usize>> {
    static RANKS: OnceLock<Mutex<HashMap<(BackendKind, u64), usize>>> = OnceLock::new();
    RANKS.get_or_init(Default::default)
}

/// One live rank counted in its capture domain.
struct DomainRank {
    key: (BackendKind, u64),
}

impl DomainRank {
    fn register(key: (BackendKind, u64)) -> Self {
        *domain_ranks()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_insert(0) += 1;
        DomainRank { key }
    }

    fn count(&self) -> usize {
        domain_ranks()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&self.key)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for DomainRank {
    fn drop(&mut self) {
        let mut ranks = domain_ranks().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = ranks.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                ranks.remove(&self.key);
            }
        }
    }
}

/// One rank's communicator on a driver: what [`Communicator`](accel_graph_api::collective::Communicator)
/// issues through.
pub(crate) struct CommRank<D: Driver> {
    /// Itself, for captures to keep it alive.
    me: Weak<CommRank<D>>,
    shared: Arc<Shared<D>>,
    /// Present until drop.
    comm: Option<D::Comm>,
    control: Arc<ControlPlane>,
    /// Why it became unusable (a timeout, an abort).
    unusable: Mutex<Option<String>>,
    domain_rank: DomainRank,
}

impl<D: Driver> CommRank<D> {
    fn comm(&self) -> Result<&D::Comm> {
        self.comm
            .as_ref()
            .ok_or_else(|| self.unusable_error("it was dropped".to_owned()))
    }

    fn unusable_error(&self, reason: String) -> GraphError {
        GraphError::CommUnusable {
            communicator: self.control.name().to_owned(),
            rank: self.control.rank(),
            reason,
        }
    }

    /// Marks the communicator unusable (the first reason stays).
    fn mark_unusable(&self, reason: String) {
        self.unusable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(reason);
    }

    /// The bytes of `view`, as the driver takes them.
    fn bytes<'a>(view: &CommView<'a, BufferMemory<D>>) -> Bytes<'a, D::Block> {
        Bytes {
            block: view.memory().block(),
            offset: view.byte_offset(),
            len: view.bytes(),
        }
    }

    /// Checks `view`, the `what` buffer of a collective moving `elements` elements of
    /// `element_bytes` each, against the live memory it names, before a device is handed its
    /// bytes: the memory is this instance's ([`GraphError::ForeignObject`]), the bytes lie
    /// inside it ([`GraphError::ViewOutOfRange`]) and are as many as the collective moves
    /// ([`GraphError::LengthMismatch`]). `DeviceComm::issue` is public: a call need not come
    /// from the communicator, which checked the same from typed views.
    fn check_view(
        &self,
        what: &'static str,
        view: &CommView<'_, BufferMemory<D>>,
        elements: usize,
        element_bytes: usize,
    ) -> Result<()> {
        let memory = view.memory();
        memory.check_instance(self.shared.id, view.instance())?;
        let (start, len) = (view.byte_offset(), memory.num_bytes());
        match start.checked_add(view.bytes()) {
            Some(end) if memory.holds(&(start..end)) => {}
            end => {
                return Err(GraphError::ViewOutOfRange {
                    start: start / element_bytes,
                    end: end.unwrap_or(usize::MAX).div_ceil(element_bytes),
                    len: len / element_bytes,
                });
            }
        }
        let expected = elements
            .checked_mul(element_bytes)
            .ok_or(GraphError::size_overflow("collective"))?;
        if view.bytes() != expected {
            return Err(GraphError::LengthMismatch {
                op: what,
                expected: elements,
                got: view.bytes().div_ceil(element_bytes),
            });
        }
        Ok(())
    }

    /// Checks a call before it reaches a device: a root inside the world, and each view
    /// ([`CommRank::check_view`]).
    fn check_call(&self, call: &CollectiveCall<'_, BufferMemory<D>>) -> Result<()> {
        let signature = call.signature;
        let world = self.control.world_size();
        if let Collective::Broadcast { root } = signature.collective
            && root >= world
        {
            return Err(GraphError::ArgumentMismatch(format!(
                "communicator {}: broadcast from root {root}, outside a world of {world} \
                 rank(s)",
                self.control.name()
            )));
        }
        let element_bytes = signature.dtype.size();
        self.check_view(
            "collective send buffer",
            &call.send,
            signature.send_len(world),
            element_bytes,
        )?;
        self.check_view(
            "collective receive buffer",
            &call.recv,
            signature.recv_len(world),
            element_bytes,
        )
    }
}

impl<D: Driver> DeviceComm<BufferMemory<D>> for CommRank<D> {
    fn issue(&self, call: &CollectiveCall<'_, BufferMemory<D>>) -> Result<()> {
        self.check_usable()?;
        self.check_call(call)?;
        let shared = &self.shared;
        let comm = self.comm()?;
        shared.bind()?;
        let signature = call.signature;
        shared.current.with(|stream| {
            // Decided and issued with the membership settled (see `crate::stream`): a capture
            // begun meanwhile would record the collective without keeping its buffers.
            let settled = stream.inner.settled()?;
            let capture = match settled.capture() {
                Some(entry) => {
                    entry.record.ensure_valid()?;
                    Some(entry)
                }
                None => None,
            };
            if let Some(entry) = &capture {
                let ranks = self.domain_rank.count();
                if entry.record.mode() == CaptureErrorMode::Global && ranks > 1 {
                    return Err(GraphError::CollectiveCaptureMode {
                        communicator: self.control.name().to_owned(),
                        ranks,
                    });
                }
                entry.keep_block_used_on(call.send.memory().allocation(), &stream.inner.clock);
                entry.keep_block_used_on(call.recv.memory().allocation(), &stream.inner.clock);
                if let Some(me) = self.me.upgrade() {
                    entry.keep_object(me);
                }
            }
            let raw = RawCollective {
                signature,
                send: Self::bytes(&call.send),
                recv: Self::bytes(&call.recv),
            };
            let issued = shared.check(
                // SAFETY: the views lie inside live buffers of this instance, as long as the
                // signature says (`check_call`, above); if the stream captures, its capture
                // entry keeps their blocks and this communicator (above) for the graph.
                unsafe { shared.driver.collective(comm, raw, &stream.inner.raw) },
                CallSite::op(signature.collective.name()),
            );
            match issued {
                Ok(()) => {
                    if let (Some(entry), Some(me)) = (&capture, self.me.upgrade()) {
                        entry.collectives.push(me, signature);
                    }
                    Ok(())
                }
                Err(e) => {
                    if matches!(
                        e,
                        GraphError::CommTimeout { .. } | GraphError::CommUnusable { .. }
                    ) {
                        self.mark_unusable(e.to_string());
                    }
                    Err(e)
                }
            }
        })
    }

    fn check_usable(&self) -> Result<()> {
        let reason = self
            .unusable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .or_else(|| {
                self.comm
                    .as_ref()
                    .and_then(|comm| self.shared.driver.comm_error(comm))
            });
        match reason {
            Some(reason) => Err(self.unusable_error(reason)),
            None => Ok(()),
        }
    }

    fn abort(&self, reason: &str) {
        self.mark_unusable(reason.to_owned());
        if let Some(comm) = &self.comm {
            let _ = self.shared.driver.bind();
            self.shared.driver.comm_abort(comm, reason);
        }
    }
}

impl<D: Driver> Drop for CommRank<D> {
    fn drop(&mut self) {
        if let Some(comm) = self.comm.take() {
            // Releasing a device communicator frees device memory (and NCCL waits for its
            // work): like any free, not while a capture of the domain runs.
            let driver = Arc::clone(&self.shared.driver);
            self.shared.domain.free(move || {
                let _ = driver.bind();
                drop(comm);
            });
        }
    }
}

impl<D: Driver> CollectiveBackend<BufferMemory<D>> for DriverBackend<D> {
    fn new_comm_id(&self) -> Result<CommId> {
        let shared = &self.shared;
        shared.bind()?;
        shared.check(
            shared.driver.comm_unique_id(),
            CallSite::op("communicator id"),
        )
    }

    fn join(
        &self,
        id: &CommId,
        control: Arc<ControlPlane>,
    ) -> Result<Arc<dyn DeviceComm<BufferMemory<D>>>> {
        let shared = &self.shared;
        // Joining allocates device memory: an unsafe call while a capture forbids it.
        shared.domain.rules.check_unsafe_call("communicator join")?;
        shared.bind()?;
        let spec = CommSpec {
            id,
            name: control.name(),
            rank: control.rank(),
            world_size: control.world_size(),
            timeout: control.timeout(),
        };
        // Relaxed: the rules allowed the call (see `crate::domain`).
        let comm = shared.check(
            shared.relaxed(|| shared.driver.comm_init(spec)),
            CallSite::unsafe_call("communicator join"),
        )?;
        let domain_rank = DomainRank::register((D::KIND, shared.driver.capture_domain()));
        Ok(Arc::new_cyclic(|me| CommRank {
            me: Weak::clone(me),
            shared: Arc::clone(shared),
            comm: Some(comm),
            control,
            unusable: Mutex::new(None),
            domain_rank,
        }))
    }
}

/// The collectives a capture recorded, per communicator, in order.
pub(crate) struct CapturedCollectives<D: Driver> {
    list: Mutex<Vec<(Arc<CommRank<D>>, CollectiveSignature)>>,
}

impl<D: Driver> Default for CapturedCollectives<D> {
    fn default() -> Self {
        CapturedCollectives {
            list: Mutex::new(Vec::new()),
        }
    }
}

impl<D: Driver> CapturedCollectives<D> {
    pub(crate) fn push(&self, comm: Arc<CommRank<D>>, signature: CollectiveSignature) {
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((comm, signature));
    }

    /// The recorded collectives grouped by communicator (in order of first use), each with its
    /// sequence; empties the record.
    fn take(&self) -> Vec<(Arc<CommRank<D>>, Vec<CollectiveSignature>)> {
        let list = std::mem::take(&mut *self.list.lock().unwrap_or_else(|e| e.into_inner()));
        let mut groups: Vec<(Arc<CommRank<D>>, Vec<CollectiveSignature>)> = Vec::new();
        for (comm, signature) in list {
            match groups.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &comm)) {
                Some((_, sequence)) => sequence.push(signature),
                None => groups.push((comm, vec![signature])),
            }
        }
        groups
    }
}

/// As a capture ends (`ended`: whether it ended well here): compares, for each communicator
/// it recorded collectives of, this rank's sequence with every other rank's — or, when it
/// failed here, tells the others without waiting. Every communicator is compared (so that
/// every peer gets its answer); the first error is returned, and the caller discards the
/// capture. A timeout makes that communicator unusable on this rank.
pub(crate) fn at_capture_end<D: Driver>(entry: &CaptureEntry<D>, ended: bool) -> Result<()> {
    if !ended {
        // The caller returns this rank's own error; the others must not keep their graphs.
        at_capture_discard(entry);
        return Ok(());
    }
    let mut first_error = None;
    for (comm, sequence) in entry.collectives.take() {
        let checked = match comm.check_usable() {
            // A peer's comparison would wait in vain for this rank: tell it the capture is
            // discarded here instead.
            Err(e) => {
                let _ = comm.control.capture_discarded(&sequence);
                Err(e)
            }
            Ok(()) => comm.control.check_capture(&sequence),
        };
        if let Err(e) = checked {
            if matches!(e, GraphError::CommTimeout { .. }) {
                comm.mark_unusable(e.to_string());
            }
            tracing::warn!(communicator = comm.control.name(), rank = comm.control.rank(), error = %e, "capture discarded");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// A capture is discarded before its end (its body failed, or it was reset): tells the other
/// ranks of each communicator it recorded collectives of, without waiting.
pub(crate) fn at_capture_discard<D: Driver>(entry: &CaptureEntry<D>) {
    for (comm, sequence) in entry.collectives.take() {
        if let Err(e) = comm.control.capture_discarded(&sequence) {
            tracing::warn!(communicator = comm.control.name(), error = %e, "could not report a discarded capture");
        }
    }
}
