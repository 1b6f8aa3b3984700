//! `DriverBackend`: the [`Backend`] written once over a [`Driver`].

mod interop;

use std::sync::Arc;

use accel_graph_api::{
    Backend, BackendKind, BlockInfo, Capabilities, CapturedNode, ConditionElement, ConditionalKind,
    DeviceBuffer, Element, EventOptions, FloatElement, Gemm, Graph, GraphError, GraphOptions,
    HostCallback, InstanceCache, MemoryStats, PoolId, PortableOp, PortableOps, Result, View,
    backend_kit::{CollectiveBackend, new_graph},
    kernel::{Kernel, KernelArg, Param, check_arguments, check_grid},
};

use crate::{
    BufferMemory, Driver, DriverBuffer, DriverEvent, DriverGraph, DriverResult, DriverStream,
    api::{Bytes, RawArg, Region},
    capture::CaptureEntry,
    editing::{self, Bound, BoundArg, KernelWork, Signature, Work},
    errors::{CallSite, waits_for_capturing_stream},
    host::{self, HostCall},
    shared::Shared,
    stream::Settled,
};

/// A backend over driver `D`: streams, events, memory with graph pools, the portable ops and
/// graphs with PyTorch's semantics. Clones share the instance.
///
/// Each backend crate wraps it in its own type (`CudaBackend`, `MockBackend`, ...) with
/// [`backend_newtype!`](crate::backend_newtype); the driver's own extras are reached through
/// [`DriverBackend::driver`].
pub struct DriverBackend<D: Driver> {
    pub(crate) shared: Arc<Shared<D>>,
}

impl<D: Driver> Clone for DriverBackend<D> {
    fn clone(&self) -> Self {
        DriverBackend {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<D: Driver> std::fmt::Debug for DriverBackend<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("kind", &D::KIND)
            .field("device", &self.shared.capabilities.device_name)
            .field("instance", &format_args!("{:#x}", self.shared.id))
            .finish()
    }
}

/// How one attempt of a `wait_event` ended.
enum WaitOutcome {
    /// Waited (and forked into a capture where the event's record says so).
    Done,
    /// The event was recorded again between the decision and the wait: nothing was done.
    Rerecorded,
}

impl<D: Driver> DriverBackend<D> {
    /// A backend instance over `driver`.
    pub fn new(driver: D) -> Self {
        DriverBackend {
            shared: Arc::new(Shared::new(driver)),
        }
    }

    /// The driver, for what only this backend offers.
    pub fn driver(&self) -> &D {
        &self.shared.driver
    }

    pub(crate) fn shared(&self) -> &Arc<Shared<D>> {
        &self.shared
    }

    /// True while any capture of the instance's capture domain runs.
    pub fn any_capture_active(&self) -> bool {
        self.shared.domain.capture_active()
    }

    /// Device bytes kept for reuse from blocks nothing uses any more (released buffers and
    /// pools), outside [`MemoryStats`]' figures: later allocations take them without a driver
    /// allocation, as PyTorch's caching allocator does; [`Backend::empty_cache`] gives them
    /// back to the device.
    pub fn cached_bytes(&self) -> usize {
        self.shared.pools.raw().cached_bytes()
    }

    /// Bytes of device frees waiting for a capture to end.
    pub fn deferred_free_bytes(&self) -> usize {
        self.shared.pools.raw().deferred_bytes()
    }

