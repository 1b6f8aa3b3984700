//! Random API call sequences checked against a model of PyTorch's graph state machine.
//!
//! Each sequence mixes graph calls (capture_begin/end, instantiate, replay, reset, pool,
//! debug mode and dumps, nodes), graphs with random options (keep_graph, shared pools,
//! capture modes), buffer allocation and release, portable ops and stream switches. After
//! every call the model's prediction is checked: the result (success or the exact error
//! variant), every graph's `state()`, which streams are capturing, the current stream. Nothing
//! may panic, and once everything is dropped the backend holds exactly the memory it held
//! before the sequence.
//!
//! Where CUDA leaves an outcome open (does freeing memory during someone else's capture
//! invalidate it?), the model accepts either outcome; where a call's outcome itself is open
//! (eager work on a legacy-style default stream during a capture, work on an invalidated
//! capture), the sequence skips the call. Every such call is counted and printed.

use std::{cell::Cell, collections::HashSet, path::Path, rc::Rc};

use accel_graph_api::{
    AcceleratorGraph, Backend, Capabilities, CaptureErrorMode, DeviceBuffer, GraphError,
    GraphOptions, GraphState, NodeKind, PoolId,
};
use proptest::{
    collection::vec,
    prelude::*,
    strategy::Union,
    test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner},
};

use crate::{
    Case, SuiteConfig,
    case::requirements,
    check::{CaseResult, Ctx, ensure, expect_err, leak_checked},
};

const GRAPHS: usize = 3;
const BUFFERS: usize = 4;
const HANDLES: usize = 2;
/// Stream 0 is the default stream.
const STREAMS: usize = 3;
const LENGTHS: [usize; 3] = [1, 4, 16];
const MAX_ACTIONS: usize = 40;

pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    vec![Case::new(
        "5.14 random API sequences follow the graph state machine, never panic, leak nothing",
        "5.14 state machine",
        requirements::none,
        state_machine::<B>,
    )]
}

/// Where a new graph's pool comes from.
#[derive(Debug, Clone, Copy)]
enum PoolChoice {
    Own,
    Handle(usize),
    ShareGraph(usize),
    Invalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Fill,
    Copy,
    AddScalar,
    Scale,
    Axpy,
}

/// One call of a sequence (indices are slots of the sequence's graphs, buffers, handles and
/// streams).
#[derive(Debug, Clone, Copy)]
enum Action {
    NewGraph {
        slot: usize,
        keep_graph: bool,
        pool: PoolChoice,
        mode: CaptureErrorMode,
    },
    DropGraph(usize),
    CaptureBegin(usize),
    CaptureEnd(usize),
    Instantiate(usize),
    Replay(usize),
    Reset(usize),
    Pool(usize),
    EnableDebugMode(usize),
    DebugDump(usize),
    Nodes(usize),
    Alloc {
        slot: usize,
        len: usize,
    },
    DropBuffer(usize),
    Op {
        kind: OpKind,
        a: usize,
        b: usize,
    },
    UseStream(usize),
    NewPoolHandle(usize),
    Synchronize,
    Download(usize),
}

