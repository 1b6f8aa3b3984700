//! The runner: makes each call of a sequence on the backend instances and checks it against
//! the [`Model`]; after every call it checks every observable fact, and after the sequence
//! that nothing is left capturing and no memory is held.

use std::{
    collections::HashSet,
    path::Path,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError, GraphOptions, GraphState, HostCallback,
    NodeKind, PoolId, PortableOps,
};
use accel_graph_utils::{
    BucketedCacheOptions, BucketedGraphCache, CaptureSizes, GraphedCallable,
    GraphedCallableOptions, Stage, StaticBufferLoader, make_graphed_callable,
};

use super::{
    Counters,
    actions::{
        Action, BUCKETS, BUFFERS, GRAPHS, HANDLES, OpKind, PoolChoice, UTILITY_LEN, Utility,
    },
    model::{Model, ModelGraph, OnStream, Validity, bucket_for},
};
use crate::check::{CaseResult, Ctx, ensure, expect_err};

/// What became of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Called and checked.
    Checked,
    /// Not applicable now: its graph, buffer or utility slot is empty, an op would alias, a
    /// host callback the backend cannot run, a utility while a capture runs (§7 checks the
    /// utilities; here they meet everything else between captures).
    NotApplicable,
    /// Left out: CUDA leaves its outcome to the driver (see the module docs).
    BackendDefined,
}

/// The callable of the sequence's utilities: `y = 2x` into a new buffer.
type Double<B> = fn(
    &B,
    &[&<B as PortableOps>::Buffer<f32>],
) -> accel_graph_api::Result<Vec<<B as PortableOps>::Buffer<f32>>>;

fn double<B: Backend>(
    b: &B,
    x: &[&B::Buffer<f32>],
) -> accel_graph_api::Result<Vec<B::Buffer<f32>>> {
    let y = b.alloc(x[0].len())?;
    b.copy(&y, x[0])?;
    b.scale(&y, 2.0)?;
    Ok(vec![y])
}

/// A buffer slot: the buffer and the instance that allocated it. Shared with the host
/// callbacks that drop what the slot holds when they run.
type Slot<B> = Arc<Mutex<Option<(usize, <B as PortableOps>::Buffer<f32>)>>>;

fn lock<T>(slot: &Mutex<T>) -> MutexGuard<'_, T> {
    // A slot is replaced or taken whole: a panic elsewhere cannot tear it.
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sequence's utilities, one of each kind at most.
struct Utilities<B: Backend> {
    graphed: Option<GraphedCallable<B, Double<B>>>,
    loader: Option<StaticBufferLoader<B>>,
    bucketed: Option<BucketedGraphCache<B, Double<B>>>,
}

/// The backend's objects of one sequence, next to the model of them.
struct Machine<'a, B: Backend> {
    /// The instances (one or two); `on` indices of actions are taken modulo their number.
    bs: &'a [B],
    /// Each instance's streams.
    streams: &'a [Vec<B::Stream>],
    dir: &'a Path,
    model: Model,
    /// Declared before the buffers so they drop first: a graph lets go of its pool before the
    /// buffers of the sequence are released.
    graphs: Vec<Option<B::Graph>>,
    utilities: Utilities<B>,
    /// The buffers. Nothing else holds them: a buffer dropped while captured work uses it is
    /// kept alive by the graph, so replays stay valid.
    buffers: Vec<Slot<B>>,
    /// Pool handles, with the instance that issued each.
    handles: Vec<Option<(usize, PoolId)>>,
    seen_handles: HashSet<(usize, PoolId)>,
    /// Runs of the host callbacks that drop buffers, so far.
    host_runs: Arc<AtomicUsize>,
    /// Runs the sequence has launched (the runner waits for them after each launch).
    host_runs_launched: usize,
    counters: &'a Counters,
    /// Per instance, an event recorded after each call that does eager work, waited on before
    /// the next one: a sequence switches streams at random, and eager work on two streams
    /// that nothing orders would race on the buffers they share (a race detector reports it).
    /// The waits and records are on streams that do not capture, so they order without
    /// touching any capture.
    order: Vec<B::Event>,
}