    fn own_stream(&self, stream: &DriverStream<D>) -> Result<()> {
        if stream.inner.instance == self.shared.id {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "stream" })
        }
    }

    fn own_event(&self, event: &DriverEvent<D>) -> Result<()> {
        if event.instance == self.shared.id {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "event" })
        }
    }

    /// One attempt of `wait_event`: decides whether the wait forks the current stream into a
    /// capture, by where the event was last recorded, and waits — unless another thread
    /// recorded the event again meanwhile ([`WaitOutcome::Rerecorded`], nothing done).
    fn wait_event_once(&self, event: &DriverEvent<D>) -> Result<WaitOutcome> {
        let shared = &self.shared;
        let stream = shared.current.get();
        // The wait may fork the stream into a capture: its membership changes together with
        // the driver's wait, under its membership lock (see `crate::stream`).
        let membership = stream.inner.membership_lock_for_call()?;
        let member_of = stream.inner.capture();
        // A wait on a capturing stream changes its capture's graph (a join edge): it takes
        // the turn like any call into a capture (see `crate::stream::Issuing`).
        let _issuing = member_of
            .as_deref()
            .map(CaptureEntry::issuing)
            .transpose()?;
        let joined_before = match &member_of {
            Some(entry) => {
                entry.record.ensure_valid()?;
                if event.options.external && editing::in_body(shared, entry, &stream) {
                    return Err(editing::not_in_body("an external event's wait"));
                }
                true
            }
            None => false,
        };
        // A wait on an event recorded in a capture forks the stream into that capture (an
        // external event is a node of its graph instead). The stream joins *before* the
        // driver's wait, so an op another thread issues on it meanwhile is kept alive too;
        // the capture's origin is held for reading, so the capture cannot end meanwhile.
        let target = if joined_before || event.options.external {
            None
        } else {
            event.recorded_in()
        };
        if membership.is_none() && target.is_some() {
            // A host callback of a call holding this stream settled would fork it.
            return Err(crate::stream::busy_in_callback());
        }
        let origin = target
            .as_ref()
            .and_then(|entry| entry.origin())
            // Our own write lock covers the stream itself.
            .filter(|origin| !Arc::ptr_eq(origin, &stream.inner));
        let _origin = origin.as_ref().map(|origin| origin.settled()).transpose()?;
        let decided_by_record = !(joined_before || event.options.external);
        let forked = target.clone().filter(|entry| entry.join(&stream.inner));
        let waited = Self::wait_in_driver(
            shared,
            event,
            &member_of,
            &stream,
            target.as_ref(),
            decided_by_record,
        );
        if !matches!(waited, Ok(WaitOutcome::Done)) {
            // The stream joined the capture for this wait only.
            if let Some(entry) = &forked {
                entry.leave(&stream.inner);
            }
            return waited;
        }
        if let Some(entry) = &member_of
            && event.options.external
        {
            // The wait is a node of the capture's graph that names the event: the graph keeps
            // the driver's event alive, whenever the user drops theirs.
            entry.keep_object(event.hold());
        }
        // In a capture the wait is a fork or join edge of the graph; eagerly, stream order.
        if !(event.options.external && (joined_before || forked.is_some())) {
            shared
                .pools
                .order()
                .wait(&stream.inner.clock, &event.stamp());
        }
        if !joined_before
            && forked.is_none()
            && let Some(id) = shared.check(
                shared.driver.capture_id(&stream.inner.raw),
                CallSite::op("wait_event"),
            )?
        {
            // The driver says the wait forked the stream into a capture this layer did not
            // see the event recorded in: join it now.
            let entry = shared
                .captures()
                .iter()
                .find(|c| c.driver_id() == Some(id))
                .cloned();
            if let Some(entry) = entry {
                let _ = entry.join(&stream.inner);
            }
        }
        Ok(WaitOutcome::Done)
    }

    /// The driver's wait of [`DriverBackend::wait_event_once`], with the event held: refused
    /// where it would join graphs the driver cannot join, skipped
    /// ([`WaitOutcome::Rerecorded`]) where the event's record is no longer the one the fork
    /// was decided by (`target`, when `decided_by_record`).
    fn wait_in_driver(
        shared: &Shared<D>,
        event: &DriverEvent<D>,
        member_of: &Option<Arc<CaptureEntry<D>>>,
        stream: &DriverStream<D>,
        target: Option<&Arc<CaptureEntry<D>>>,
        decided_by_record: bool,
    ) -> Result<WaitOutcome> {
        let call = event.linked()?;
        // A conditional body's graph is a capture of its own in the driver, with no edge to
        // work outside it: a wait inside a body on any other record (eager, in the enclosing
        // graph, in another body), or a wait outside a body on a record made in one, would
        // merge two captures. The driver refuses that and invalidates the captures, and the
        // CUDA driver then faults ending or destroying them. Refused here, before the driver;
        // the captures go on.
        same_graph_rule(shared, member_of, stream, &call)?;
        // The fork was decided by where the event was last recorded, read before the event
        // was held for the driver's wait: a record another thread made in between would have
        // the driver wait on another record (fork from another capture, or from none) than
        // this layer joined the stream to.
        let same_record = match (target, call.capture()) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, &b),
            (None, None) => true,
            _ => false,
        };
        if decided_by_record && !same_record {
            return Ok(WaitOutcome::Rerecorded);
        }
        shared.check(
            // SAFETY: a stream this wait forks into a capture has joined that capture's entry
            // (membership recorded) before this call, so the ops this layer issues on it are
            // kept alive by the capture's graph.
            unsafe { shared.driver.wait_event(&stream.inner.raw, &event.raw) },
            CallSite::op("wait_event"),
        )?;
        Ok(WaitOutcome::Done)
    }

    /// The bytes of a view, as the driver's kernels and GEMM take them.
    fn bytes_of<'v, T: Element>(view: &View<'v, DriverBuffer<D, T>>) -> Bytes<'v, D::Block> {
        Bytes {
            block: view.buffer().block(),
            offset: view.byte_offset(),
            len: view.num_bytes(),
        }
    }

    fn own_buffer<T: Element>(&self, buffer: &DriverBuffer<D, T>) -> Result<()> {
        if buffer.instance_id() == self.shared.id {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "buffer" })
        }
    }

    /// The rule for a call that waits for a stream's work (stream synchronize, the blocking
    /// copies on the current stream), decided while `stream`'s membership is settled (and
    /// made before that ends): on a capturing stream it can never finish, so it fails and
    /// invalidates the capture in every mode; elsewhere it is an unsafe call.
    fn blocking_call(&self, operation: &str, stream: &Settled<'_, D>) -> Result<()> {
        if let Some(entry) = stream.capture() {
            entry
                .record
                .invalidate(format!("{operation} on the capturing stream"));
            // It is an unsafe call all the same: the other captures that forbid it (this
            // thread's other non-relaxed captures, other threads' global ones) are
            // invalidated too, as CUDA does; the error names the conflict with this stream.
            let _ = self.shared.domain.rules.check_unsafe_call(operation);
            return Err(waits_for_capturing_stream(operation, entry.record.mode()));
        }
        self.shared.domain.rules.check_unsafe_call(operation)
    }

    /// A copy between `view` and `host_len` host elements that waits for the current stream
    /// (`upload`, `download`): checked, decided with the stream settled, refused on a
    /// capturing stream ([`DriverBackend::blocking_call`]) and made by `copy` through the
    /// driver on the stream's raw handle.
    fn blocking_copy<T: Element>(
        &self,
        operation: &'static str,
        view: &View<'_, DriverBuffer<D, T>>,
        host_len: usize,
        copy: impl FnOnce(&D, &D::Stream) -> DriverResult<()>,
    ) -> Result<()> {
        self.own_buffer(view.buffer())?;
        if host_len != view.len() {
            return Err(GraphError::LengthMismatch {
                op: operation,
                expected: view.len(),
                got: host_len,
            });
        }
        let shared = &self.shared;
        let stream = shared.current.get();
        let settled = stream.inner.settled()?;
        self.blocking_call(operation, &settled)?;
        shared.bind()?;
        let began = shared.pools.order().now();
        shared.check(
            // Relaxed: the rules allowed the copy (see `crate::domain`).
            shared.relaxed(|| copy(&shared.driver, &stream.inner.raw)),
            CallSite::unsafe_call(operation),
        )?;
        // The copy ran in the stream's order, after its earlier work, and was waited for.
        stream.inner.clock.completed_before(began);
        drop(settled);
        self.after_wait()
    }

    /// Waits through the driver (`wait`, an unsafe call named `operation`) for work on the
    /// device. The caller then polls the frees waiting for that work and checks the host
    /// callbacks that ran ([`DriverBackend::after_driver_wait`]), once it holds no stream's
    /// membership lock (the poll settles other streams).
    fn driver_wait(
        &self,
        operation: &str,
        wait: impl FnOnce(&D) -> DriverResult<()>,
    ) -> Result<()> {
        let shared = &self.shared;
        shared.bind()?;
        // Relaxed: the rules allowed the wait (see `crate::domain`).
        shared.check(
            shared.relaxed(|| wait(&shared.driver)),
            CallSite::unsafe_call(operation),
        )
    }

    /// After [`DriverBackend::driver_wait`]: frees that waited for the work are due, and host
    /// callbacks that ran may have panicked.
    fn after_driver_wait(&self) -> Result<()> {
        self.shared.poll_pending_frees();
        self.after_wait()
    }

    /// After a call that waited for device work: host callbacks that ran may have panicked.
    fn after_wait(&self) -> Result<()> {
        self.shared.host_panics.check()
    }

    /// The capture a settled stream takes part in, checked to be still valid.
    fn valid_capture<'s>(stream: &'s Settled<'_, D>) -> Result<Option<&'s Arc<CaptureEntry<D>>>> {
        match stream.capture() {
            Some(entry) => {
                entry.record.ensure_valid()?;
                Ok(Some(entry))
            }
            None => Ok(None),
        }
    }
}