fn action() -> impl Strategy<Value = Action> {
    let g = || 0..GRAPHS;
    let pool = prop_oneof![
        3 => Just(PoolChoice::Own),
        2 => (0..HANDLES).prop_map(PoolChoice::Handle),
        2 => (0..GRAPHS).prop_map(PoolChoice::ShareGraph),
        1 => Just(PoolChoice::Invalid),
    ];
    let mode = prop::sample::select(CaptureErrorMode::ALL.to_vec());
    let kind = prop::sample::select(vec![
        OpKind::Fill,
        OpKind::Copy,
        OpKind::AddScalar,
        OpKind::Scale,
        OpKind::Axpy,
    ]);
    let arms: Vec<(u32, BoxedStrategy<Action>)> = vec![
        (
            4,
            (g(), any::<bool>(), pool, mode)
                .prop_map(|(slot, keep_graph, pool, mode)| Action::NewGraph {
                    slot,
                    keep_graph,
                    pool,
                    mode,
                })
                .boxed(),
        ),
        (1, g().prop_map(Action::DropGraph).boxed()),
        (5, g().prop_map(Action::CaptureBegin).boxed()),
        (5, g().prop_map(Action::CaptureEnd).boxed()),
        (2, g().prop_map(Action::Instantiate).boxed()),
        (4, g().prop_map(Action::Replay).boxed()),
        (2, g().prop_map(Action::Reset).boxed()),
        (1, g().prop_map(Action::Pool).boxed()),
        (1, g().prop_map(Action::EnableDebugMode).boxed()),
        (1, g().prop_map(Action::DebugDump).boxed()),
        (1, g().prop_map(Action::Nodes).boxed()),
        (
            4,
            (0..BUFFERS, prop::sample::select(LENGTHS.to_vec()))
                .prop_map(|(slot, len)| Action::Alloc { slot, len })
                .boxed(),
        ),
        (1, (0..BUFFERS).prop_map(Action::DropBuffer).boxed()),
        (
            6,
            (kind, 0..BUFFERS, 0..BUFFERS)
                .prop_map(|(kind, a, b)| Action::Op { kind, a, b })
                .boxed(),
        ),
        (4, (0..STREAMS).prop_map(Action::UseStream).boxed()),
        (1, (0..HANDLES).prop_map(Action::NewPoolHandle).boxed()),
        (1, Just(Action::Synchronize).boxed()),
        (1, (0..BUFFERS).prop_map(Action::Download).boxed()),
    ];
    Union::new_weighted(arms)
}

/// A sequence: two graphs and two buffers to start with (so that most calls apply), a
/// non-default stream made current, then random calls.
fn sequence() -> impl Strategy<Value = Vec<Action>> {
    let new_graph = |slot: usize| {
        (
            any::<bool>(),
            prop::sample::select(CaptureErrorMode::ALL.to_vec()),
        )
            .prop_map(move |(keep_graph, mode)| Action::NewGraph {
                slot,
                keep_graph,
                pool: PoolChoice::Own,
                mode,
            })
    };
    let alloc = |slot: usize| {
        prop::sample::select(LENGTHS.to_vec()).prop_map(move |len| Action::Alloc { slot, len })
    };
    (
        new_graph(0),
        new_graph(1),
        alloc(0),
        alloc(1),
        vec(action(), 0..MAX_ACTIONS),
    )
        .prop_map(|(g0, g1, a0, a1, rest)| {
            let mut actions = vec![g0, g1, a0, a1, Action::UseStream(1)];
            actions.extend(rest);
            actions
        })
}

/// Whether a capture will still end cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Validity {
    /// Nothing happened that could invalidate it.
    Clean,
    /// Something happened that CUDA may or may not count against it.
    Maybe,
    /// It was invalidated: `capture_end` must fail with `CaptureInvalidated`.
    Invalid,
}

/// The model of one graph object: PyTorch's state machine plus what the capture recorded.
#[derive(Debug, Clone)]
struct ModelGraph {
    keep_graph: bool,
    mode: CaptureErrorMode,
    pool_option: Option<PoolId>,
    state: GraphState,
    debug: bool,
    raw_kept: bool,
    capture_stream: usize,
    validity: Validity,
    copies: usize,
    other_ops: usize,
    pool: Option<PoolId>,
}

impl ModelGraph {
    fn captured(&self) -> bool {
        matches!(self.state, GraphState::Captured | GraphState::Ready)
    }

    /// Back to `Empty`: what `reset()` and every failed `capture_end` do.
    fn discard(&mut self) {
        self.state = GraphState::Empty;
        self.raw_kept = false;
        self.pool = None;
        self.validity = Validity::Clean;
    }
}

struct Slot<B: Backend> {
    /// Declared first so it drops first: the graph lets go of its pool before the buffers
    /// it used are released.
    graph: B::Graph,
    model: ModelGraph,
    /// Buffers the captured work touches: kept alive as long as the graph may replay it.
    holds: Vec<Rc<B::Buffer>>,
}

/// Counts over the whole case.
#[derive(Default)]
struct Counters {
    sequences: Cell<usize>,
    checked: Cell<usize>,
    not_applicable: Cell<usize>,
    backend_defined: Cell<usize>,
}

struct Machine<'a, B: Backend> {
    b: &'a B,
    caps: &'a Capabilities,
    streams: &'a [B::Stream],
    dir: &'a Path,
    current: usize,
    graphs: Vec<Option<Slot<B>>>,
    buffers: Vec<Option<Rc<B::Buffer>>>,
    handles: Vec<Option<PoolId>>,
    seen_handles: HashSet<PoolId>,
}

