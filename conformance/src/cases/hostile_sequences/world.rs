//! The objects of a sequence and the calls on them: [`World`] holds every stream, event, graph
//! and buffer of one sequence, shared by its threads, and makes one [`Action`] at a time.
//!
//! Nothing here predicts an outcome: a call ends in `Ok`, in a typed error, or finds its slot
//! empty. The only errors that fail a sequence are those no sequence can cause without a
//! defect (see [`defect`]); panics are caught by the caller.
//!
//! Locks of the sequence itself (slots) are never held across a backend call, except a
//! graph's slot around a call on that graph; a conditional node's body — which runs inside a
//! backend call — only *tries* a graph's slot, so the sequence cannot deadlock on its own locks
//! whatever the backend does: a hang the watchdog sees is the backend's.

use std::{
    collections::BTreeMap,
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, TryLockError,
        atomic::{AtomicUsize, Ordering},
    },
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CapturedNode, DeviceBuffer, Element, EventOptions, Gemm, GraphError,
    GraphOptions, PoolId, PortableOps, View, kernel::KernelArg,
};

use super::actions::{
    Action, ArgSel, Body, Cond, EVENTS, FLAG_LEN, FLAGS, GRAPHS, Misbehave, NODES, OpKind, Operand,
    PoolSel, ViewSel,
};
use crate::cases::kernels::AFFINE;

/// An `f32` buffer of backend `B`.
type Buf<B> = <B as PortableOps>::Buffer<f32>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a call did not end in `Ok`.
pub(super) enum Why {
    /// A slot it names is empty (or, in a body, a graph is busy on another thread): no call
    /// was made.
    Empty,
    /// The backend's typed error.
    Error(GraphError),
}

impl From<GraphError> for Why {
    fn from(e: GraphError) -> Self {
        Why::Error(e)
    }
}

/// Errors that only a defect gives, whatever the calls: work touching freed memory (a graph
/// keeps what its captured work uses, a buffer handle the rest), a host callback or kernel
/// panicking (the sequence's callback does nothing, and the kernel's arguments are checked
/// against its extents before it runs).
fn defect(e: &GraphError) -> bool {
    matches!(
        e,
        GraphError::DanglingBuffer { .. }
            | GraphError::HostCallbackPanicked { .. }
            | GraphError::KernelFailed { .. }
    )
}

/// The name of an error's variant.
fn variant(e: &GraphError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// What the calls of a sequence (or of many) ended in.
#[derive(Default, Debug)]
pub(super) struct Tally {
    pub(super) ok: usize,
    pub(super) empty: usize,
    pub(super) errors: BTreeMap<String, usize>,
}

impl Tally {
    pub(super) fn calls(&self) -> usize {
        self.ok + self.empty + self.errors.values().sum::<usize>()
    }

    pub(super) fn add(&mut self, other: &Tally) {
        self.ok += other.ok;
        self.empty += other.empty;
        for (k, n) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += n;
        }
    }
}

/// The calls of one thread of a sequence as they are made: the one in progress, and when
/// each began and returned on a clock all threads of the sequence share (ticks, not time), so
/// that a report shows which calls of other threads overlapped one. Atomics only: the
/// watchdog reads it while the sequence's threads may hold any lock.
pub(super) struct CallLog {
    clock: Arc<AtomicUsize>,
    /// The call in progress + 1; 0 before the first, `spans.len() + 1` once all returned.
    at: AtomicUsize,
    /// Each call's first and last tick (0: not yet).
    spans: Vec<[AtomicUsize; 2]>,
}

impl CallLog {
    /// The log of `calls` calls on `clock`.
    pub(super) fn new(clock: &Arc<AtomicUsize>, calls: usize) -> Self {
        CallLog {
            clock: Arc::clone(clock),
            at: AtomicUsize::new(0),
            spans: (0..calls).map(|_| Default::default()).collect(),
        }
    }