impl<D: Driver> PortableOps for DriverBackend<D> {
    type Memory = BufferMemory<D>;
    type Buffer<T: Element> = DriverBuffer<D, T>;

    fn launch(&self, op: PortableOp<View<'_, DriverBuffer<D>>>) -> Result<()> {
        let (out, input) = op.operands();
        self.own_buffer(out.buffer())?;
        if let Some(input) = input {
            self.own_buffer(input.buffer())?;
        }
        op.check_lengths(|v| v.len())?;
        if let Some(input) = input
            && input.overlaps(&out)
            && !input.same_memory(&out)
        {
            return Err(GraphError::OverlappingOperands {
                op: op.name(),
                detail: format!(
                    "the operands (elements {}..{} and {}..{} of one buffer) overlap in part",
                    out.offset(),
                    out.offset() + out.len(),
                    input.offset(),
                    input.offset() + input.len()
                ),
            });
        }
        let shared = &self.shared;
        shared.bind()?;
        shared.current.with(|stream| {
            // Decided and launched with the membership settled (see `crate::stream`).
            let settled = stream.inner.settled()?;
            let capture = Self::valid_capture(&settled)?;
            if let Some(entry) = capture {
                entry.keep_block_used_on(out.buffer().memory(), &stream.inner.clock);
                if let Some(input) = input {
                    entry.keep_block_used_on(input.buffer().memory(), &stream.inner.clock);
                }
            }
            let regions = op.map(|v| Region {
                block: v.buffer().block(),
                offset: v.offset(),
                len: v.len(),
            });
            shared.check(
                // SAFETY: the regions come from views of live `DriverBuffer`s of this instance
                // (owned, checked above) whose lengths the op checked; a view lies inside its
                // buffer, and a buffer inside its block. If the stream captures, its capture
                // entry keeps the blocks (above) and hands them to the graph, which holds them
                // while its executables can launch.
                unsafe { shared.driver.launch_op(regions, &stream.inner.raw) },
                CallSite::op(op.name()),
            )?;
            if let Some(entry) = &capture {
                editing::record(shared, entry, stream, || {
                    Work::Op(op.map(|v| Bound::of_view(&v)))
                });
            }
            Ok(())
        })
    }
}

