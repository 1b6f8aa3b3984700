//! `DriverGraph`: the graph implementation behind `Graph<DriverGraph<D>>`, written once for
//! every driver — capture on the current stream into a pool, instantiate, launch, reset.

use std::{path::Path, sync::Arc};

use accel_graph_api::{
    CaptureErrorMode, CapturedNode, GraphError, GraphTopology, InstantiateFlags, PoolId, Result,
    UpdateConflict,
    backend_kit::{
        GraphImpl,
        pools::{MemoryPools, PoolHold},
        write_topology_dot,
    },
    kernel::KernelArg,
};

use crate::{
    BufferMemory, Driver, DriverStream,
    allocator::DriverAllocator,
    capture::{CaptureEntry, KeepAlive},
    editing::{self, NodeRecord, Recorded, Signature, Work},
    errors::CallSite,
    shared::Shared,
};

/// What a capture leaves when it closes: the holds the graph takes over and the nodes the API
/// recorded.
type Closed<D> = (KeepAlive<D>, Recorded<D>);
/// A capture this graph runs.
struct Capturing<D: Driver> {
    entry: Arc<CaptureEntry<D>>,
    stream: DriverStream<D>,
    /// Open from `capture_begin` to the end of `capture_end` (its node count recorded then),
    /// so a subscriber timing spans sees each capture whole.
    span: tracing::Span,
}

impl<D: Driver> Capturing<D> {
    /// Ends the capture in the driver and closes its membership at once, under the membership
    /// locks of its origin and of every stream forked into it, so no op of another thread
    /// decides "capturing" and then reaches a driver whose capture is over (a host callback
    /// would then run a trampoline the graph frees). Returns the driver's result and what the
    /// graph must keep alive.
    ///
    /// With `refuse_open`, a capture holding an open conditional node (begun, not yet ended:
    /// its bodies may be running on another thread) is not ended: `None`. The nodes are begun
    /// and ended with a member's lock settled, so under every member's write lock none is
    /// half-way through either.
    fn end_in_driver(
        &self,
        shared: &Shared<D>,
        refuse_open: bool,
    ) -> Option<(Result<D::Graph>, Closed<D>)> {
        let _origin = self.stream.inner.membership_lock();
        // No stream joins from here: a fork holds the origin's lock for reading.
        let forked = self.entry.forked_members();
        let _forked: Vec<_> = forked.iter().map(|s| s.membership_lock()).collect();
        if refuse_open && self.entry.recorded().conditional_open() {
            return None;
        }
        // The end updates the events recorded in the capture, so it is made in the turn that
        // calls on those events take (see `crate::event`). Inside a host callback a turn in
        // use elsewhere is not waited for: the capture must end whatever happens.
        let turn = self.entry.issuing().ok();
        let ended = shared.bind().and_then(|()| {
            shared.check(
                // SAFETY: ends the capture its graph began (`capture` held it); its
                // membership closes right here, under the same locks, and `finish_capture`
                // closes the rest of its books (domain count, rules); the kept blocks move to
                // this graph, which holds them while the raw graph and its executables live.
                unsafe { shared.driver.end_capture(&self.stream.inner.raw) },
                CallSite::op("capture_end"),
            )
        });
        drop(turn);
        Some((ended, self.entry.close()))
    }

    /// Closes the capture's books once the driver's capture and its membership are over:
    /// the registry of captures, the rules (returns why they invalidated it, if they did), the
    /// domain's count.
    fn close_books(&self, shared: &Shared<D>) -> Option<String> {
        let entry = &self.entry;
        shared.captures().retain(|c| !Arc::ptr_eq(c, entry));
        let invalidated = shared.domain.rules.end(&entry.record);
        shared.domain.capture_ended();
        invalidated
    }

    /// Aborts the capture: ends it in the driver (its graph dropped unlaunched), closes its
    /// books and lets go of what it kept. `None` when a conditional node of it is being built
    /// and `refuse_open` is set.
    fn abort(&self, shared: &Shared<D>, refuse_open: bool) -> Option<()> {
        let (_, closed) = self.end_in_driver(shared, refuse_open)?;
        self.close_books(shared);
        drop(closed);
        Some(())
    }
}