impl<B: Backend> Machine<'_, B> {
    fn instance(&self, on: usize) -> usize {
        on % self.bs.len()
    }

    fn graph(&mut self, i: usize) -> &mut B::Graph {
        self.graphs[i].as_mut().expect("slot checked")
    }

    /// The instance of graph `i` (whose slot is checked).
    fn graph_instance(&self, i: usize) -> usize {
        self.model.graph(i).instance
    }

    /// Checks the result of a call that instantiates a graph: it must succeed unless
    /// `contended`, when `UnsafeDuringCapture` is allowed too (the graph keeps its state and
    /// the captures in progress may be invalidated). Returns whether it succeeded.
    fn instantiated(
        &mut self,
        result: Result<(), GraphError>,
        contended: bool,
        what: &str,
    ) -> Result<bool, String> {
        match result {
            Ok(()) => Ok(true),
            Err(GraphError::UnsafeDuringCapture { .. }) if contended => {
                self.model.taint_captures();
                Ok(false)
            }
            Err(e) => Err(format!("{what}: unexpected error {e:?}: {e}")),
        }
    }

    fn remove_graph(&mut self, i: usize) {
        if let Some(graph) = self.graphs[i].take() {
            drop(graph);
            self.model.graphs[i] = None;
            self.model.released();
        }
    }

    /// Waits until every host callback launched so far has run: at once on synchronous
    /// backends; on asynchronous ones the stream gets there on its own (the callbacks need
    /// nothing but the launches before them). The model knows what they dropped only then.
    fn await_host_runs(&self) -> CaseResult {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.host_runs.load(Ordering::Acquire) < self.host_runs_launched {
            ensure!(
                Instant::now() < deadline,
                "{} of {} launched host callbacks ran within 30 s",
                self.host_runs.load(Ordering::Acquire),
                self.host_runs_launched
            );
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Counts a foreign buffer that sits at an address of a buffer of the instance it was
    /// given to (the collision identity by address alone would miss).
    /// Checks that `result` refused a buffer of the other instance (`call` names the call in
    /// a failure), then counts a collision if that buffer sat at `address`, an address of
    /// instance `on`'s own. `held` is the lock on the buffer's slot (or slots): released
    /// before the count, which looks at every slot.
    fn refused_foreign<T: std::fmt::Debug, H>(
        &self,
        result: accel_graph_api::Result<T>,
        held: H,
        on: usize,
        address: u64,
        call: &str,
    ) -> CaseResult {
        expect_err!(result, GraphError::ForeignObject { what: "buffer" }, call);
        drop(held);
        self.note_collision(on, address);
        Ok(())
    }

    fn note_collision(&self, on: usize, foreign: u64) {
        let collides = self.buffers.iter().any(|slot| {
            lock(slot)
                .as_ref()
                .is_some_and(|(i, b)| *i == on && b.device_address() == foreign)
        });
        if collides {
            let c = &self.counters.address_collisions;
            c.set(c.get() + 1);
        }
    }

    /// The instance whose current stream `action` does eager work on, if it does any.
    fn eager_instance(&self, action: &Action) -> Option<usize> {
        match *action {
            Action::Op { on, .. } | Action::Download { on, .. } => Some(self.instance(on)),
            Action::Replay(i) => self.model.graphs[i].as_ref().map(|m| m.instance),
            Action::GraphedCall(_) => self.model.utilities.graphed,
            Action::Load { .. } => self.model.utilities.loader.as_ref().map(|(on, _)| *on),
            Action::BucketedRun(_) => self.model.utilities.bucketed.as_ref().map(|(on, _)| *on),
            _ => None,
        }
    }

    /// True when instance `on`'s current stream is known not to capture, so an event record
    /// or wait there orders eager work and nothing else.
    fn orderable(&self, on: usize) -> bool {
        matches!(self.model.on_current(on), OnStream::NotCapturing)
            && !self.model.default_stream_ambiguous(on)
    }

    /// Runs one action, ordered after the eager work of the calls before it, and checks its
    /// result against the model.
    fn step(&mut self, action: Action) -> Result<Step, String> {
        let ordered = self
            .eager_instance(&action)
            .filter(|&on| self.orderable(on));
        if let Some(on) = ordered {
            self.bs[on]
                .wait_event(&self.order[on])
                .ctx("wait_event ordering the call after earlier eager work")?;
        }
        let step = self.checked_step(action)?;
        if let Some(on) = ordered.filter(|&on| self.orderable(on)) {
            self.bs[on]
                .record_event(&self.order[on])
                .ctx("record_event ordering later calls after this one")?;
        }
        Ok(step)
    }

    /// Runs one action and checks its result against the model.
    fn checked_step(&mut self, action: Action) -> Result<Step, String> {
        match action {
            Action::NewGraph {
                on,
                slot,
                keep_graph,
                pool,
                mode,
            } => self.new_graph(self.instance(on), slot, keep_graph, pool, mode)?,
            Action::DropGraph(i) => {
                if self.graphs[i].is_none() {
                    return Ok(Step::NotApplicable);
                }
                self.remove_graph(i);
            }
            Action::CaptureBegin(i) => return self.capture_begin(i),
            Action::CaptureEnd(i) => return self.capture_end(i),
            Action::Instantiate(i) => return self.instantiate(i),
            Action::Replay(i) => return self.replay(i),
            Action::Reset(i) => {
                if self.graphs[i].is_none() {
                    return Ok(Step::NotApplicable);
                }
                self.graph(i).reset();
                self.model.graph_mut(i).discard();
                self.model.released();
            }
            Action::Pool(i) => return self.pool(i),
            Action::EnableDebugMode(i) => {
                if self.graphs[i].is_none() {
                    return Ok(Step::NotApplicable);
                }
                self.graph(i).enable_debug_mode();
                self.model.graph_mut(i).debug = true;
            }
            Action::DebugDump(i) => return self.debug_dump(i),
            Action::Nodes(i) => return self.nodes(i),
            Action::Alloc { on, slot, len } => return self.alloc(self.instance(on), slot, len),
            Action::DropBuffer(i) => {
                let dropped = lock(&self.buffers[i]).take();
                if dropped.is_none() {
                    return Ok(Step::NotApplicable);
                }
                drop(dropped);
                self.model.released();
            }
            Action::Op { on, kind, a, b } => return self.op(self.instance(on), kind, a, b),
            Action::UseStream { on, of, stream } => {
                let (on, of) = (self.instance(on), self.instance(of));
                let b = &self.bs[on];
                if on == of {
                    b.set_current_stream(&self.streams[of][stream])
                        .ctx("set_current_stream")?;
                    self.model.current[on] = stream;
                } else {
                    expect_err!(
                        b.set_current_stream(&self.streams[of][stream]),
                        GraphError::ForeignObject { what: "stream" },
                        "set_current_stream(a stream of the other instance)"
                    );
                }
            }
            Action::NewPoolHandle { on, slot } => {
                let on = self.instance(on);
                let handle = self.bs[on].graph_pool_handle();
                ensure!(handle.is_user(), "graph_pool_handle() returned {handle}");
                ensure!(
                    self.seen_handles.insert((on, handle)),
                    "graph_pool_handle() returned {handle} twice"
                );
                self.handles[slot] = Some((on, handle));
            }
            Action::Synchronize { on } => {
                let b = &self.bs[self.instance(on)];
                if self.model.any_capture() {
                    // A device-wide synchronize conflicts with every capture of the device,
                    // in every mode, whichever instance it is made through.
                    let r = b.synchronize();
                    self.model.device_synchronized();
                    expect_err!(
                        r,
                        GraphError::UnsafeDuringCapture { .. },
                        "synchronize during capture"
                    );
                } else {
                    b.synchronize().ctx("synchronize")?;
                }
            }
            Action::Download { on, slot } => return self.download(self.instance(on), slot),
            Action::EmptyCache { on } => self.bs[self.instance(on)]
                .empty_cache()
                .ctx("empty_cache")?,
            Action::HostDrop { on, slot } => return self.host_drop(self.instance(on), slot),
            Action::MakeUtility { on, utility } => {
                return self.make_utility(self.instance(on), utility);
            }
            Action::GraphedCall(slot) => return self.graphed_call(slot),
            Action::Load {
                stage,
                microbatch,
                slot,
            } => return self.load(stage, microbatch, slot),
            Action::BucketedRun(slot) => return self.bucketed_run(slot),
        }
        Ok(Step::Checked)
    }

    fn new_graph(
        &mut self,
        on: usize,
        slot: usize,
        keep_graph: bool,
        pool: PoolChoice,
        mode: accel_graph_api::CaptureErrorMode,
    ) -> Result<(), String> {
        // The pool given, and whether the instance must refuse it.
        let (pool_option, refused) = match pool {
            PoolChoice::Own => (None, false),
            PoolChoice::Handle(h) => match self.handles[h] {
                Some((issuer, id)) => (Some(id), issuer != on),
                None => (None, false),
            },
            PoolChoice::ShareGraph(j) => match (&self.graphs[j], &self.model.graphs[j]) {
                (Some(g), Some(m)) if m.captured() => {
                    (Some(g.pool().ctx("pool()")?), m.instance != on)
                }
                _ => (None, false),
            },
            PoolChoice::Invalid => (Some(PoolId(5, 7)), true),
            PoolChoice::Forged => (Some(PoolId(0, 1 << 48)), true),
        };
        let mut options = GraphOptions::new()
            .keep_graph(keep_graph)
            .capture_error_mode(mode);
        if let Some(p) = pool_option {
            options = options.pool(p);
        }
        let b = &self.bs[on];
        if refused {
            expect_err!(
                b.graph(options),
                GraphError::InvalidPoolId { .. },
                format!("graph(pool={pool:?}, {pool_option:?})")
            );
            return Ok(());
        }
        let graph = b.graph(options).ctx("graph(options)")?;
        ensure!(
            graph.keep_graph() == keep_graph,
            "keep_graph() differs from the options"
        );
        ensure!(
            graph.capture_error_mode() == mode,
            "capture_error_mode() differs from the options"
        );
        self.remove_graph(slot);
        self.graphs[slot] = Some(graph);
        self.model.graphs[slot] = Some(ModelGraph::new(on, keep_graph, mode, pool_option));
        Ok(())
    }

    fn capture_begin(&mut self, i: usize) -> Result<Step, String> {
        let Some(state) = self.model.graphs[i].as_ref().map(|m| m.state) else {
            return Ok(Step::NotApplicable);
        };
        let on = self.graph_instance(i);
        match state {
            GraphState::Capturing => {
                expect_err!(
                    self.graph(i).capture_begin(),
                    GraphError::AlreadyCapturing,
                    "capture_begin while capturing"
                );
            }
            GraphState::Captured | GraphState::Ready => {
                expect_err!(
                    self.graph(i).capture_begin(),
                    GraphError::AlreadyCaptured,
                    "capture_begin on a captured graph"
                );
            }
            GraphState::Empty => {
                if self.model.capture_on(on, self.model.current[on]).is_some() {
                    return Ok(Step::BackendDefined);
                }
                if self.model.begin_refused_by_default_stream(on) {
                    expect_err!(
                        self.graph(i).capture_begin(),
                        GraphError::StreamNotCapturable,
                        "capture_begin on the default stream"
                    );
                } else {
                    self.graph(i).capture_begin().ctx("capture_begin")?;
                    let current = self.model.current[on];
                    self.model.graph_mut(i).begin(current);
                }
            }
        }
        Ok(Step::Checked)
    }

    fn capture_end(&mut self, i: usize) -> Result<Step, String> {
        let Some(m) = self.model.graphs[i].clone() else {
            return Ok(Step::NotApplicable);
        };
        if m.state != GraphState::Capturing {
            expect_err!(
                self.graph(i).capture_end(),
                GraphError::NotCapturing,
                "capture_end without a capture"
            );
        } else if m.capture_stream != self.model.current[m.instance] {
            expect_err!(
                self.graph(i).capture_end(),
                GraphError::CaptureStreamMismatch,
                "capture_end with another stream current"
            );
        } else {
            let contended = !m.keep_graph && self.model.instantiation_contended_besides(i);
            let result = self.graph(i).capture_end();
            let ok = match (m.validity, result) {
                (Validity::Invalid, r) => {
                    expect_err!(
                        r,
                        GraphError::CaptureInvalidated { .. },
                        "capture_end of an invalidated capture"
                    );
                    false
                }
                (_, Ok(())) => true,
                (Validity::Maybe, Err(GraphError::CaptureInvalidated { .. })) => false,
                // Instantiating at capture_end while another capture runs.
                (_, Err(GraphError::UnsafeDuringCapture { .. })) if contended => false,
                (_, Err(e)) => {
                    return Err(format!("capture_end: unexpected error {e:?}: {e}"));
                }
            };
            if ok {
                self.model.graph_mut(i).end();
            } else {
                self.model.graph_mut(i).discard();
                self.model.released();
            }
        }
        Ok(Step::Checked)
    }

    fn instantiate(&mut self, i: usize) -> Result<Step, String> {
        let Some(m) = self.model.graphs[i].clone() else {
            return Ok(Step::NotApplicable);
        };
        if !m.captured() {
            expect_err!(
                self.graph(i).instantiate(),
                GraphError::NotCaptured { .. },
                "instantiate before capture"
            );
        } else if !m.keep_graph {
            expect_err!(
                self.graph(i).instantiate(),
                GraphError::InstantiateRequiresKeepGraph,
                "instantiate with keep_graph=false"
            );
        } else {
            let contended = self.model.instantiation_contended();
            let result = self.graph(i).instantiate();
            if self.instantiated(result, contended, "instantiate")? {
                self.model.graph_mut(i).state = GraphState::Ready;
            }
        }
        Ok(Step::Checked)
    }

    fn replay(&mut self, i: usize) -> Result<Step, String> {
        let Some(m) = self.model.graphs[i].clone() else {
            return Ok(Step::NotApplicable);
        };
        if !m.captured() {
            expect_err!(
                self.graph(i).replay(),
                GraphError::NotCaptured { .. },
                "replay before capture"
            );
            return Ok(Step::Checked);
        }
        let on = m.instance;
        if self.model.capture_on(on, self.model.current[on]).is_some()
            || self.model.default_stream_ambiguous(on)
        {
            return Ok(Step::BackendDefined);
        }
        // Whether the graph's host nodes will drop a buffer (the slot holds one now).
        let drops = m
            .host_drops
            .iter()
            .any(|&slot| lock(&self.buffers[slot]).is_some());
        // A first replay of a kept graph instantiates it. Buffers the capture used may have
        // been dropped since — or are dropped by the replay's own host nodes, before later
        // nodes use them: the graph keeps their memory, so the replay is valid.
        let contended = m.state == GraphState::Captured && self.model.instantiation_contended();
        let result = self.graph(i).replay();
        if self.instantiated(result, contended, "replay")? {
            self.model.graph_mut(i).state = GraphState::Ready;
            self.host_runs_launched += m.host_drops.len();
            self.await_host_runs()?;
            for &slot in &m.host_drops {
                ensure!(
                    lock(&self.buffers[slot]).is_none(),
                    "buffer slot {slot} still holds a buffer after a replay of a host node that \
                     drops it"
                );
            }
            if drops {
                self.model.released();
            }
        }
        Ok(Step::Checked)
    }

    fn pool(&mut self, i: usize) -> Result<Step, String> {
        let (Some(g), Some(m)) = (&self.graphs[i], &mut self.model.graphs[i]) else {
            return Ok(Step::NotApplicable);
        };
        if !m.captured() {
            expect_err!(
                g.pool(),
                GraphError::NotCaptured { .. },
                "pool() before capture"
            );
            return Ok(Step::Checked);
        }
        let pool = g.pool().ctx("pool()")?;
        match m.pool_option {
            Some(given) => ensure!(
                pool == given,
                "pool() is {pool}, the graph was given {given}"
            ),
            None => ensure!(pool.is_private(), "pool() of a graph given none is {pool}"),
        }
        if let Some(before) = m.pool {
            ensure!(pool == before, "pool() changed from {before} to {pool}");
        }
        m.pool = Some(pool);
        Ok(Step::Checked)
    }

    fn debug_dump(&mut self, i: usize) -> Result<Step, String> {
        let (Some(g), Some(m)) = (&self.graphs[i], &self.model.graphs[i]) else {
            return Ok(Step::NotApplicable);
        };
        let path = self.dir.join(format!("graph{i}.dot"));
        let _ = std::fs::remove_file(&path);
        let result = g.debug_dump(&path);
        if !(m.debug || m.keep_graph) {
            expect_err!(
                result,
                GraphError::DebugModeNotEnabled,
                "debug_dump without debug mode"
            );
        } else if !m.captured() {
            expect_err!(
                result,
                GraphError::NotCaptured { .. },
                "debug_dump before capture"
            );
        } else if !m.raw_kept {
            expect_err!(
                result,
                GraphError::RawGraphUnavailable,
                "debug_dump without raw graph"
            );
        } else {
            result.ctx("debug_dump")?;
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            ensure!(len > 0, "debug_dump wrote an empty or no file");
        }
        Ok(Step::Checked)
    }

    fn nodes(&mut self, i: usize) -> Result<Step, String> {
        let (Some(g), Some(m)) = (&self.graphs[i], &self.model.graphs[i]) else {
            return Ok(Step::NotApplicable);
        };
        let result = g.nodes();
        if !m.captured() {
            expect_err!(
                result,
                GraphError::NotCaptured { .. },
                "nodes() before capture"
            );
        } else if !m.raw_kept {
            expect_err!(
                result,
                GraphError::RawGraphUnavailable,
                "nodes() without raw graph"
            );
        } else {
            let t = result.ctx("nodes()")?;
            let kernels = t.count(NodeKind::Kernel) + t.count(NodeKind::Memset);
            let hosts = m.host_drops.len();
            ensure!(
                t.len() == m.copies + m.other_ops + hosts
                    && t.count(NodeKind::Memcpy) == m.copies
                    && t.count(NodeKind::Host) == hosts
                    && kernels == m.other_ops,
                "nodes() has {:?}; the capture recorded {} copies, {} other ops and {hosts} \
                 host callbacks",
                t.nodes,
                m.copies,
                m.other_ops
            );
        }
        Ok(Step::Checked)
    }

    /// Allocates `len` elements through instance `on`. Lengths a device holds behave as
    /// always; a huge one is refused with `OutOfMemory` wherever the allocation would be made
    /// — except that a plain allocation a capture forbids is refused as an unsafe call first.
    /// An element count whose byte size overflows is refused before anything else.
    fn alloc(&mut self, on: usize, slot: usize, len: usize) -> Result<Step, String> {
        let b = &self.bs[on];
        let fits = len <= 1 << 20;
        let oom = |r: accel_graph_api::Result<B::Buffer<f32>>, what: &str| -> CaseResult {
            expect_err!(
                r,
                GraphError::OutOfMemory { .. },
                format!("{what} of {len} elements")
            );
            Ok(())
        };
        if len.checked_mul(std::mem::size_of::<f32>()).is_none() {
            oom(b.alloc(len), "alloc whose byte size overflows")?;
            return Ok(Step::Checked);
        }
        let buffer = match self.model.on_current(on) {
            OnStream::Unclean => return Ok(Step::BackendDefined),
            OnStream::Clean(_) if !fits => {
                oom(b.alloc(len), "a huge alloc inside a capture")?;
                return Ok(Step::Checked);
            }
            OnStream::Clean(_) => b.alloc(len).ctx("alloc inside a capture")?,
            OnStream::NotCapturing => match self.model.unsafe_call_forbidden() {
                Some(true) => {
                    let r = b.alloc::<f32>(len);
                    self.model.unsafe_call_made();
                    expect_err!(
                        r,
                        GraphError::UnsafeDuringCapture { .. },
                        "plain alloc while this thread captures"
                    );
                    return Ok(Step::Checked);
                }
                // Allowed (no capture, or only relaxed ones), but no device holds it.
                _ if !fits => {
                    oom(b.alloc(len), "a huge plain alloc")?;
                    return Ok(Step::Checked);
                }
                Some(false) => b.alloc(len).ctx("alloc")?,
                None => {
                    // A relaxed capture is in progress: allowed, but it may count.
                    let r = b.alloc(len).ctx("plain alloc during a relaxed capture")?;
                    self.model.taint_captures();
                    r
                }
            },
        };
        ensure!(
            buffer.len() == len,
            "alloc({len}) gave {} elements",
            buffer.len()
        );
        let replaced = lock(&self.buffers[slot]).replace((on, buffer));
        if replaced.is_some() {
            drop(replaced);
            self.model.released();
        }
        Ok(Step::Checked)
    }

    fn op(&mut self, on: usize, kind: OpKind, a: usize, second: usize) -> Result<Step, String> {
        if kind.binary() && a == second {
            return Ok(Step::NotApplicable);
        }
        // A unary op reads no second buffer: its slot does not matter.
        let second = if kind.binary() { second } else { a };
        let x_slot = lock(&self.buffers[a]);
        let y_slot = if a == second {
            None
        } else {
            Some(lock(&self.buffers[second]))
        };
        let (Some((xi, x)), Some((yi, y))) = (
            x_slot.as_ref(),
            match &y_slot {
                Some(slot) => slot.as_ref(),
                None => x_slot.as_ref(),
            },
        ) else {
            return Ok(Step::NotApplicable);
        };
        let b = &self.bs[on];
        let run = || match kind {
            OpKind::Fill => b.fill(x, 1.5),
            OpKind::Copy => b.copy(x, y),
            OpKind::AddScalar => b.add_scalar(x, 1.0),
            OpKind::Scale => b.scale(x, 0.5),
            OpKind::Axpy => b.axpy(x, 0.25, y),
        };
        // A buffer of the other instance is refused before anything else: lengths, captures.
        let foreign = [Some((*xi, x)), kind.binary().then_some((*yi, y))]
            .into_iter()
            .flatten()
            .find(|(i, _)| *i != on)
            .map(|(_, buffer)| buffer.device_address());
        if let Some(address) = foreign {
            let refused = run();
            self.refused_foreign(
                refused,
                (x_slot, y_slot),
                on,
                address,
                "an op on a buffer of the other instance",
            )?;
            return Ok(Step::Checked);
        }
        let capture = match self.model.on_current(on) {
            OnStream::Unclean => return Ok(Step::BackendDefined),
            _ if self.model.default_stream_ambiguous(on) => return Ok(Step::BackendDefined),
            OnStream::Clean(j) => Some(j),
            OnStream::NotCapturing => None,
        };
        let result = run();
        let mismatched = kind.binary() && x.len() != y.len();
        if mismatched {
            expect_err!(
                result,
                GraphError::LengthMismatch { .. },
                "op on different lengths"
            );
        } else {
            result.ctx("portable op")?;
        }
        if let Some(j) = capture {
            let m = self.model.graph_mut(j);
            if mismatched {
                if m.validity == Validity::Clean {
                    m.validity = Validity::Maybe;
                }
            } else if kind == OpKind::Copy {
                m.copies += 1;
            } else {
                m.other_ops += 1;
            }
        }
        Ok(Step::Checked)
    }

    fn download(&mut self, on: usize, i: usize) -> Result<Step, String> {
        let slot = lock(&self.buffers[i]);
        let Some((xi, x)) = slot.as_ref() else {
            return Ok(Step::NotApplicable);
        };
        let b = &self.bs[on];
        if *xi != on {
            // Refused before the capture rules: it disturbs nothing.
            let address = x.device_address();
            let refused = b.download(x);
            self.refused_foreign(
                refused,
                slot,
                on,
                address,
                "download of a buffer of the other instance",
            )?;
            return Ok(Step::Checked);
        }
        match self.model.unsafe_call_forbidden() {
            None => return Ok(Step::BackendDefined),
            Some(false) => {
                if self.model.default_stream_ambiguous(on) {
                    return Ok(Step::BackendDefined);
                }
                let data = b.download(x).ctx("download")?;
                ensure!(
                    data.len() == x.len(),
                    "download gave {} elements",
                    data.len()
                );
            }
            Some(true) => {
                let r = b.download(x);
                self.model.unsafe_call_made();
                expect_err!(
                    r,
                    GraphError::UnsafeDuringCapture { .. },
                    "download during capture"
                );
            }
        }
        Ok(Step::Checked)
    }

    /// A host callback dropping whatever slot `slot` holds when it runs.
    fn dropper(&self, slot: usize) -> HostCallback {
        let (cell, runs) = (Arc::clone(&self.buffers[slot]), Arc::clone(&self.host_runs));
        Arc::new(move || {
            // Taken under the lock, dropped after it: the drop reaches into the backend.
            let taken = lock(&cell).take();
            drop(taken);
            runs.fetch_add(1, Ordering::Release);
        })
    }

    /// `HostDrop`: on a capturing stream the callback becomes a host node of the capture (it
    /// runs, and drops, at every replay); elsewhere it runs now.
    fn host_drop(&mut self, on: usize, slot: usize) -> Result<Step, String> {
        if !self.bs[on].capabilities().host_callbacks {
            return Ok(Step::NotApplicable);
        }
        let capture = match self.model.on_current(on) {
            OnStream::Unclean => return Ok(Step::BackendDefined),
            _ if self.model.default_stream_ambiguous(on) => return Ok(Step::BackendDefined),
            OnStream::Clean(j) => Some(j),
            OnStream::NotCapturing => None,
        };
        let callback = self.dropper(slot);
        self.bs[on].host_callback(callback).ctx("host_callback")?;
        match capture {
            Some(j) => self.model.graph_mut(j).host_drops.push(slot),
            None => {
                let held = lock(&self.buffers[slot]).is_some();
                self.host_runs_launched += 1;
                self.await_host_runs()?;
                ensure!(
                    lock(&self.buffers[slot]).is_none(),
                    "an eager host callback ran but slot {slot} still holds a buffer"
                );
                if held {
                    self.model.released();
                }
            }
        }
        Ok(Step::Checked)
    }

    fn make_utility(&mut self, on: usize, utility: Utility) -> Result<Step, String> {
        // Making a utility synchronizes and captures: between the sequence's captures only.
        if self.model.any_capture() {
            return Ok(Step::NotApplicable);
        }
        let b = &self.bs[on];
        match utility {
            Utility::Graphed => {
                self.utilities.graphed = None;
                let sample = b
                    .alloc_from(&[1.0; UTILITY_LEN])
                    .ctx("alloc_from (sample)")?;
                let graphed = make_graphed_callable(
                    b,
                    double::<B> as Double<B>,
                    vec![sample],
                    GraphedCallableOptions::new().warmup_iters(1),
                )
                .ctx("make_graphed_callable")?;
                self.utilities.graphed = Some(graphed);
                self.model.utilities.graphed = Some(on);
            }
            Utility::Loader => {
                self.utilities.loader =
                    Some(StaticBufferLoader::new(b).ctx("StaticBufferLoader::new")?);
                self.model.utilities.loader = Some((on, Default::default()));
            }
            Utility::Bucketed => {
                self.utilities.bucketed = Some(
                    BucketedGraphCache::new(
                        b,
                        double::<B> as Double<B>,
                        CaptureSizes::new(BUCKETS).ctx("CaptureSizes")?,
                        vec![1],
                        BucketedCacheOptions::new().warmup_iters(0),
                    )
                    .ctx("BucketedGraphCache::new")?,
                );
                self.model.utilities.bucketed = Some((on, Default::default()));
            }
        }
        Ok(Step::Checked)
    }

    /// Checks that `got` is twice the contents of `x` (read through instance `on`).
    fn doubled(&self, on: usize, x: &B::Buffer<f32>, got: Vec<f32>, what: &str) -> CaseResult {
        let want: Vec<f32> = self.bs[on]
            .download(x)
            .ctx("download")?
            .into_iter()
            .map(|v| v * 2.0)
            .collect();
        ensure!(
            got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
            "{what}: got {got:?}, expected twice the input: {want:?}"
        );
        Ok(())
    }

    fn graphed_call(&mut self, slot: usize) -> Result<Step, String> {
        let (Some(on), false) = (self.model.utilities.graphed, self.model.any_capture()) else {
            return Ok(Step::NotApplicable);
        };
        let cell = Arc::clone(&self.buffers[slot]);
        let guard = lock(&cell);
        let Some((xi, x)) = guard.as_ref() else {
            return Ok(Step::NotApplicable);
        };
        let graphed = self.utilities.graphed.as_mut().expect("utility checked");
        let result = graphed.call(&[x]).map(|out| self.bs[on].download(&out[0]));
        // The arguments are checked first, then the instance.
        if x.len() != UTILITY_LEN {
            expect_err!(
                result,
                GraphError::ArgumentMismatch(_),
                "a graphed call with an input of another length"
            );
        } else if *xi != on {
            let address = x.device_address();
            self.refused_foreign(
                result,
                guard,
                on,
                address,
                "a graphed call with a buffer of the other instance",
            )?;
        } else {
            let got = result.ctx("graphed call")?.ctx("download of the output")?;
            self.doubled(on, x, got, "graphed call")?;
        }
        Ok(Step::Checked)
    }

    fn load(&mut self, stage: usize, microbatch: usize, slot: usize) -> Result<Step, String> {
        let (Some((on, loaded)), false) = (
            self.model.utilities.loader.clone(),
            self.model.any_capture(),
        ) else {
            return Ok(Step::NotApplicable);
        };
        let cell = Arc::clone(&self.buffers[slot]);
        let guard = lock(&cell);
        let Some((xi, x)) = guard.as_ref() else {
            return Ok(Step::NotApplicable);
        };
        let stage_id = [Stage::Training, Stage::Validation][stage];
        let loader = self.utilities.loader.as_mut().expect("utility checked");
        let result = loader.load(stage_id, microbatch, &[x]).map(drop);
        let lens = &loaded[stage];
        if microbatch > lens.len() {
            expect_err!(
                result,
                GraphError::ArgumentMismatch(_),
                "a load of a microbatch beyond the loaded ones"
            );
        } else if microbatch < lens.len() && lens[microbatch] != x.len() {
            expect_err!(
                result,
                GraphError::ArgumentMismatch(_),
                "a load of another length into a loaded microbatch"
            );
        } else if *xi != on {
            // A first load allocates, then refuses the copy: nothing is registered.
            let address = x.device_address();
            self.refused_foreign(
                result,
                guard,
                on,
                address,
                "a load of a buffer of the other instance",
            )?;
        } else {
            result.ctx("load")?;
            let statics = &loader.buffers(stage_id)[microbatch][0];
            let (got, want) = (
                self.bs[on].download(statics).ctx("download")?,
                self.bs[on].download(x).ctx("download")?,
            );
            ensure!(
                got == want,
                "the static buffer holds {got:?}, the input {want:?}"
            );
            if microbatch == lens.len()
                && let Some((_, loaded)) = self.model.utilities.loader.as_mut()
            {
                loaded[stage].push(x.len());
            }
        }
        Ok(Step::Checked)
    }

    fn bucketed_run(&mut self, slot: usize) -> Result<Step, String> {
        let (Some((on, _)), false) = (
            self.model.utilities.bucketed.clone(),
            self.model.any_capture(),
        ) else {
            return Ok(Step::NotApplicable);
        };
        let cell = Arc::clone(&self.buffers[slot]);
        let guard = lock(&cell);
        let Some((xi, x)) = guard.as_ref() else {
            return Ok(Step::NotApplicable);
        };
        let cache = self.utilities.bucketed.as_mut().expect("utility checked");
        let result = cache.run_device(&[x]).and_then(|run| run.download(0));
        // A batch within the buckets captures its bucket first, whatever comes next.
        let bucket = bucket_for(x.len());
        if let (Some(bucket), Some((_, captured))) =
            (bucket, self.model.utilities.bucketed.as_mut())
        {
            captured.insert(bucket);
        }
        if *xi != on {
            let address = x.device_address();
            self.refused_foreign(
                result,
                guard,
                on,
                address,
                "a bucketed run on a buffer of the other instance",
            )?;
        } else {
            let got = result.ctx("bucketed run")?;
            self.doubled(on, x, got, "bucketed run")?;
        }
        Ok(Step::Checked)
    }

    /// Checks every observable fact against the model.
    fn verify(&self) -> CaseResult {
        for (i, (g, m)) in self.graphs.iter().zip(&self.model.graphs).enumerate() {
            if let (Some(g), Some(m)) = (g, m) {
                ensure!(
                    g.state() == m.state,
                    "graph {i}: state() is {}, the model says {}",
                    g.state(),
                    m.state
                );
            }
        }
        for (on, b) in self.bs.iter().enumerate() {
            for (k, stream) in self.streams[on].iter().enumerate() {
                let Some(expected) = self.model.capturing_expected(on, k) else {
                    continue;
                };
                let now = b.is_capturing(stream).ctx("is_capturing")?;
                ensure!(
                    now == expected,
                    "instance {on}, stream {k}: is_capturing() is {now}, the model says \
                     {expected}"
                );
            }
            ensure!(
                b.current_stream() == self.streams[on][self.model.current[on]],
                "instance {on}: current_stream() is not the stream last made current"
            );
        }
        if let (Some(loader), Some((_, loaded))) =
            (&self.utilities.loader, &self.model.utilities.loader)
        {
            for (stage, lens) in loaded.iter().enumerate() {
                let stage_id = [Stage::Training, Stage::Validation][stage];
                let held: Vec<usize> = loader
                    .buffers(stage_id)
                    .iter()
                    .map(|inputs| inputs[0].len())
                    .collect();
                ensure!(
                    held == *lens,
                    "the loader holds microbatches of lengths {held:?} for stage {stage_id}, \
                     the model says {lens:?}"
                );
            }
        }
        if let (Some(cache), Some((_, captured))) =
            (&self.utilities.bucketed, &self.model.utilities.bucketed)
        {
            let held = cache.captured_buckets();
            ensure!(
                held.iter().copied().eq(captured.iter().copied()),
                "the bucketed cache captured {held:?}, the model says {captured:?}"
            );
        }
        Ok(())
    }
}

/// Runs one sequence on the instances `bs` (whose streams are `streams[i]`, stream 0 the
/// default one), checking every call, then tears everything down and checks that nothing
/// captures and each instance's memory is back to what it was.
pub(super) fn run_sequence<B: Backend>(
    bs: &[B],
    streams: &[Vec<B::Stream>],
    dir: &Path,
    actions: &[Action],
    counters: &Counters,
) -> CaseResult {
    let baselines: Vec<_> = bs.iter().map(|b| b.memory_stats()).collect();
    let mut previous = Vec::new();
    for (b, streams) in bs.iter().zip(streams) {
        previous.push(
            b.set_current_stream(&streams[0])
                .ctx("set_current_stream")?,
        );
    }
    let order = bs
        .iter()
        .map(|b| b.new_event())
        .collect::<Result<Vec<_>, _>>()
        .ctx("new_event")?;
    let mut machine = Machine {
        order,
        bs,
        streams,
        dir,
        model: Model::new(bs[0].capabilities().uncapturable_default_stream),
        graphs: (0..GRAPHS).map(|_| None).collect(),
        utilities: Utilities {
            graphed: None,
            loader: None,
            bucketed: None,
        },
        buffers: (0..BUFFERS).map(|_| Arc::new(Mutex::new(None))).collect(),
        handles: vec![None; HANDLES],
        seen_handles: HashSet::new(),
        host_runs: Arc::new(AtomicUsize::new(0)),
        host_runs_launched: 0,
        counters,
    };
    let mut outcome = Ok(());
    for (n, &action) in actions.iter().enumerate() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let step = machine.step(action)?;
            machine.verify()?;
            Ok(step)
        }));
        let fail = |message: String| Err(format!("call {n} {action:?}: {message}"));
        match result {
            Ok(Ok(step)) => counters.count(&action, step),
            Ok(Err(message)) => {
                outcome = fail(message);
                break;
            }
            Err(payload) => {
                outcome = fail(format!(
                    "panicked: {}",
                    crate::report::panic_message(&*payload)
                ));
                break;
            }
        }
    }
    // Tear down: graphs first (aborting captures), then the utilities, then the buffers —
    // taken out of their slots, which retired host callbacks may still share.
    for (b, streams) in bs.iter().zip(streams) {
        let _ = b.set_current_stream(&streams[0]);
    }
    let teardown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let buffers = std::mem::take(&mut machine.buffers);
        drop(machine);
        for slot in &buffers {
            drop(lock(slot).take());
        }
    }));
    let restored: Vec<_> = bs
        .iter()
        .zip(&previous)
        .map(|(b, s)| b.set_current_stream(s))
        .collect();
    outcome?;
    for r in restored {
        r.ctx("set_current_stream back")?;
    }
    if let Err(payload) = teardown {
        return Err(format!(
            "dropping the sequence's graphs, utilities and buffers panicked: {}",
            crate::report::panic_message(&*payload)
        ));
    }
    for (on, (b, baseline)) in bs.iter().zip(&baselines).enumerate() {
        for (k, stream) in streams[on].iter().enumerate() {
            ensure!(
                !b.is_capturing(stream).ctx("is_capturing")?,
                "instance {on}, stream {k} is still capturing after every graph was dropped"
            );
        }
        let after = b.memory_stats();
        ensure!(
            after == *baseline,
            "instance {on}: memory leaked by the sequence: before {baseline:?}, after \
             everything dropped {after:?}"
        );
    }
    counters.sequence_done();
    Ok(())
}