impl<D: Driver> Backend for DriverBackend<D> {
    type Stream = DriverStream<D>;
    type Event = DriverEvent<D>;
    type Graph = Graph<DriverGraph<D>>;

    fn kind(&self) -> BackendKind {
        D::KIND
    }

    fn instance_id(&self) -> u64 {
        self.shared.id
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.capabilities.clone()
    }

    fn instance_cache(&self) -> &InstanceCache {
        &self.shared.cache
    }

    fn default_stream(&self) -> DriverStream<D> {
        self.shared.current.default_stream().clone()
    }

    fn new_stream(&self) -> Result<DriverStream<D>> {
        let shared = &self.shared;
        shared.bind()?;
        let raw = shared.check(shared.driver.create_stream(), CallSite::op("new_stream"))?;
        Ok(DriverStream::new(
            &*shared.driver,
            raw,
            shared.id,
            shared.pools.order().new_stream(),
        ))
    }

    fn current_stream(&self) -> DriverStream<D> {
        self.shared.current.get()
    }

    fn set_current_stream(&self, stream: &DriverStream<D>) -> Result<DriverStream<D>> {
        self.own_stream(stream)?;
        Ok(self.shared.current.set(stream.clone()))
    }

    fn synchronize(&self) -> Result<()> {
        let shared = &self.shared;
        // A device-wide wait includes the capturing streams: it conflicts with every capture,
        // whatever its mode or thread.
        // Checked and made while no capture can begin: relaxed mode does not exempt a
        // device-wide wait, so it must not meet in the driver a capture begun after the check.
        let mark = shared.domain.excluding_capture_begins(|| {
            shared
                .domain
                .rules
                .check_device_synchronize("synchronize")?;
            shared.bind()?;
            // Taken before the wait: every free made before it is covered once it returns.
            let began = shared.pools.order().now();
            let mark = shared.retirement_mark();
            let recycled = shared.pools.raw().wait_begins();
            let waited = shared.driver.synchronize();
            shared.pools.raw().wait_completed(recycled, waited.is_ok());
            shared.check(waited, CallSite::unsafe_call("synchronize"))?;
            // No capture of the domain runs (checked under the gate), so this completes
            // eager work only, never the uses of a block inside a capture.
            shared.pools.order().device_completed_before(began);
            Ok(mark)
        })?;
        shared.after_synchronize(mark);
        self.after_wait()
    }

    fn stream_synchronize(&self, stream: &DriverStream<D>) -> Result<()> {
        self.own_stream(stream)?;
        let settled = stream.inner.settled()?;
        self.blocking_call("stream_synchronize", &settled)?;
        let began = self.shared.pools.order().now();
        self.driver_wait("stream_synchronize", |driver| {
            driver.stream_synchronize(&stream.inner.raw)
        })?;
        stream.inner.clock.completed_before(began);
        drop(settled);
        self.after_driver_wait()
    }

    fn is_capturing(&self, stream: &DriverStream<D>) -> Result<bool> {
        self.own_stream(stream)?;
        let shared = &self.shared;
        shared.bind()?;
        let id = shared.check(
            shared.driver.capture_id(&stream.inner.raw),
            CallSite::op("is_capturing"),
        )?;
        Ok(id.is_some())
    }

    fn new_event_with(&self, options: EventOptions) -> Result<DriverEvent<D>> {
        let shared = &self.shared;
        shared.bind()?;
        let raw = shared.check(
            shared.driver.create_event(options),
            CallSite::op("new_event"),
        )?;
        Ok(DriverEvent::new(
            raw,
            shared.id,
            options,
            shared.turn.clone(),
        ))
    }

    fn record_event(&self, event: &DriverEvent<D>) -> Result<()> {
        self.own_event(event)?;
        let shared = &self.shared;
        shared.bind()?;
        shared.current.with(|stream| {
            let settled = stream.inner.settled()?;
            let capture = Self::valid_capture(&settled)?;
            if let Some(entry) = capture
                && event.options.external
                && editing::in_body(shared, entry, stream)
            {
                return Err(editing::not_in_body("an external event's record"));
            }
            // An external event recorded in a capture is a node that each replay records:
            // what a wait on it waits for is decided at replay time, so it orders nothing here.
            let stamp = if capture.is_some() && event.options.external {
                Default::default()
            } else {
                shared.pools.order().stamp(&stream.inner.clock)
            };
            let mut call = event.linked()?;
            shared.check(
                // SAFETY: through this layer a wait on the event forks a stream into the
                // capture only in `wait_event` below, which joins the stream to the capture's
                // entry first (a raw wait on `event.raw()` is `unsafe`, its caller's to track).
                unsafe { shared.driver.record_event(&event.raw, &stream.inner.raw) },
                CallSite::op("record_event"),
            )?;
            // The graph the record went into: a wait must be in the graph of its record (see
            // `same_graph_rule`).
            let graph = capture.and_then(|_| editing::capture_graph(shared, stream));
            call.set_recorded_in(capture, graph);
            if let Some(entry) = capture
                && event.options.external
            {
                // The record is a node of the graph that names the event: the graph keeps the
                // driver's event alive, whenever the user drops theirs.
                entry.keep_object(event.hold());
            }
            drop(call);
            event.set_stamp(stamp);
            Ok(())
        })
    }