/// The graph implementation of every driver-based backend; users meet it as
/// `accel_graph_api::Graph<DriverGraph<D>>` (`CudaGraph`, `MockGraph`...).
///
/// The raw graph is kept after instantiation even without `keep_graph` (the front object
/// refuses access to it then): updates set its nodes along with the executable's, and a graph
/// replayed while a stream captures is embedded from it as a child node.
pub struct DriverGraph<D: Driver> {
    shared: Arc<Shared<D>>,
    serial: u64,
    capture: Option<Capturing<D>>,
    raw: Option<D::Graph>,
    /// The graph the executable was instantiated from, when `raw` has been replaced since (by
    /// an update from another graph): the driver names the executable's nodes by this graph's.
    source: Option<D::Graph>,
    exec: Option<D::Exec>,
    pool: Option<PoolHold<DriverAllocator<D>>>,
    /// Blocks and host callbacks the captured work uses.
    kept: KeepAlive<D>,
    /// The nodes the API issued in the capture, for editing.
    nodes: Vec<NodeRecord<D>>,
    /// The capture those nodes came from (what [`CapturedNode`]s name).
    capture_serial: u64,
    flags: InstantiateFlags,
}

impl<D: Driver> DriverGraph<D> {
    pub(crate) fn new(shared: Arc<Shared<D>>, flags: InstantiateFlags) -> Self {
        DriverGraph {
            serial: shared.next_graph(),
            shared,
            capture: None,
            raw: None,
            source: None,
            exec: None,
            pool: None,
            kept: KeepAlive::default(),
            nodes: Vec::new(),
            capture_serial: 0,
            flags,
        }
    }

    /// What updates compare the graph's nodes by.
    pub(crate) fn signatures(&self) -> Vec<Signature> {
        self.nodes.iter().map(|n| n.work.signature()).collect()
    }

    /// Number of distinct memory blocks the graph's captured work uses (and keeps alive).
    pub fn held_blocks(&self) -> usize {
        self.kept.blocks()
    }

    /// Ends the capture's bookkeeping once the driver's capture and its membership are over
    /// ([`Capturing::end_in_driver`]): the domain's count goes down, the holds move to the
    /// graph. Returns why the rules invalidated it, if they did.
    fn finish_capture(
        &mut self,
        capturing: &Capturing<D>,
        (kept, recorded): Closed<D>,
    ) -> Option<String> {
        let invalidated = capturing.close_books(&self.shared);
        self.kept = kept;
        self.nodes = recorded.nodes;
        self.capture_serial = recorded.capture;
        invalidated
    }

    /// Invalidates a capture whose end came while one of its conditional nodes was being
    /// built, and the error that refusal is.
    fn refuse_end_under_conditional(capturing: &Capturing<D>) -> GraphError {
        capturing
            .entry
            .record
            .invalidate("capture_end() was called while a conditional node was being built");
        GraphError::CaptureEndInsideBody
    }

    /// Drops the driver's graph objects with the device bound (their release may need it).
    fn drop_objects(&mut self) {
        if self.raw.is_some() || self.exec.is_some() || self.source.is_some() {
            let _ = self.shared.driver.bind();
            self.exec = None;
            self.raw = None;
            self.source = None;
        }
    }
}

impl<D: Driver> GraphImpl for DriverGraph<D> {
    type RawGraph = D::Graph;
    type Executable = D::Exec;
    type Memory = BufferMemory<D>;