/// What became of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Called and checked.
    Checked,
    /// Not applicable now (its graph or buffer slot is empty, an op would alias).
    NotApplicable,
    /// Left out: CUDA leaves its outcome to the driver (see the module docs).
    BackendDefined,
}

/// How the current stream relates to the captures in progress.
enum OnStream {
    NotCapturing,
    Clean(usize),
    Unclean,
}

impl<'a, B: Backend> Machine<'a, B> {
    fn capture_on(&self, stream: usize) -> Option<usize> {
        self.graphs.iter().position(|s| {
            s.as_ref().is_some_and(|s| {
                s.model.state == GraphState::Capturing && s.model.capture_stream == stream
            })
        })
    }

    fn capturing(&self) -> impl Iterator<Item = &ModelGraph> {
        self.graphs
            .iter()
            .flatten()
            .map(|s| &s.model)
            .filter(|m| m.state == GraphState::Capturing)
    }

    fn any_capture(&self) -> bool {
        self.capturing().next().is_some()
    }

    fn on_current(&self) -> OnStream {
        match self.capture_on(self.current) {
            None => OnStream::NotCapturing,
            Some(i) if self.model(i).validity == Validity::Clean => OnStream::Clean(i),
            Some(_) => OnStream::Unclean,
        }
    }

    /// Eager work on the default stream while another stream captures: on CUDA's legacy
    /// stream that synchronizes with the capture; whether it does is the backend's business.
    fn default_stream_ambiguous(&self) -> bool {
        self.current == 0 && self.capture_on(0).is_none() && self.any_capture()
    }

    fn model(&self, i: usize) -> &ModelGraph {
        &self.graphs[i].as_ref().expect("slot checked").model
    }

    fn slot(&mut self, i: usize) -> &mut Slot<B> {
        self.graphs[i].as_mut().expect("slot checked")
    }

    /// Memory may have gone back to the device: captures in progress may count that as an
    /// unsafe call.
    fn taint_captures(&mut self) {
        for slot in self.graphs.iter_mut().flatten() {
            if slot.model.state == GraphState::Capturing && slot.model.validity == Validity::Clean {
                slot.model.validity = Validity::Maybe;
            }
        }
    }

    /// An unsafe call on this thread: every non-relaxed capture is invalidated.
    fn unsafe_call_made(&mut self) {
        for slot in self.graphs.iter_mut().flatten() {
            if slot.model.state == GraphState::Capturing {
                if slot.model.mode == CaptureErrorMode::Relaxed {
                    if slot.model.validity == Validity::Clean {
                        slot.model.validity = Validity::Maybe;
                    }
                } else {
                    slot.model.validity = Validity::Invalid;
                }
            }
        }
    }

    /// Whether an unsafe call now is forbidden (`Some(true)`: a non-relaxed capture of this
    /// thread is in progress), allowed (`Some(false)`: no capture), or allowed by the mode but
    /// possibly in conflict with the capture itself (`None`: only relaxed captures).
    fn unsafe_call_forbidden(&self) -> Option<bool> {
        if !self.any_capture() {
            Some(false)
        } else if self
            .capturing()
            .any(|m| m.mode != CaptureErrorMode::Relaxed)
        {
            Some(true)
        } else {
            None
        }
    }

    /// Whether instantiating a graph now may be refused: CUDA counts instantiation as an
    /// unsafe call while a non-relaxed capture runs on the thread; software backends need not.
    fn instantiation_contended(&self) -> bool {
        self.capturing()
            .any(|m| m.mode != CaptureErrorMode::Relaxed)
    }