    fn wait_event(&self, event: &DriverEvent<D>) -> Result<()> {
        self.own_event(event)?;
        self.shared.bind()?;
        let mut attempts = 0u32;
        loop {
            match self.wait_event_once(event)? {
                WaitOutcome::Done => return Ok(()),
                // Another thread recorded the event again between the decision and the wait:
                // decide again, by the record the driver will wait on.
                WaitOutcome::Rerecorded if attempts < 64 => attempts += 1,
                WaitOutcome::Rerecorded => {
                    return Err(GraphError::Unsupported {
                        what: "wait_event on an event other threads record again and again \
                               while it is waited on: order the records and the wait"
                            .to_owned(),
                    });
                }
            }
        }
    }

    fn event_synchronize(&self, event: &DriverEvent<D>) -> Result<()> {
        self.own_event(event)?;
        self.shared
            .domain
            .rules
            .check_unsafe_call("event_synchronize")?;
        // A record made in a capture still going on stands for no work
        // (`CUDA_ERROR_CAPTURED_EVENT`), and the CUDA driver faults synchronizing such an event
        // while another thread grows or ends its capture: refused here, before the driver. The
        // event's link is held through the wait, so no record lands in a capture meanwhile.
        let call = event.linked()?;
        if call.capture().is_some() {
            return self.shared.check(
                Err(crate::software::captured_event_error()),
                CallSite::unsafe_call("event_synchronize"),
            );
        }
        self.driver_wait("event_synchronize", |driver| {
            driver.event_synchronize(&event.raw)
        })?;
        drop(call);
        // The record completed: so did the work it was ordered after.
        event.stamp().completed();
        self.after_driver_wait()
    }

    fn event_query(&self, event: &DriverEvent<D>) -> Result<bool> {
        self.own_event(event)?;
        let shared = &self.shared;
        // `cuEventQuery` is an unsafe call during a capture, like a synchronize.
        shared.domain.rules.check_unsafe_call("event_query")?;
        shared.bind()?;
        let _call = event.linked()?;
        shared.check(
            shared.relaxed(|| shared.driver.event_query(&event.raw)),
            CallSite::unsafe_call("event_query"),
        )
    }

    fn elapsed_time(&self, start: &DriverEvent<D>, end: &DriverEvent<D>) -> Result<f32> {
        self.own_event(start)?;
        self.own_event(end)?;
        if !self.shared.capabilities.event_timing {
            return Err(GraphError::Unsupported {
                what: format!(
                    "elapsed_time: events on {} cannot measure time \
                     (capabilities().event_timing is false)",
                    self.shared.capabilities.device_name
                ),
            });
        }
        if !(start.options.enable_timing && end.options.enable_timing) {
            return Err(GraphError::ArgumentMismatch(
                "elapsed_time needs two events made with EventOptions::enable_timing(true)"
                    .to_owned(),
            ));
        }
        let shared = &self.shared;
        // As for a synchronize: the driver is not asked about a record made in a capture still
        // going on (another thread may be growing or ending it).
        if start.recorded_in().is_some() || end.recorded_in().is_some() {
            return shared.check(
                Err(crate::software::captured_event_error_in("elapsed_time")),
                CallSite::op("elapsed_time"),
            );
        }
        shared.bind()?;
        shared.check(
            shared.driver.elapsed_ms(&start.raw, &end.raw),
            CallSite::op("elapsed_time"),
        )
    }

    fn alloc<T: Element>(&self, len: usize) -> Result<DriverBuffer<D, T>> {
        let shared = &self.shared;
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(GraphError::size_overflow(shared.name()))?;
        shared.check(
            shared.driver.on_alloc(bytes),
            CallSite {
                operation: "alloc",
                bytes,
                unsafe_call: false,
            },
        )?;
        shared.poll_pending_frees();
        let stream = shared.current.get();
        // Pool or plain is decided, and allocated, with the membership settled: a capture
        // begun meanwhile must not receive a plain allocation of its stream (an unsafe call
        // the rules never saw), nor a capture ended meanwhile a block of its pool.
        let settled = stream.inner.settled()?;
        let memory = match Self::valid_capture(&settled)? {
            // Inside a capture: the capture's pool, allocated in relaxed mode as PyTorch's
            // allocator does, so the allocation neither is refused by nor invalidates it; a
            // free block is reused only where stream order allows (see the pools).
            Some(entry) => shared
                .relaxed(|| {
                    shared
                        .pools
                        .alloc_in(entry.pool, bytes, &stream.inner.clock)
                })
                .map_err(|e| match e {
                    // The pools do not know the backend they serve: name it.
                    GraphError::OutOfMemory {
                        requested_bytes, ..
                    } => GraphError::OutOfMemory {
                        backend: shared.name(),
                        requested_bytes,
                    },
                    other => other,
                })?,
            // Elsewhere a plain allocation: an unsafe call while a capture forbids it.
            None => {
                shared.domain.rules.check_unsafe_call("alloc")?;
                shared.pools.alloc_plain(bytes)?
            }
        };
        drop(settled);
        Ok(DriverBuffer::new(
            shared,
            accel_graph_api::backend_kit::pools::OwnedAllocation::new(&shared.pools, memory),
            len,
        ))
    }