    fn backend_name(&self) -> &'static str {
        self.shared.name()
    }

    fn capture_begin(&mut self, pool: Option<PoolId>, mode: CaptureErrorMode) -> Result<PoolId> {
        let shared = Arc::clone(&self.shared);
        if crate::host::in_host_callback() {
            // No runtime call is permitted in a host function; and a wait holding the domain's
            // gate may be waiting for this very callback, which the gate's write lock would
            // then wait for in turn.
            return Err(GraphError::Unsupported {
                what: "capture_begin inside a host callback: no runtime call is permitted in \
                       a host function (CUDA answers CUDA_ERROR_NOT_PERMITTED)"
                    .to_owned(),
            });
        }
        let stream = shared.current.get();
        if stream.inner.instance != shared.id {
            return Err(GraphError::ForeignObject { what: "stream" });
        }
        if stream.is_default() && shared.capabilities.uncapturable_default_stream {
            return Err(GraphError::StreamNotCapturable);
        }
        let pool = match pool {
            Some(pool) => {
                shared.pools.check_issued(pool)?;
                pool
            }
            None => shared.pools.issue_private_pool(),
        };
        let hold = MemoryPools::hold_pool(&shared.pools, pool);
        // The membership and the driver's capture change together (see `crate::stream`): an op
        // another thread issues on the stream runs either before both or after both.
        let membership = stream.inner.membership_lock();
        // Counted and registered before the driver begins: from here on, frees of the domain
        // wait and the rules refuse the unsafe calls the capture forbids.
        let record = shared.domain.capture_starting(mode);
        let entry = CaptureEntry::new(
            pool,
            record,
            self.serial,
            &stream.inner,
            shared.turn.clone(),
        );
        // A stream taking part in another capture keeps that membership (the driver refuses
        // the begin); a new entry is open, so otherwise the join cannot be refused.
        let joined = stream.inner.capture().is_none() && entry.join(&stream.inner);
        let begun = shared.bind().and_then(|()| {
            shared.check(
                // SAFETY: this is the driver layer beginning its own capture: the domain
                // counts it (`capture_starting` above: frees are gated) and the stream joined
                // the capture's entry, under its membership lock, so the ops issued on it are
                // kept alive.
                unsafe { shared.driver.begin_capture(&stream.inner.raw, mode) },
                CallSite::op("capture_begin"),
            )
        });
        let id = begun.and_then(|()| {
            match shared.check(
                shared.driver.capture_id(&stream.inner.raw),
                CallSite::op("capture_begin"),
            ) {
                Ok(Some(id)) if joined => Ok(id),
                Ok(Some(_)) => {
                    // The driver began a capture on a stream this layer counts in another one
                    // (the driver's begin succeeds only where the stream captured nothing):
                    // end it again, so that nothing is left capturing that no graph owns.
                    // SAFETY: ends the capture begun just above, whose books are closed right
                    // after; the graph is dropped unlaunched.
                    let _ = unsafe { shared.driver.end_capture(&stream.inner.raw) };
                    Err(GraphError::CaptureInvalidated {
                        reason: "capture_begin on a stream that takes part in another capture"
                            .to_owned(),
                    })
                }
                Ok(None) => {
                    // Begun but not reported active: end it again so nothing stays capturing.
                    // SAFETY: ends the capture begun just above, whose books (the domain's
                    // count, the entry and the stream's membership) are closed right after
                    // (`entry.close()`, `capture_ended()`); the graph is dropped unlaunched.
                    let _ = unsafe { shared.driver.end_capture(&stream.inner.raw) };
                    Err(GraphError::CaptureInvalidated {
                        reason: "the driver reported no capture right after beginning one"
                            .to_owned(),
                    })
                }
                Err(e) => {
                    // SAFETY: as above: ends the capture begun just above, whose books are
                    // closed right after; the graph is dropped unlaunched.
                    let _ = unsafe { shared.driver.end_capture(&stream.inner.raw) };
                    Err(e)
                }
            }
        });
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                let _ = entry.close();
                drop(membership);
                shared.domain.rules.end(&entry.record);
                shared.domain.capture_ended();
                return Err(e);
            }
        };
        entry.set_driver_id(id);
        editing::note_top_graph(&shared, &entry, &stream);
        drop(membership);
        shared.captures().push(Arc::clone(&entry));
        self.pool = Some(hold);
        let span = tracing::info_span!(
            "capture",
            backend = shared.name(),
            graph = self.serial,
            %pool,
            %mode,
            nodes = tracing::field::Empty,
        );
        self.capture = Some(Capturing {
            entry,
            stream,
            span,
        });
        tracing::debug!(backend = shared.name(), graph = self.serial, %pool, %mode, "capture begun");
        Ok(pool)
    }

    fn capture_end(&mut self) -> Result<usize> {
        let Some(capturing) = self.capture.as_ref() else {
            return Err(GraphError::NotCapturing);
        };
        // Both checks leave the capture running, and come before the driver: CUDA's
        // `cuStreamEndCapture` from another thread fails *and terminates the capture*. The
        // thread first: outside relaxed mode no other thread can end the capture, whatever
        // its current stream, so `CaptureStreamMismatch` (make the capture stream current)
        // would give advice that cannot be followed there.
        capturing.entry.record.check_end()?;
        // The capture holds a conditional node being built (from inside its body, or, in
        // relaxed mode, from another thread): ending it now would end the driver's capture
        // under the half-built node and keep only the nodes before it. The node ends when its
        // bodies returned; the capture cannot mean what its author wrote any more. Checked
        // here without locks for a call from inside a body (whose thread holds none of them
        // then), and again under them below.
        if capturing.entry.recorded().conditional_open() {
            return Err(Self::refuse_end_under_conditional(capturing));
        }
        if self.shared.current.get() != capturing.stream {
            return Err(GraphError::CaptureStreamMismatch);
        }
        let Some(capturing) = self.capture.take() else {
            return Err(GraphError::NotCapturing);
        };
        let shared = Arc::clone(&self.shared);
        let Some((ended, kept)) = capturing.end_in_driver(&shared, true) else {
            let refused = Self::refuse_end_under_conditional(&capturing);
            self.capture = Some(capturing);
            return Err(refused);
        };
        let invalidated = self.finish_capture(&capturing, kept);
        // The collectives it recorded are compared with the other ranks', with whether it
        // ended well, before `capture_end` returns: either every rank keeps its graph or none
        // does (a mismatch discards it below).
        let collectives = crate::collectives::at_capture_end(
            &capturing.entry,
            ended.is_ok() && invalidated.is_none(),
        );
        let graph = match (ended, invalidated) {
            (_, Some(reason)) => return Err(GraphError::CaptureInvalidated { reason }),
            (Err(GraphError::WrongThread), None) => {
                // Only if the driver's idea of the thread differs from ours; the driver ended
                // the capture, so it is over here too.
                return Err(GraphError::CaptureInvalidated {
                    reason: "the driver ended the capture as ended from the wrong thread"
                        .to_owned(),
                });
            }
            (Err(GraphError::UnsafeDuringCapture { operation, .. }), None) => {
                return Err(GraphError::CaptureInvalidated { reason: operation });
            }
            (Err(e), None) => return Err(e),
            (Ok(graph), None) => graph,
        };
        collectives?;
        let count = shared.check(
            shared.driver.node_count(&graph),
            CallSite::op("capture_end"),
        );
        if let Ok(nodes) = &count {
            capturing.span.record("nodes", nodes);
        }
        self.raw = Some(graph);
        count
    }

    fn instantiate(&mut self) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        shared.bind()?;
        let Some(raw) = self.raw.as_ref() else {
            return Err(GraphError::RawGraphUnavailable);
        };
        let _span =
            tracing::info_span!("instantiate", backend = shared.name(), graph = self.serial)
                .entered();
        // Relaxed: instantiating this graph while another graph captures (same thread, global
        // mode) must not invalidate that capture.
        let exec = shared.relaxed(|| {
            shared.check(
                shared.driver.instantiate(raw, self.flags),
                CallSite::op("instantiate"),
            )
        })?;
        // The new executable names its nodes by the raw graph's.
        self.source = None;
        for node in &mut self.nodes {
            node.exec_key = node.key;
        }
        let exec = self.exec.insert(exec);
        shared.current.with(|stream| {
            // An upload on a capturing stream would join that capture; the first launch
            // uploads instead.
            let settled = stream.inner.settled_outside_capture()?;
            if settled.capture().is_none() {
                let _upload = tracing::info_span!("upload", graph = self.serial).entered();
                shared.check(
                    shared.driver.upload_exec(exec, &stream.inner.raw),
                    CallSite::op("instantiate"),
                )
            } else {
                Ok(())
            }
        })
    }

    fn replay(&mut self) -> Result<()> {
        let shared = &self.shared;
        // A disabled span costs one load of its call site's interest (measured in
        // docs/BENCHMARKS.md): cheap next to a launch.
        let _span = tracing::debug_span!("replay", graph = self.serial).entered();
        shared.bind()?;
        // Frees that host callbacks of earlier replays deferred run now (a flag test when
        // there are none).
        shared.domain.flush();
        shared.current.with(|stream| {
            // Decided and launched (or recorded) with the membership settled: a capture
            // another thread begins or ends on the stream meanwhile waits for this call.
            let settled = stream.inner.settled()?;
            if let Some(entry) = settled.capture() {
                return self.record_as_child(entry, stream);
            }
            let Some(exec) = self.exec.as_ref() else {
                return Err(GraphError::NotInstantiated);
            };
            shared.check(
                // SAFETY: the executable belongs to this graph, which holds the blocks its
                // capture touched and its host callbacks' data until it is reset or dropped
                // (`&mut self` here); the stream was just checked not to be capturing.
                unsafe { shared.driver.launch_exec(exec, &stream.inner.raw) },
                CallSite::op("replay"),
            )
        })?;
        shared.host_panics.check()
    }

    fn drop_raw_graph(&mut self) {
        // Kept: an update sets its nodes along with the executable's, and a replay while a
        // stream captures embeds it as a child node. (It is host memory of the driver only;
        // the front object refuses users access to it.)
    }

    fn reset(&mut self) {
        if let Some(capturing) = self.capture.take() {
            crate::collectives::at_capture_discard(&capturing.entry);
            // Aborts the capture. Errors are ignored: the capture is discarded either way (the
            // driver ends it even when it answers "wrong thread" to a reset from elsewhere),
            // and the raw graph returned is dropped unlaunched.
            if capturing.abort(&self.shared, true).is_none() {
                // A conditional node of the capture is being built (its body runs, on this
                // thread or another): the driver's capture must not end under it (the body's
                // graph belongs to the node). The capture is invalidated and aborted as the
                // last open node ends, by the thread building it.
                capturing.entry.record.invalidate(
                    "the graph was reset or dropped while a conditional node of its capture \
                     was being built",
                );
                let shared = Arc::clone(&self.shared);
                let entry = Arc::clone(&capturing.entry);
                let abort: Box<dyn FnOnce() + Send> = Box::new(move || {
                    let _ = capturing.abort(&shared, false);
                });
                let now = entry.recorded().abandon(abort);
                if let Some(abort) = now {
                    // The node ended meanwhile: abort now.
                    abort();
                }
            }
        }
        self.drop_objects();
        self.nodes.clear();
        let kept = std::mem::take(&mut self.kept);
        // Launches in flight may still call the host callbacks; the memory holds go now (a
        // device free waits for the work using it, and a pool block only returns to its pool).
        self.shared.retire_callbacks(kept.callbacks);
        self.pool = None;
    }

    fn debug_dump(&self, path: &Path) -> Result<()> {
        let Some(raw) = self.raw.as_ref() else {
            return Err(GraphError::RawGraphUnavailable);
        };
        self.shared.bind()?;
        match self.shared.driver.dot_dump(raw, path) {
            Some(result) => self.shared.check(result, CallSite::op("debug_dump")),
            None => write_topology_dot(self, path),
        }
    }

    fn topology(&self) -> Result<GraphTopology> {
        let Some(raw) = self.raw.as_ref() else {
            return Err(GraphError::RawGraphUnavailable);
        };
        self.shared.bind()?;
        self.shared
            .check(self.shared.driver.topology(raw), CallSite::op("nodes"))
    }

    fn raw_graph(&self) -> Option<&D::Graph> {
        self.raw.as_ref()
    }

    fn executable(&self) -> Option<&D::Exec> {
        self.exec.as_ref()
    }

    fn update_from(&mut self, other: &Self) -> Result<()> {
        self.update_from_graph(other)
    }

    fn update_node(
        &mut self,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, BufferMemory<D>>)],
    ) -> Result<()> {
        self.update_one(node, args)
    }
}