    /// [`Self::instantiation_contended`], not counting graph `i`'s own capture.
    fn instantiation_contended_besides(&self, i: usize) -> bool {
        self.graphs.iter().enumerate().any(|(j, s)| {
            j != i
                && s.as_ref().is_some_and(|s| {
                    s.model.state == GraphState::Capturing
                        && s.model.mode != CaptureErrorMode::Relaxed
                })
        })
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
                self.taint_captures();
                Ok(false)
            }
            Err(e) => Err(format!("{what}: unexpected error {e:?}: {e}")),
        }
    }

    fn release_buffer(&mut self, buffer: Option<Rc<B::Buffer>>) {
        // Only the last reference frees memory.
        if buffer.is_some_and(|b| Rc::strong_count(&b) == 1) && self.any_capture() {
            self.taint_captures();
        }
    }

    fn remove_graph(&mut self, i: usize) {
        if let Some(slot) = self.graphs[i].take() {
            drop(slot);
            if self.any_capture() {
                self.taint_captures();
            }
        }
    }

    /// Runs one action and checks its result against the model.
    fn step(&mut self, action: Action) -> Result<Step, String> {
        let b = self.b;
        match action {
            Action::NewGraph {
                slot,
                keep_graph,
                pool,
                mode,
            } => {
                let pool_option = match pool {
                    PoolChoice::Own => None,
                    PoolChoice::Handle(h) => self.handles[h],
                    PoolChoice::ShareGraph(j) => match &self.graphs[j] {
                        Some(s) if s.model.captured() => Some(s.graph.pool().ctx("pool()")?),
                        _ => None,
                    },
                    PoolChoice::Invalid => Some(PoolId(5, 7)),
                };
                let options = GraphOptions {
                    keep_graph,
                    pool: pool_option,
                    capture_error_mode: mode,
                };
                if matches!(pool, PoolChoice::Invalid) {
                    expect_err!(
                        b.graph(options),
                        GraphError::InvalidPoolId(_),
                        "graph(pool=(5, 7))"
                    );
                    return Ok(Step::Checked);
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
                self.graphs[slot] = Some(Slot {
                    graph,
                    model: ModelGraph {
                        keep_graph,
                        mode: mode.resolved(),
                        pool_option,
                        state: GraphState::Empty,
                        debug: false,
                        raw_kept: false,
                        capture_stream: 0,
                        validity: Validity::Clean,
                        copies: 0,
                        other_ops: 0,
                        pool: None,
                    },
                    holds: Vec::new(),
                });
            }
            Action::DropGraph(i) => {
                if self.graphs[i].is_none() {
                    return Ok(Step::NotApplicable);
                }
                self.remove_graph(i);
            }
            Action::CaptureBegin(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                match slot.model.state {
                    GraphState::Capturing => {
                        expect_err!(
                            self.slot(i).graph.capture_begin(),
                            GraphError::AlreadyCapturing,
                            "capture_begin while capturing"
                        );
                    }
                    GraphState::Captured | GraphState::Ready => {
                        expect_err!(
                            self.slot(i).graph.capture_begin(),
                            GraphError::AlreadyCaptured,
                            "capture_begin on a captured graph"
                        );
                    }
                    GraphState::Empty => {
                        if self.capture_on(self.current).is_some() {
                            return Ok(Step::BackendDefined);
                        }
                        if self.current == 0 && self.caps.uncapturable_default_stream {
                            expect_err!(
                                self.slot(i).graph.capture_begin(),
                                GraphError::StreamNotCapturable,
                                "capture_begin on the default stream"
                            );
                        } else {
                            let current = self.current;
                            let s = self.slot(i);
                            s.graph.capture_begin().ctx("capture_begin")?;
                            let m = &mut s.model;
                            m.state = GraphState::Capturing;
                            m.capture_stream = current;
                            m.validity = Validity::Clean;
                            m.copies = 0;
                            m.other_ops = 0;
                            m.pool = None;
                        }
                    }
                }
            }
            Action::CaptureEnd(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                let m = slot.model.clone();
                if m.state != GraphState::Capturing {
                    expect_err!(
                        self.slot(i).graph.capture_end(),
                        GraphError::NotCapturing,
                        "capture_end without a capture"
                    );
                } else if m.capture_stream != self.current {
                    expect_err!(
                        self.slot(i).graph.capture_end(),
                        GraphError::CaptureStreamMismatch,
                        "capture_end with another stream current"
                    );
                } else {
                    let contended = !m.keep_graph && self.instantiation_contended_besides(i);
                    let result = self.slot(i).graph.capture_end();
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
                    let s = self.slot(i);
                    if ok {
                        s.model.state = if m.keep_graph {
                            GraphState::Captured
                        } else {
                            GraphState::Ready
                        };
                        s.model.raw_kept = m.keep_graph || m.debug;
                    } else {
                        s.model.discard();
                        let holds = std::mem::take(&mut s.holds);
                        drop(holds);
                        if self.any_capture() {
                            self.taint_captures();
                        }
                    }
                }
            }
            Action::Instantiate(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                let m = slot.model.clone();
                if !m.captured() {
                    expect_err!(
                        self.slot(i).graph.instantiate(),
                        GraphError::NotCaptured { .. },
                        "instantiate before capture"
                    );
                } else if !m.keep_graph {
                    expect_err!(
                        self.slot(i).graph.instantiate(),
                        GraphError::InstantiateRequiresKeepGraph,
                        "instantiate with keep_graph=false"
                    );
                } else {
                    let contended = self.instantiation_contended();
                    let result = self.slot(i).graph.instantiate();
                    if self.instantiated(result, contended, "instantiate")? {
                        self.slot(i).model.state = GraphState::Ready;
                    }
                }
            }
            Action::Replay(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                if !slot.model.captured() {
                    expect_err!(
                        self.slot(i).graph.replay(),
                        GraphError::NotCaptured { .. },
                        "replay before capture"
                    );
                } else {
                    if self.capture_on(self.current).is_some() || self.default_stream_ambiguous() {
                        return Ok(Step::BackendDefined);
                    }
                    // A first replay of a kept graph instantiates it.
                    let contended =
                        slot.model.state == GraphState::Captured && self.instantiation_contended();
                    let result = self.slot(i).graph.replay();
                    if self.instantiated(result, contended, "replay")? {
                        self.slot(i).model.state = GraphState::Ready;
                    }
                }
            }
            Action::Reset(i) => {
                if self.graphs[i].is_none() {
                    return Ok(Step::NotApplicable);
                }
                let s = self.slot(i);
                s.graph.reset();
                s.model.discard();
                let holds = std::mem::take(&mut s.holds);
                drop(holds);
                if self.any_capture() {
                    self.taint_captures();
                }
            }
            Action::Pool(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                if !slot.model.captured() {
                    expect_err!(
                        slot.graph.pool(),
                        GraphError::NotCaptured { .. },
                        "pool() before capture"
                    );
                } else {
                    let pool = slot.graph.pool().ctx("pool()")?;
                    match slot.model.pool_option {
                        Some(given) => ensure!(
                            pool == given,
                            "pool() is {pool}, the graph was given {given}"
                        ),
                        None => {
                            ensure!(pool.is_private(), "pool() of a graph given none is {pool}")
                        }
                    }
                    if let Some(before) = slot.model.pool {
                        ensure!(pool == before, "pool() changed from {before} to {pool}");
                    }
                    self.slot(i).model.pool = Some(pool);
                }
            }
            Action::EnableDebugMode(i) => {
                if self.graphs[i].is_none() {
                    return Ok(Step::NotApplicable);
                }
                let s = self.slot(i);
                s.graph.enable_debug_mode();
                s.model.debug = true;
            }
            Action::DebugDump(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                let path = self.dir.join(format!("graph{i}.dot"));
                let _ = std::fs::remove_file(&path);
                let m = &slot.model;
                let result = slot.graph.debug_dump(&path);
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
            }
            Action::Nodes(i) => {
                let Some(slot) = &self.graphs[i] else {
                    return Ok(Step::NotApplicable);
                };
                let m = &slot.model;
                let result = slot.graph.nodes();
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
                    ensure!(
                        t.len() == m.copies + m.other_ops
                            && t.count(NodeKind::Memcpy) == m.copies
                            && kernels == m.other_ops,
                        "nodes() has {:?}; the capture recorded {} copies and {} other ops",
                        t.nodes,
                        m.copies,
                        m.other_ops
                    );
                }
            }
            Action::Alloc { slot, len } => {
                let result = match self.on_current() {
                    OnStream::Unclean => return Ok(Step::BackendDefined),
                    OnStream::Clean(_) => b.alloc(len).ctx("alloc inside a capture")?,
                    OnStream::NotCapturing => match self.unsafe_call_forbidden() {
                        Some(false) => b.alloc(len).ctx("alloc")?,
                        Some(true) => {
                            let r = b.alloc(len);
                            self.unsafe_call_made();
                            expect_err!(
                                r,
                                GraphError::UnsafeDuringCapture { .. },
                                "plain alloc while this thread captures"
                            );
                            return Ok(Step::Checked);
                        }
                        None => {
                            // A relaxed capture is in progress: allowed, but it may count.
                            let r = b.alloc(len).ctx("plain alloc during a relaxed capture")?;
                            self.taint_captures();
                            r
                        }
                    },
                };
                ensure!(
                    result.len() == len,
                    "alloc({len}) gave {} elements",
                    result.len()
                );
                let old = self.buffers[slot].replace(Rc::new(result));
                self.release_buffer(old);
            }
            Action::DropBuffer(i) => {
                let Some(buffer) = self.buffers[i].take() else {
                    return Ok(Step::NotApplicable);
                };
                self.release_buffer(Some(buffer));
            }
            Action::Op { kind, a, b: second } => {
                let (Some(x), Some(y)) = (self.buffers[a].clone(), self.buffers[second].clone())
                else {
                    return Ok(Step::NotApplicable);
                };
                let binary = matches!(kind, OpKind::Copy | OpKind::Axpy);
                if binary && a == second {
                    return Ok(Step::NotApplicable);
                }
                let capture = match self.on_current() {
                    OnStream::Unclean => return Ok(Step::BackendDefined),
                    _ if self.default_stream_ambiguous() => return Ok(Step::BackendDefined),
                    OnStream::Clean(j) => Some(j),
                    OnStream::NotCapturing => None,
                };
                let result = match kind {
                    OpKind::Fill => b.fill(&x, 1.5),
                    OpKind::Copy => b.copy(&x, &y),
                    OpKind::AddScalar => b.add_scalar(&x, 1.0),
                    OpKind::Scale => b.scale(&x, 0.5),
                    OpKind::Axpy => b.axpy(&x, 0.25, &y),
                };
                if binary && x.len() != y.len() {
                    expect_err!(
                        result,
                        GraphError::LengthMismatch { .. },
                        "op on different lengths"
                    );
                    if let Some(j) = capture {
                        let m = &mut self.slot(j).model;
                        if m.validity == Validity::Clean {
                            m.validity = Validity::Maybe;
                        }
                    }
                } else {
                    result.ctx("portable op")?;
                    if let Some(j) = capture {
                        let s = self.slot(j);
                        if kind == OpKind::Copy {
                            s.model.copies += 1;
                        } else {
                            s.model.other_ops += 1;
                        }
                        s.holds.push(x);
                        if binary {
                            s.holds.push(y);
                        }
                    }
                }
            }
            Action::UseStream(k) => {
                b.set_current_stream(&self.streams[k]);
                self.current = k;
            }
            Action::NewPoolHandle(h) => {
                let handle = b.graph_pool_handle();
                ensure!(handle.is_user(), "graph_pool_handle() returned {handle}");
                ensure!(
                    self.seen_handles.insert(handle),
                    "graph_pool_handle() returned {handle} twice"
                );
                self.handles[h] = Some(handle);
            }
            Action::Synchronize => {
                if self.any_capture() {
                    // A device-wide synchronize conflicts with every capture, in every mode.
                    let r = b.synchronize();
                    for slot in self.graphs.iter_mut().flatten() {
                        if slot.model.state == GraphState::Capturing {
                            slot.model.validity = Validity::Invalid;
                        }
                    }
                    expect_err!(
                        r,
                        GraphError::UnsafeDuringCapture { .. },
                        "synchronize during capture"
                    );
                } else {
                    b.synchronize().ctx("synchronize")?;
                }
            }
            Action::Download(i) => {
                let Some(x) = self.buffers[i].clone() else {
                    return Ok(Step::NotApplicable);
                };
                match self.unsafe_call_forbidden() {
                    None => return Ok(Step::BackendDefined),
                    Some(false) => {
                        if self.default_stream_ambiguous() {
                            return Ok(Step::BackendDefined);
                        }
                        let data = b.download(&x).ctx("download")?;
                        ensure!(
                            data.len() == x.len(),
                            "download gave {} elements",
                            data.len()
                        );
                    }
                    Some(true) => {
                        let r = b.download(&x);
                        self.unsafe_call_made();
                        expect_err!(
                            r,
                            GraphError::UnsafeDuringCapture { .. },
                            "download during capture"
                        );
                    }
                }
            }
        }
        Ok(Step::Checked)
    }

    /// Checks every observable fact against the model.
    fn verify(&self) -> CaseResult {
        for (i, slot) in self.graphs.iter().enumerate() {
            if let Some(s) = slot {
                ensure!(
                    s.graph.state() == s.model.state,
                    "graph {i}: state() is {}, the model says {}",
                    s.graph.state(),
                    s.model.state
                );
            }
        }
        for (k, stream) in self.streams.iter().enumerate() {
            let expected = match self.capture_on(k) {
                Some(i) if self.model(i).validity != Validity::Clean => continue,
                Some(_) => true,
                None => false,
            };
            let now = self.b.is_capturing(stream).ctx("is_capturing")?;
            ensure!(
                now == expected,
                "stream {k}: is_capturing() is {now}, the model says {expected}"
            );
        }
        ensure!(
            self.b.current_stream() == self.streams[self.current],
            "current_stream() is not the stream last made current"
        );
        Ok(())
    }
}