    fn tick(&self) -> usize {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn begin(&self, i: usize) {
        self.at.store(i + 1, Ordering::SeqCst);
        self.spans[i][0].store(self.tick(), Ordering::SeqCst);
    }

    fn end(&self, i: usize) {
        self.spans[i][1].store(self.tick(), Ordering::SeqCst);
    }

    fn finish(&self) {
        self.at.store(self.spans.len() + 1, Ordering::SeqCst);
    }

    /// The call in progress + 1 (0 before the first, the number of calls + 1 once done).
    pub(super) fn at(&self) -> usize {
        self.at.load(Ordering::SeqCst)
    }

    /// When call `i` began and returned (0: not yet).
    pub(super) fn span(&self, i: usize) -> [usize; 2] {
        self.spans[i].each_ref().map(|t| t.load(Ordering::SeqCst))
    }
}

/// The elements `sel` of `buf`; out of range is the view's typed error.
fn view<T: Element, Buffer: DeviceBuffer<Element = T>>(
    buf: &Buffer,
    sel: ViewSel,
) -> Result<View<'_, Buffer>, GraphError> {
    match sel {
        ViewSel::Whole => Ok(View::from(buf)),
        ViewSel::Prefix(n) => buf.view(..usize::from(n)),
        ViewSel::Range(start, len) => {
            let start = usize::from(start);
            buf.view(start..start + usize::from(len))
        }
    }
}

/// Every object of one sequence.
pub(super) struct World<B: Backend> {
    b: B,
    streams: Vec<B::Stream>,
    graphs: Vec<Mutex<Option<B::Graph>>>,
    events: Vec<Mutex<Option<Arc<B::Event>>>>,
    buffers: Vec<Mutex<Option<Arc<Buf<B>>>>>,
    flags: Vec<Buf<B>>,
    cond: B::Buffer<u32>,
    nodes: Mutex<Vec<CapturedNode>>,
    handle: PoolId,
}

impl<B: Backend> World<B> {
    /// The sequence's events, flags (all true) and condition (true), on `b`'s `streams`;
    /// graph and buffer slots empty.
    pub(super) fn new(b: &B, streams: &[B::Stream]) -> Result<Self, GraphError> {
        Ok(World {
            b: b.clone(),
            streams: streams.to_vec(),
            graphs: (0..GRAPHS).map(|_| Mutex::new(None)).collect(),
            events: (0..EVENTS)
                .map(|_| Ok(Mutex::new(Some(Arc::new(b.new_event()?)))))
                .collect::<Result<_, GraphError>>()?,
            buffers: (0..super::actions::BUFFERS)
                .map(|_| Mutex::new(None))
                .collect(),
            flags: (0..FLAGS)
                .map(|_| b.alloc_from(&[1.0f32; FLAG_LEN]))
                .collect::<Result<_, _>>()?,
            cond: b.alloc_from(&[1u32])?,
            nodes: Mutex::new(Vec::new()),
            handle: b.graph_pool_handle(),
        })
    }

    /// Drops everything: graphs first (aborting their captures), then events and buffers.
    pub(super) fn teardown(self) {
        for slot in &self.graphs {
            let graph = lock(slot).take();
            drop(graph);
        }
        drop(self);
    }

    /// Makes `calls` one after the other, counting how each ended in `tally` and logging each
    /// in `log` (for the watchdog, and to tell which calls of other threads overlapped a
    /// failing one). `Err` on a panic (the backend's or a dependency's) or an error only a
    /// defect gives.
    pub(super) fn run_calls(
        &self,
        calls: &[Action],
        log: &CallLog,
        tally: &mut Tally,
    ) -> Result<(), String> {
        let trace = std::env::var_os(super::TRACE_ENV).is_some();
        for (i, action) in calls.iter().enumerate() {
            if trace {
                // Before the call: a call that kills the process (a fault in a driver) is the
                // last line printed.
                eprintln!("5.15 call {i} {action:?}");
            }
            log.begin(i);
            let result = panic::catch_unwind(AssertUnwindSafe(|| self.run(*action)));
            log.end(i);
            if trace && let Ok(Err(Why::Error(e))) = &result {
                eprintln!("5.15 call {i}: {e}");
            }
            match result {
                Ok(Ok(())) => tally.ok += 1,
                Ok(Err(Why::Empty)) => tally.empty += 1,
                Ok(Err(Why::Error(e))) => {
                    if defect(&e) {
                        return Err(format!(
                            "call {i} {action:?} returned an error no call sequence may cause: \
                             {e:?}: {e}"
                        ));
                    }
                    *tally.errors.entry(variant(&e)).or_default() += 1;
                }
                Err(payload) => {
                    let message = crate::report::panic_message(&*payload);
                    return Err(format!("call {i} {action:?} panicked: {message}"));
                }
            }
        }
        log.finish();
        Ok(())
    }

    fn buffer(&self, slot: u8) -> Result<Arc<Buf<B>>, Why> {
        lock(&self.buffers[usize::from(slot)])
            .clone()
            .ok_or(Why::Empty)
    }

    fn event(&self, e: u8) -> Result<Arc<B::Event>, Why> {
        lock(&self.events[usize::from(e)]).clone().ok_or(Why::Empty)
    }