    fn upload<'a, T: Element>(
        &self,
        dst: impl Into<View<'a, DriverBuffer<D, T>>>,
        src: &[T],
    ) -> Result<()> {
        let dst = dst.into();
        self.blocking_copy("upload", &dst, src.len(), |driver, stream| {
            // SAFETY: `dst` views a live buffer of this instance, so its block is allocated,
            // the view lies inside the buffer and the buffer inside its block, and `src` has
            // the view's length (checked by `blocking_copy`): its bytes fit.
            unsafe {
                driver.upload(
                    dst.buffer().block(),
                    dst.byte_offset(),
                    bytemuck::cast_slice(src),
                    stream,
                )
            }
        })
    }

    fn download_into<'a, T: Element>(
        &self,
        src: impl Into<View<'a, DriverBuffer<D, T>>>,
        dst: &mut [T],
    ) -> Result<()> {
        let src = src.into();
        let len = dst.len();
        self.blocking_copy("download", &src, len, |driver, stream| {
            // SAFETY: `src` views a live buffer of this instance, so its block is allocated,
            // the view lies inside the buffer and the buffer inside its block, and `dst` has
            // the view's length (checked by `blocking_copy`): its bytes fit.
            unsafe {
                driver.download(
                    src.buffer().block(),
                    src.byte_offset(),
                    bytemuck::cast_slice_mut(dst),
                    stream,
                )
            }
        })
    }

    fn record_stream<T: Element>(
        &self,
        buffer: &DriverBuffer<D, T>,
        stream: &DriverStream<D>,
    ) -> Result<()> {
        self.own_buffer(buffer)?;
        self.own_stream(stream)?;
        buffer.record_use(stream);
        Ok(())
    }

    fn memory_stats(&self) -> MemoryStats {
        // Frees host callbacks deferred run first, so the figures are current.
        self.shared.domain.flush();
        let mut stats = self.shared.pools.stats();
        // Device frees deferred past a capture are out of the books: add them back.
        stats.reserved_bytes = stats
            .reserved_bytes
            .saturating_add(self.shared.pools.raw().deferred_bytes());
        stats
    }

    fn memory_snapshot(&self) -> Vec<BlockInfo> {
        self.shared.domain.flush();
        self.shared.pools.snapshot()
    }

    fn empty_cache(&self) -> Result<()> {
        let shared = &self.shared;
        shared.domain.flush();
        shared.poll_pending_frees();
        shared.pools.release_unused();
        shared.pools.raw().release_cached();
        Ok(())
    }

    fn host_callback(&self, f: HostCallback) -> Result<()> {
        let shared = &self.shared;
        if !shared.capabilities.host_callbacks {
            return Err(GraphError::Unsupported {
                what: format!(
                    "host_callback: {} runs no host functions in stream order \
                     (capabilities().host_callbacks is false)",
                    shared.capabilities.device_name
                ),
            });
        }
        shared.bind()?;
        let stream = shared.current.get();
        // Decided and launched with the membership settled: were a capture to begin on the
        // stream in between, the eager trampoline (which frees its call when it runs) would
        // become a node that every replay runs again (see `crate::stream`).
        let settled = stream.inner.settled()?;
        match Self::valid_capture(&settled)? {
            Some(entry) => {
                if editing::in_body(shared, entry, &stream) {
                    return Err(editing::not_in_body("host_callback"));
                }
                let label = format!(
                    "host node #{} of graph {}",
                    entry.next_host_node(),
                    entry.graph
                );
                let data =
                    entry.keep_callback(HostCall::new(f, label, Arc::clone(&shared.host_panics)));
                // SAFETY: the callback lives in the capture's keep-alive set, then in the
                // graph's, then among the retired callbacks until a device synchronization:
                // as long as any executable of the capture can launch.
                let launched = unsafe {
                    shared
                        .driver
                        .launch_host(&stream.inner.raw, host::run_kept, data)
                };
                shared.check(launched, CallSite::op("host_callback"))?;
                editing::record(shared, entry, &stream, || Work::Fixed(Signature::Host));
            }
            None => {
                let call = HostCall::new(f, "(eager)".to_owned(), Arc::clone(&shared.host_panics));
                let data = Box::into_raw(call).cast::<std::ffi::c_void>();
                // SAFETY: ownership of `data` passes to `run_once`, which frees it when it runs.
                let launched = unsafe {
                    shared
                        .driver
                        .launch_host(&stream.inner.raw, host::run_once, data)
                };
                if let Err(e) = launched {
                    // SAFETY: the launch failed, so the host function never runs: reclaim it.
                    drop(unsafe { Box::from_raw(data.cast::<HostCall>()) });
                    return Err(shared.error(e, CallSite::op("host_callback")));
                }
            }
        }
        drop(settled);
        self.after_wait()
    }

    fn launch_kernel(
        &self,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[KernelArg<'_, BufferMemory<D>>],
    ) -> Result<()> {
        check_grid(kernel, grid, &self.shared.capabilities.launch_limits)?;
        check_arguments(kernel, self.shared.id, args)?;
        let shared = &self.shared;
        let module = shared.kernel_module(kernel)?;
        let raw: Vec<RawArg<'_, D::Block>> = kernel
            .params()
            .iter()
            .zip(args)
            .map(|(param, arg)| match (param, arg) {
                (Param::Buffer { access, .. }, KernelArg::Buffer(view)) => {
                    // Checked against the live memory: the device sees no byte outside it.
                    let bytes = view.memory().checked_bytes(shared.id, view)?;
                    Ok(RawArg::Buffer {
                        bytes: Bytes {
                            block: view.memory().block(),
                            offset: bytes.start,
                            len: bytes.len(),
                        },
                        element: view.element(),
                        access: *access,
                    })
                }
                (Param::Scalar { .. }, KernelArg::Scalar(value)) => Ok(RawArg::Scalar(*value)),
                // `check_arguments` matched kinds above; a mismatch cannot reach here.
                _ => Err(GraphError::KernelArguments {
                    kernel: kernel.name().to_owned(),
                    message: "an argument's kind does not match its parameter".to_owned(),
                }),
            })
            .collect::<Result<_>>()?;
        shared.bind()?;
        shared.current.with(|stream| {
            // Decided and launched with the membership settled (see `crate::stream`).
            let settled = stream.inner.settled()?;
            let capture = Self::valid_capture(&settled)?;
            if let Some(entry) = capture {
                for arg in args {
                    if let KernelArg::Buffer(view) = arg {
                        entry.keep_block_used_on(view.memory().allocation(), &stream.inner.clock);
                    }
                }
            }
            shared.check(
                // SAFETY: every buffer argument is a view of a live buffer of this instance
                // (checked above), so its bytes lie inside its block; if the stream captures,
                // its capture entry keeps the blocks (above) for the graph.
                unsafe {
                    shared
                        .driver
                        .launch_kernel(&module, kernel, grid, &raw, &stream.inner.raw)
                },
                CallSite::op("launch_kernel"),
            )?;
            if let Some(entry) = &capture {
                editing::record(shared, entry, stream, || {
                    Work::Kernel(KernelWork {
                        kernel: kernel.clone(),
                        module: Arc::clone(&module),
                        grid,
                        args: kernel
                            .params()
                            .iter()
                            .zip(args)
                            .map(|(param, arg)| match (param, arg) {
                                (Param::Buffer { access, .. }, KernelArg::Buffer(view)) => {
                                    BoundArg::Buffer {
                                        bound: Bound::of_memory(
                                            view.memory(),
                                            view.offset(),
                                            view.len(),
                                            view.element(),
                                        ),
                                        access: *access,
                                    }
                                }
                                (_, KernelArg::Scalar(s)) => BoundArg::Scalar(*s),
                                // `check_arguments` matched kinds above.
                                (Param::Scalar { .. }, KernelArg::Buffer(_)) => {
                                    BoundArg::Scalar(accel_graph_api::kernel::Scalar::U32(0))
                                }
                            })
                            .collect(),
                    })
                });
            }
            Ok(())
        })
    }

    fn prepare_kernel(&self, kernel: &Kernel) -> Result<()> {
        self.shared.kernel_module(kernel).map(drop)
    }

    fn gemm<'a, 'b, 'c, T: FloatElement>(
        &self,
        spec: &Gemm,
        a: impl Into<View<'a, DriverBuffer<D, T>>>,
        b: impl Into<View<'b, DriverBuffer<D, T>>>,
        c: impl Into<View<'c, DriverBuffer<D, T>>>,
    ) -> Result<()> {
        let (a, b, c) = (a.into(), b.into(), c.into());
        for view in [&a, &b, &c] {
            self.own_buffer(view.buffer())?;
        }
        spec.check(a.len(), b.len(), c.len())?;
        for (name, operand) in [("A", &a), ("B", &b)] {
            if c.overlaps(operand) {
                return Err(GraphError::OverlappingOperands {
                    op: "gemm",
                    detail: format!(
                        "C (elements {}..{}) overlaps {name} (elements {}..{}) in one buffer: \
                         the product would read elements it writes",
                        c.offset(),
                        c.offset() + c.len(),
                        operand.offset(),
                        operand.offset() + operand.len()
                    ),
                });
            }
        }
        let shared = &self.shared;
        shared.bind()?;
        shared.current.with(|stream| {
            // Decided and launched with the membership settled (see `crate::stream`).
            let settled = stream.inner.settled()?;
            let capture = Self::valid_capture(&settled)?;
            if let Some(entry) = capture {
                for view in [&a, &b, &c] {
                    entry.keep_block_used_on(view.buffer().memory(), &stream.inner.clock);
                }
            }
            shared.check(
                // SAFETY: the operands are views of live buffers of this instance (checked
                // above) whose lengths fit the product; if the stream captures, its capture
                // entry keeps the blocks (above) for the graph.
                unsafe {
                    shared.driver.gemm(
                        spec,
                        T::DTYPE,
                        Self::bytes_of(&a),
                        Self::bytes_of(&b),
                        Self::bytes_of(&c),
                        &stream.inner.raw,
                    )
                },
                CallSite::op("gemm"),
            )?;
            if let Some(entry) = &capture {
                editing::record(shared, entry, stream, || {
                    Work::Fixed(Signature::Gemm {
                        spec: *spec,
                        dtype: T::DTYPE,
                    })
                });
            }
            Ok(())
        })
    }

    fn collectives(&self) -> Result<&dyn CollectiveBackend<BufferMemory<D>>> {
        // Written once in `crate::collectives`, over the driver's `DriverCollectives`.
        self.shared.check(
            self.shared.driver.comm_support(),
            CallSite::op("collectives"),
        )?;
        Ok(self)
    }

    fn graph(&self, options: GraphOptions) -> Result<Graph<DriverGraph<D>>> {
        let options = options.validate()?;
        if let Some(pool) = options.pool {
            self.shared.pools.check_issued(pool)?;
        }
        crate::editing::check_flags(&self.shared, options.instantiate)?;
        new_graph(
            DriverGraph::new(Arc::clone(&self.shared), options.instantiate),
            options,
        )
    }

    fn graph_pool_handle(&self) -> PoolId {
        self.shared.pools.issue_user_pool()
    }

    fn captured_node(&self) -> Result<CapturedNode> {
        self.captured_node_impl()
    }

    fn update_graph(
        &self,
        graph: &mut Graph<DriverGraph<D>>,
        from: &Graph<DriverGraph<D>>,
    ) -> Result<()> {
        graph.update_from(from)
    }

    fn update_node(
        &self,
        graph: &mut Graph<DriverGraph<D>>,
        node: CapturedNode,
        args: &[(usize, KernelArg<'_, BufferMemory<D>>)],
    ) -> Result<()> {
        graph.update_node(node, args)
    }

    fn if_then<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, DriverBuffer<D, T>>>,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut then = Some(then);
        let mut then = || then.take().map_or(Ok(()), |f| f());
        self.conditional(cond.into(), ConditionalKind::If, &mut [&mut then])
    }

    fn if_else<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, DriverBuffer<D, T>>>,
        then: impl FnOnce() -> Result<()>,
        otherwise: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let (mut then, mut otherwise) = (Some(then), Some(otherwise));
        let mut then = || then.take().map_or(Ok(()), |f| f());
        let mut otherwise = || otherwise.take().map_or(Ok(()), |f| f());
        self.conditional(
            cond.into(),
            ConditionalKind::IfElse,
            &mut [&mut then, &mut otherwise],
        )
    }

    fn while_loop<'a, T: ConditionElement>(
        &self,
        cond: impl Into<View<'a, DriverBuffer<D, T>>>,
        mut body: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        self.conditional(cond.into(), ConditionalKind::While, &mut [&mut body])
    }
}