fn run_sequence<B: Backend>(
    b: &B,
    caps: &Capabilities,
    streams: &[B::Stream],
    dir: &Path,
    actions: &[Action],
    counters: &Counters,
) -> CaseResult {
    let baseline = b.memory_stats();
    let previous = b.set_current_stream(&streams[0]);
    let mut machine = Machine {
        b,
        caps,
        streams,
        dir,
        current: 0,
        graphs: (0..GRAPHS).map(|_| None).collect(),
        buffers: (0..BUFFERS).map(|_| None).collect(),
        handles: vec![None; HANDLES],
        seen_handles: HashSet::new(),
    };
    let mut outcome = Ok(());
    for (n, &action) in actions.iter().enumerate() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let executed = machine.step(action)?;
            machine.verify()?;
            Ok(executed)
        }));
        let fail = |message: String| Err(format!("call {n} {action:?}: {message}"));
        match result {
            Ok(Ok(step)) => {
                let counter = match step {
                    Step::Checked => &counters.checked,
                    Step::NotApplicable => &counters.not_applicable,
                    Step::BackendDefined => &counters.backend_defined,
                };
                counter.set(counter.get() + 1);
            }
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
    // Tear down: graphs first (aborting captures), then buffers.
    b.set_current_stream(&streams[0]);
    let teardown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(machine)));
    b.set_current_stream(&previous);
    outcome?;
    if let Err(payload) = teardown {
        return Err(format!(
            "dropping the sequence's graphs and buffers panicked: {}",
            crate::report::panic_message(&*payload)
        ));
    }
    for (k, stream) in streams.iter().enumerate() {
        ensure!(
            !b.is_capturing(stream).ctx("is_capturing")?,
            "stream {k} is still capturing after every graph was dropped"
        );
    }
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory leaked by the sequence: before {baseline:?}, after everything dropped {after:?}"
    );
    counters.sequences.set(counters.sequences.get() + 1);
    Ok(())
}