    fn stream(&self, s: u8) -> &B::Stream {
        &self.streams[usize::from(s) % self.streams.len()]
    }

    /// Runs `f` on the graph in slot `g`. In a body (`wait == false`) a slot another thread
    /// holds counts as empty: that thread may be waiting for the backend call the body runs
    /// in.
    fn with_graph<R>(
        &self,
        g: u8,
        wait: bool,
        f: impl FnOnce(&mut B::Graph) -> R,
    ) -> Result<R, Why> {
        let slot = &self.graphs[usize::from(g)];
        let mut guard = if wait {
            lock(slot)
        } else {
            match slot.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => return Err(Why::Empty),
            }
        };
        guard.as_mut().map(f).ok_or(Why::Empty)
    }

    fn alloc(&self, slot: u8, len: usize) -> Result<(), Why> {
        let buffer = Arc::new(self.b.alloc::<f32>(len)?);
        let old = lock(&self.buffers[usize::from(slot)]).replace(buffer);
        drop(old);
        Ok(())
    }

    fn drop_buffer(&self, slot: u8) -> Result<(), Why> {
        let old = lock(&self.buffers[usize::from(slot)]).take();
        old.map(drop).ok_or(Why::Empty)
    }

    fn op(&self, kind: OpKind, dst: Operand, src: Operand, scalar: f32) -> Result<(), Why> {
        let d = self.buffer(dst.slot)?;
        let dv = view(&*d, dst.view)?;
        let b = &self.b;
        match kind {
            OpKind::Fill => b.fill(dv, scalar)?,
            OpKind::AddScalar => b.add_scalar(dv, scalar)?,
            OpKind::Scale => b.scale(dv, scalar)?,
            OpKind::Copy | OpKind::Axpy | OpKind::Mul => {
                let s = self.buffer(src.slot)?;
                let sv = view(&*s, src.view)?;
                match kind {
                    OpKind::Copy => b.copy(dv, sv)?,
                    OpKind::Axpy => b.axpy(dv, scalar, sv)?,
                    _ => b.mul(dv, sv)?,
                }
            }
        }
        Ok(())
    }

    fn new_graph(
        &self,
        g: u8,
        keep_graph: bool,
        mode: accel_graph_api::CaptureErrorMode,
        pool: PoolSel,
    ) -> Result<(), Why> {
        let pool = match pool {
            PoolSel::Own => None,
            PoolSel::Shared => Some(self.handle),
            PoolSel::OfGraph(other) if other == g => None,
            PoolSel::OfGraph(other) => self
                .with_graph(other, true, |graph| graph.pool().ok())
                .ok()
                .flatten(),
        };
        let mut options = GraphOptions::new()
            .keep_graph(keep_graph)
            .capture_error_mode(mode);
        if let Some(pool) = pool {
            options = options.pool(pool);
        }
        let graph = self.b.graph(options)?;
        let old = lock(&self.graphs[usize::from(g)]).replace(graph);
        drop(old);
        Ok(())
    }

    fn update_graph(&self, g: u8, from: u8) -> Result<(), Why> {
        if g == from {
            return Err(Why::Empty);
        }
        // Two slots: locked in slot order, whichever is updated.
        let (low, high) = (g.min(from), g.max(from));
        let mut first = lock(&self.graphs[usize::from(low)]);
        let mut second = lock(&self.graphs[usize::from(high)]);
        let (target, source) = if g == low {
            (first.as_mut(), second.as_ref())
        } else {
            (second.as_mut(), first.as_ref())
        };
        match (target, source) {
            (Some(target), Some(source)) => Ok(self.b.update_graph(target, source)?),
            _ => Err(Why::Empty),
        }
    }

    fn update_node(&self, g: u8, node: u8, index: u8, arg: ArgSel) -> Result<(), Why> {
        let node = {
            let nodes = lock(&self.nodes);
            if nodes.is_empty() {
                return Err(Why::Empty);
            }
            nodes[usize::from(node) % nodes.len()]
        };
        let held;
        let arg = match arg {
            ArgSel::Buffer(o) => {
                held = self.buffer(o.slot)?;
                KernelArg::buffer(view(&*held, o.view)?)
            }
            ArgSel::F32(v) => KernelArg::scalar(v),
            ArgSel::U32(v) => KernelArg::scalar(v),
            ArgSel::I32(v) => KernelArg::scalar(v),
        };
        let args = [(usize::from(index), arg)];
        self.with_graph(g, true, |graph| self.b.update_node(graph, node, &args))??;
        Ok(())
    }

    fn kernel(&self, y: Operand, x: Operand, n: u32, empty_grid: bool) -> Result<(), Why> {
        let (yb, xb) = (self.buffer(y.slot)?, self.buffer(x.slot)?);
        let args = [
            KernelArg::buffer(view(&*yb, y.view)?),
            KernelArg::buffer(view(&*xb, x.view)?),
            KernelArg::scalar(1.5f32),
            KernelArg::scalar(0.25f32),
            KernelArg::scalar(n),
        ];
        let grid = if empty_grid {
            [0, 1, 1]
        } else {
            AFFINE.grid_for(n as usize)
        };
        Ok(self.b.launch_kernel(&AFFINE, grid, &args)?)
    }

    fn gemm(
        &self,
        mnk: [u8; 3],
        transpose: [bool; 2],
        beta: f32,
        [a, b, c]: [Operand; 3],
    ) -> Result<(), Why> {
        let (ab, bb, cb) = (
            self.buffer(a.slot)?,
            self.buffer(b.slot)?,
            self.buffer(c.slot)?,
        );
        let [m, n, k] = mnk.map(usize::from);
        let spec = Gemm::new(m, n, k)
            .transpose_a(transpose[0])
            .transpose_b(transpose[1])
            .scalars(1.0, beta);
        Ok(self.b.gemm(
            &spec,
            view(&*ab, a.view)?,
            view(&*bb, b.view)?,
            view(&*cb, c.view)?,
        )?)
    }

    /// A conditional node's body: its misbehaviours (results ignored), then perhaps an error,
    /// its work, the zeroing of a loop's flag, and perhaps an error after all.
    fn body(&self, body: &Body, flag: Option<View<'_, Buf<B>>>) -> Result<(), GraphError> {
        // The stream the body runs on (captured: its own), where a loop's flag is zeroed even
        // if a misbehaviour switched streams: zeroed elsewhere, the captured loop would never
        // end (a hang of the sequence's making; backends that run loops on the host stop
        // them only after `WHILE_ITERATION_LIMIT` iterations).
        let own = self.b.current_stream();
        for m in body.misbehave {
            self.misbehave(m);
        }
        if body.give_up {
            return Err(GraphError::ArgumentMismatch(
                "a conditional body gives up before its work".to_owned(),
            ));
        }
        if let Some((kind, dst, src)) = body.op {
            match self.op(kind, dst, src, 1.0) {
                Ok(()) | Err(Why::Empty) => {}
                Err(Why::Error(e)) => return Err(e),
            }
        }
        if let Some(flag) = flag {
            self.b.set_current_stream(&own)?;
            self.b.fill(flag, 0.0)?;
        }
        if body.fail_after {
            return Err(GraphError::ArgumentMismatch(
                "a conditional body fails after its work".to_owned(),
            ));
        }
        Ok(())
    }

    fn misbehave(&self, m: Misbehave) {
        let b = &self.b;
        // Only that the call returns matters here; its outcome is the body's business.
        let _ = match m {
            Misbehave::Nothing => Ok(()),
            Misbehave::CaptureEnd(g) => self
                .with_graph(g, false, |graph| graph.capture_end())
                .and_then(|r| r.map_err(Why::from)),
            Misbehave::CaptureBegin(g) => self
                .with_graph(g, false, |graph| graph.capture_begin())
                .and_then(|r| r.map_err(Why::from)),
            Misbehave::Record(e) => self
                .event(e)
                .and_then(|ev| b.record_event(&ev).map_err(Why::from)),
            Misbehave::Wait(e) => self
                .event(e)
                .and_then(|ev| b.wait_event(&ev).map_err(Why::from)),
            Misbehave::SetStream(s) => b
                .set_current_stream(self.stream(s))
                .map(drop)
                .map_err(Why::from),
            Misbehave::Synchronize => b.synchronize().map_err(Why::from),
            Misbehave::Alloc(slot) => self.alloc(slot, 4),
            Misbehave::DropBuffer(slot) => self.drop_buffer(slot),
            Misbehave::Replay(g) => self
                .with_graph(g, false, |graph| graph.replay())
                .and_then(|r| r.map_err(Why::from)),
            Misbehave::Nested => b
                .if_then(&self.cond, || match self.buffer(0) {
                    Ok(x) => b.add_scalar(&*x, 1.0),
                    Err(_) => Ok(()),
                })
                .map_err(Why::from),
            Misbehave::CapturedNode => b.captured_node().map(drop).map_err(Why::from),
            Misbehave::Download(slot) => self
                .buffer(slot)
                .and_then(|x| b.download(&*x).map(drop).map_err(Why::from)),
        };
    }

    /// Makes one call.
    fn run(&self, action: Action) -> Result<(), Why> {
        let b = &self.b;
        match action {
            Action::SetStream(s) => drop(b.set_current_stream(self.stream(s))?),
            Action::NewGraph {
                g,
                keep_graph,
                mode,
                pool,
            } => self.new_graph(g, keep_graph, mode, pool)?,
            Action::DropGraph(g) => {
                let old = lock(&self.graphs[usize::from(g)]).take();
                old.map(drop).ok_or(Why::Empty)?;
            }
            Action::CaptureBegin { g, stream } => {
                b.set_current_stream(self.stream(stream))?;
                self.with_graph(g, true, |graph| graph.capture_begin())??;
            }
            Action::CaptureEnd(g) => self.with_graph(g, true, |graph| graph.capture_end())??,
            Action::Replay(g) => self.with_graph(g, true, |graph| graph.replay())??,
            Action::Reset(g) => self.with_graph(g, true, |graph| graph.reset())?,
            Action::Instantiate(g) => self.with_graph(g, true, |graph| graph.instantiate())??,
            Action::UpdateGraph { g, from } => self.update_graph(g, from)?,
            Action::NewEvent { e, external } => {
                let event = Arc::new(b.new_event_with(EventOptions::new().external(external))?);
                let old = lock(&self.events[usize::from(e)]).replace(event);
                drop(old);
            }
            Action::Record(e) => b.record_event(&*self.event(e)?)?,
            Action::Wait(e) => b.wait_event(&*self.event(e)?)?,
            Action::EventSynchronize(e) => b.event_synchronize(&*self.event(e)?)?,
            Action::EventQuery(e) => drop(b.event_query(&*self.event(e)?)?),
            Action::Synchronize => b.synchronize()?,
            Action::StreamSynchronize(s) => b.stream_synchronize(self.stream(s))?,
            Action::EmptyCache => b.empty_cache()?,
            Action::Alloc { slot, len } => self.alloc(slot, len)?,
            Action::DropBuffer(slot) => self.drop_buffer(slot)?,
            Action::RecordStream { slot, stream } => {
                b.record_stream(&*self.buffer(slot)?, self.stream(stream))?
            }
            Action::Upload { dst, extra } => {
                let x = self.buffer(dst.slot)?;
                let v = view(&*x, dst.view)?;
                let data = vec![0.5f32; v.len() + usize::from(extra)];
                b.upload(v, &data)?;
            }
            Action::Download(src) => {
                let x = self.buffer(src.slot)?;
                drop(b.download(view(&*x, src.view)?)?);
            }
            Action::Op {
                kind,
                dst,
                src,
                scalar,
            } => self.op(kind, dst, src, scalar)?,
            Action::SetFlag { flag, value } => b.fill(view(self.flag(flag), flag.view)?, value)?,
            Action::SetCond(value) => b.upload(&self.cond, &[value])?,
            Action::Kernel {
                y,
                x,
                n,
                empty_grid,
            } => self.kernel(y, x, n, empty_grid)?,
            Action::Gemm {
                mnk,
                transpose,
                beta,
                a,
                b: operand_b,
                c,
            } => self.gemm(mnk, transpose, beta, [a, operand_b, c])?,
            Action::NoteNode => {
                let node = b.captured_node()?;
                let mut nodes = lock(&self.nodes);
                if nodes.len() == NODES {
                    nodes.remove(0);
                }
                nodes.push(node);
            }
            Action::UpdateNode {
                g,
                node,
                index,
                arg,
            } => self.update_node(g, node, index, arg)?,
            Action::IfThen { cond, body } => match cond {
                Cond::U32 => b.if_then(&self.cond, || self.body(&body, None))?,
                Cond::Flag(flag) => {
                    let v = view(self.flag(flag), flag.view)?;
                    b.if_then(v, || self.body(&body, None))?
                }
            },
            Action::WhileLoop { flag, body } => {
                let v = view(self.flag(flag), flag.view)?;
                b.while_loop(v, || self.body(&body, Some(v)))?
            }
            Action::HostCallback => b.host_callback(Arc::new(|| {}))?,
        }
        Ok(())
    }

    fn flag(&self, flag: Operand) -> &Buf<B> {
        &self.flags[usize::from(flag.slot) % FLAGS]
    }
}