impl<D: Driver> DriverGraph<D> {
    /// Records this graph as one node of the capture `stream` takes part in (a replay while
    /// the stream captures).
    fn record_as_child(
        &self,
        entry: &Arc<CaptureEntry<D>>,
        stream: &DriverStream<D>,
    ) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        entry.record.ensure_valid()?;
        if !shared.capabilities.child_graphs {
            return Err(GraphError::Unsupported {
                what: format!(
                    "replaying a graph on a capturing stream (a child-graph node) on {} \
                     (capabilities().child_graphs is false); replay it on a stream that is not \
                     capturing",
                    shared.capabilities.device_name
                ),
            });
        }
        let Some(raw) = self.raw.as_ref() else {
            return Err(GraphError::RawGraphUnavailable);
        };
        let signatures = self.signatures();
        if signatures.iter().any(Signature::has_conditional) {
            return Err(GraphError::Unsupported {
                what: editing::CONDITIONAL_CHILD.to_owned(),
            });
        }
        if signatures.iter().any(Signature::has_host) && editing::in_body(&shared, entry, stream) {
            return Err(GraphError::Unsupported {
                what: "a graph with host callbacks as a child node of a conditional node's \
                       body (conditional bodies hold device work only: kernels, copies, \
                       memsets, child graphs and conditional nodes)"
                    .to_owned(),
            });
        }
        shared.check(
            // SAFETY: the stream captures through this layer (its entry); the entry takes
            // holds on everything this graph's work uses right after, for the capturing graph.
            unsafe { shared.driver.launch_child(raw, &stream.inner.raw) },
            CallSite::op("replay (as a child graph)"),
        )?;
        entry.keep_all(&self.kept);
        editing::record(&shared, entry, stream, || {
            Work::Fixed(Signature::Child(signatures))
        });
        Ok(())
    }

    /// [`GraphImpl::update_from`].
    fn update_from_graph(&mut self, other: &Self) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        if other.shared.id != shared.id {
            return Err(GraphError::ForeignObject { what: "graph" });
        }
        if !shared.capabilities.graph_update {
            return Err(GraphError::Unsupported {
                what: format!(
                    "graph update on {} (capabilities().graph_update is false)",
                    shared.capabilities.device_name
                ),
            });
        }
        if self.capture.is_some() || other.capture.is_some() {
            return Err(GraphError::NotCaptured {
                operation: "update_from",
            });
        }
        let (Some(raw), Some(theirs)) = (self.raw.as_ref(), other.raw.as_ref()) else {
            return Err(GraphError::RawGraphUnavailable);
        };
        let (mine, their_nodes) = (self.signatures(), other.signatures());
        if mine
            .iter()
            .chain(&their_nodes)
            .any(Signature::has_conditional)
        {
            return Err(GraphError::UpdateRefused {
                conflict: UpdateConflict::NotUpdatable,
                node: None,
                reason: editing::CONDITIONAL_UPDATE.to_owned(),
            });
        }
        editing::compare(&mine, &their_nodes, "").map_err(editing::Mismatch::into_error)?;
        shared.bind()?;
        let site = CallSite::op("update_from");
        // The graph's raw graph becomes a copy of the other's (the other stays as it is), so
        // that a later instantiation or use as a child graph replays the new parameters.
        let clone = shared
            .check(shared.driver.clone_graph(theirs), site)
            .map_err(|e| GraphError::UpdateRefused {
                conflict: UpdateConflict::Driver,
                node: None,
                reason: format!("the device's runtime cannot copy the source graph: {e}"),
            })?;
        let mut nodes = Vec::with_capacity(other.nodes.len());
        for (mine, their) in self.nodes.iter().zip(&other.nodes) {
            let key = match their.key {
                Some(key) => {
                    Some(shared.check(shared.driver.find_in_clone(key, theirs, &clone), site)?)
                }
                None => None,
            };
            nodes.push(NodeRecord {
                key,
                exec_key: mine.exec_key,
                work: their.work.clone(),
            });
        }
        if let Some(exec) = self.exec.as_mut() {
            let source = self.source.as_ref().unwrap_or(raw);
            shared
                .relaxed(|| shared.check(shared.driver.update_exec(exec, source, &clone), site))?;
        }
        // The executable now runs the other's work: hold what it uses, let go of the rest.
        let kept = std::mem::replace(&mut self.kept, other.kept.duplicate());
        shared.retire_callbacks(kept.callbacks);
        let previous = self.raw.replace(clone);
        if self.exec.is_some() && self.source.is_none() {
            self.source = previous;
        } else {
            let _ = shared.driver.bind();
            drop(previous);
        }
        self.nodes = nodes;
        Ok(())
    }

    /// [`GraphImpl::update_node`].
    fn update_one(
        &mut self,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, BufferMemory<D>>)],
    ) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        if !shared.capabilities.graph_update {
            return Err(GraphError::Unsupported {
                what: format!(
                    "node update on {} (capabilities().graph_update is false)",
                    shared.capabilities.device_name
                ),
            });
        }
        let index = node.index();
        let unknown = |why: &str| GraphError::UpdateRefused {
            conflict: UpdateConflict::UnknownNode,
            node: Some(index),
            reason: format!("{node} {why}"),
        };
        if node.graph() != self.serial {
            return Err(unknown(&format!(
                "belongs to graph {}, not to this one ({})",
                node.graph(),
                self.serial
            )));
        }
        if node.capture() != self.capture_serial {
            return Err(unknown(
                "comes from an earlier capture of this graph (it was reset since)",
            ));
        }
        let Some(record) = self.nodes.get(index) else {
            return Err(unknown("is not among the graph's nodes"));
        };
        let rebound = editing::rebind(shared.id, index, &record.work, args)?;
        let Some(raw) = self.raw.as_mut() else {
            return Err(GraphError::RawGraphUnavailable);
        };
        shared.bind()?;
        shared.check(
            // SAFETY: every block the new work binds is held by this graph right below,
            // before any launch can use it (`&mut self`), and the blocks it no longer binds
            // are let go only after the driver took the new bindings.
            unsafe {
                editing::apply(
                    &*shared.driver,
                    raw,
                    self.exec.as_mut(),
                    record,
                    &rebound.work,
                    index,
                )
            },
            CallSite::op("update_node"),
        )?;
        for memory in &rebound.added {
            self.kept.add_use(memory.allocation());
        }
        for id in rebound.removed {
            self.kept.release_use(id);
        }
        if let Some(record) = self.nodes.get_mut(index) {
            record.work = rebound.work;
        }
        Ok(())
    }
}

impl<D: Driver> Drop for DriverGraph<D> {
    fn drop(&mut self) {
        // `Graph<_>` resets on drop already; this covers an implementation dropped on its own.
        self.reset();
    }
}

impl<D: Driver> std::fmt::Debug for DriverGraph<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverGraph")
            .field("backend", &D::KIND)
            .field("serial", &self.serial)
            .field("capturing", &self.capture.is_some())
            .field("raw", &self.raw.is_some())
            .field("instantiated", &self.exec.is_some())
            .field("held_blocks", &self.kept.blocks())
            .finish()
    }
}