fn state_machine<B: Backend>(b: &B) -> CaseResult {
    let n = SuiteConfig::from_env().api_sequences;
    let caps = b.capabilities();
    let counters = Counters::default();
    leak_checked(b, || {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let streams = vec![
            b.default_stream(),
            b.new_stream().ctx("new_stream")?,
            b.new_stream().ctx("new_stream")?,
        ];
        let config = Config {
            cases: n.min(u32::MAX as usize) as u32,
            failure_persistence: None,
            max_shrink_iters: 512,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::XorShift));
        let result = runner.run(&sequence(), |actions| {
            run_sequence(b, &caps, &streams, dir.path(), &actions, &counters)
                .map_err(TestCaseError::fail)
        });
        match result {
            Ok(()) => Ok(()),
            Err(TestError::Fail(reason, actions)) => {
                Err(format!("{reason}\nminimal failing sequence: {actions:?}"))
            }
            Err(TestError::Abort(reason)) => Err(format!("random testing aborted: {reason}")),
        }
    })?;
    println!(
        "5.14: {} API sequences ran: {} calls checked against the model, {} not applicable \
         (empty slot), {} left out as backend-defined",
        counters.sequences.get(),
        counters.checked.get(),
        counters.not_applicable.get(),
        counters.backend_defined.get()
    );
    Ok(())
}