/// A wait may join only the graph its event was recorded into: inside a conditional body, an
/// event recorded in that body; outside every body, an event recorded in no body.
fn same_graph_rule<D: Driver>(
    shared: &Shared<D>,
    member_of: &Option<Arc<CaptureEntry<D>>>,
    stream: &DriverStream<D>,
    call: &crate::event::LinkedCall<'_, D>,
) -> Result<()> {
    let recorded_in = call.capture();
    let recorded_in_body = recorded_in
        .as_ref()
        .is_some_and(|entry| entry.recorded().is_body_graph(call.graph()));
    // One question to the driver: where the waiting stream captures now.
    let stream_graph = member_of
        .as_ref()
        .and_then(|_| editing::capture_graph(shared, stream));
    let waits_in_body = member_of
        .as_ref()
        .is_some_and(|entry| editing::in_body_at(entry, stream, stream_graph));
    if !recorded_in_body && !waits_in_body {
        return Ok(());
    }
    let same_body = matches!(
        (member_of, &recorded_in),
        (Some(waiter), Some(recorder)) if Arc::ptr_eq(waiter, recorder)
    ) && call.graph().is_some()
        && call.graph() == stream_graph;
    if same_body {
        return Ok(());
    }
    Err(GraphError::Unsupported {
        what: if waits_in_body {
            "wait_event inside a conditional node's body on an event not recorded in that body \
             (a body's graph has no edge to work outside it): join streams before the \
             conditional node, or record the event in the body"
        } else {
            "wait_event on an event last recorded inside a conditional node's body, from a \
             stream outside that body (a body's graph has no edge to work outside it): record \
             the event after the conditional node instead"
        }
        .to_owned(),
    })
}
