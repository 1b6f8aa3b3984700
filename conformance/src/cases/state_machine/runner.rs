//! The runner: makes each call of a sequence on the backend and checks it against the
//! [`Model`]; after every call it checks every observable fact, and after the sequence that
//! nothing is left capturing and no memory is held.

use std::{collections::HashSet, path::Path};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError, GraphOptions, GraphState, NodeKind, PoolId,
};

use super::{
    Counters,
    actions::{Action, BUFFERS, GRAPHS, HANDLES, OpKind, PoolChoice},
    model::{Model, ModelGraph, OnStream, Validity},
};
use crate::check::{CaseResult, Ctx, ensure, expect_err};

/// What became of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Called and checked.
    Checked,
    /// Not applicable now (its graph or buffer slot is empty, an op would alias).
    NotApplicable,
    /// Left out: CUDA leaves its outcome to the driver (see the module docs).
    BackendDefined,
}

/// The backend's objects of one sequence, next to the model of them.
struct Machine<'a, B: Backend> {
    b: &'a B,
    streams: &'a [B::Stream],
    dir: &'a Path,
    model: Model,
    /// Declared before the buffers so they drop first: a graph lets go of its pool before the
    /// buffers of the sequence are released.
    graphs: Vec<Option<B::Graph>>,
    /// The buffers. Nothing else holds them: a buffer dropped while captured work uses it is
    /// kept alive by the graph, so replays stay valid.
    buffers: Vec<Option<B::Buffer>>,
    handles: Vec<Option<PoolId>>,
    seen_handles: HashSet<PoolId>,
}

impl<B: Backend> Machine<'_, B> {
    fn graph(&mut self, i: usize) -> &mut B::Graph {
        self.graphs[i].as_mut().expect("slot checked")
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

    /// Runs one action and checks its result against the model.
    fn step(&mut self, action: Action) -> Result<Step, String> {
        match action {
            Action::NewGraph {
                slot,
                keep_graph,
                pool,
                mode,
            } => self.new_graph(slot, keep_graph, pool, mode)?,
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
            Action::Alloc { slot, len } => return self.alloc(slot, len),
            Action::DropBuffer(i) => {
                if self.buffers[i].take().is_none() {
                    return Ok(Step::NotApplicable);
                }
                self.model.released();
            }
            Action::Op { kind, a, b } => return self.op(kind, a, b),
            Action::UseStream(k) => {
                self.b
                    .set_current_stream(&self.streams[k])
                    .ctx("set_current_stream")?;
                self.model.current = k;
            }
            Action::NewPoolHandle(h) => {
                let handle = self.b.graph_pool_handle();
                ensure!(handle.is_user(), "graph_pool_handle() returned {handle}");
                ensure!(
                    self.seen_handles.insert(handle),
                    "graph_pool_handle() returned {handle} twice"
                );
                self.handles[h] = Some(handle);
            }
            Action::Synchronize => {
                if self.model.any_capture() {
                    // A device-wide synchronize conflicts with every capture, in every mode.
                    let r = self.b.synchronize();
                    self.model.device_synchronized();
                    expect_err!(
                        r,
                        GraphError::UnsafeDuringCapture { .. },
                        "synchronize during capture"
                    );
                } else {
                    self.b.synchronize().ctx("synchronize")?;
                }
            }
            Action::Download(i) => return self.download(i),
            Action::EmptyCache => self.b.empty_cache().ctx("empty_cache")?,
        }
        Ok(Step::Checked)
    }

    fn new_graph(
        &mut self,
        slot: usize,
        keep_graph: bool,
        pool: PoolChoice,
        mode: accel_graph_api::CaptureErrorMode,
    ) -> Result<(), String> {
        let pool_option = match pool {
            PoolChoice::Own => None,
            PoolChoice::Handle(h) => self.handles[h],
            PoolChoice::ShareGraph(j) => match (&self.graphs[j], &self.model.graphs[j]) {
                (Some(g), Some(m)) if m.captured() => Some(g.pool().ctx("pool()")?),
                _ => None,
            },
            PoolChoice::Invalid => Some(PoolId(5, 7)),
            PoolChoice::Forged => Some(PoolId(0, 1 << 48)),
        };
        let mut options = GraphOptions::new()
            .keep_graph(keep_graph)
            .capture_error_mode(mode);
        if let Some(p) = pool_option {
            options = options.pool(p);
        }
        if matches!(pool, PoolChoice::Invalid | PoolChoice::Forged) {
            expect_err!(
                self.b.graph(options),
                GraphError::InvalidPoolId { .. },
                format!("graph(pool={pool:?})")
            );
            return Ok(());
        }
        let graph = self.b.graph(options).ctx("graph(options)")?;
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
        self.model.graphs[slot] = Some(ModelGraph::new(keep_graph, mode, pool_option));
        Ok(())
    }

    fn capture_begin(&mut self, i: usize) -> Result<Step, String> {
        let Some(state) = self.model.graphs[i].as_ref().map(|m| m.state) else {
            return Ok(Step::NotApplicable);
        };
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
                if self.model.capture_on(self.model.current).is_some() {
                    return Ok(Step::BackendDefined);
                }
                if self.model.begin_refused_by_default_stream() {
                    expect_err!(
                        self.graph(i).capture_begin(),
                        GraphError::StreamNotCapturable,
                        "capture_begin on the default stream"
                    );
                } else {
                    self.graph(i).capture_begin().ctx("capture_begin")?;
                    let current = self.model.current;
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
        } else if m.capture_stream != self.model.current {
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
        if self.model.capture_on(self.model.current).is_some()
            || self.model.default_stream_ambiguous()
        {
            return Ok(Step::BackendDefined);
        }
        // A first replay of a kept graph instantiates it. Buffers the capture used may have
        // been dropped since: the graph keeps their memory, so the replay is valid.
        let contended = m.state == GraphState::Captured && self.model.instantiation_contended();
        let result = self.graph(i).replay();
        if self.instantiated(result, contended, "replay")? {
            self.model.graph_mut(i).state = GraphState::Ready;
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
        Ok(Step::Checked)
    }

    fn alloc(&mut self, slot: usize, len: usize) -> Result<Step, String> {
        let b = self.b;
        let buffer = match self.model.on_current() {
            OnStream::Unclean => return Ok(Step::BackendDefined),
            OnStream::Clean(_) => b.alloc(len).ctx("alloc inside a capture")?,
            OnStream::NotCapturing => match self.model.unsafe_call_forbidden() {
                Some(false) => b.alloc(len).ctx("alloc")?,
                Some(true) => {
                    let r = b.alloc(len);
                    self.model.unsafe_call_made();
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
        if self.buffers[slot].replace(buffer).is_some() {
            self.model.released();
        }
        Ok(Step::Checked)
    }

    fn op(&mut self, kind: OpKind, a: usize, second: usize) -> Result<Step, String> {
        let (Some(x), Some(y)) = (&self.buffers[a], &self.buffers[second]) else {
            return Ok(Step::NotApplicable);
        };
        if kind.binary() && a == second {
            return Ok(Step::NotApplicable);
        }
        let capture = match self.model.on_current() {
            OnStream::Unclean => return Ok(Step::BackendDefined),
            _ if self.model.default_stream_ambiguous() => return Ok(Step::BackendDefined),
            OnStream::Clean(j) => Some(j),
            OnStream::NotCapturing => None,
        };
        let b = self.b;
        let result = match kind {
            OpKind::Fill => b.fill(x, 1.5),
            OpKind::Copy => b.copy(x, y),
            OpKind::AddScalar => b.add_scalar(x, 1.0),
            OpKind::Scale => b.scale(x, 0.5),
            OpKind::Axpy => b.axpy(x, 0.25, y),
        };
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

    fn download(&mut self, i: usize) -> Result<Step, String> {
        let Some(x) = &self.buffers[i] else {
            return Ok(Step::NotApplicable);
        };
        match self.model.unsafe_call_forbidden() {
            None => return Ok(Step::BackendDefined),
            Some(false) => {
                if self.model.default_stream_ambiguous() {
                    return Ok(Step::BackendDefined);
                }
                let data = self.b.download(x).ctx("download")?;
                ensure!(
                    data.len() == x.len(),
                    "download gave {} elements",
                    data.len()
                );
            }
            Some(true) => {
                let r = self.b.download(x);
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
        for (k, stream) in self.streams.iter().enumerate() {
            let Some(expected) = self.model.capturing_expected(k) else {
                continue;
            };
            let now = self.b.is_capturing(stream).ctx("is_capturing")?;
            ensure!(
                now == expected,
                "stream {k}: is_capturing() is {now}, the model says {expected}"
            );
        }
        ensure!(
            self.b.current_stream() == self.streams[self.model.current],
            "current_stream() is not the stream last made current"
        );
        Ok(())
    }
}

/// Runs one sequence on `b` (whose streams are `streams`, stream 0 the default one), checking
/// every call, then tears everything down and checks that nothing captures and the memory is
/// back to what it was.
pub(super) fn run_sequence<B: Backend>(
    b: &B,
    streams: &[B::Stream],
    dir: &Path,
    actions: &[Action],
    counters: &Counters,
) -> CaseResult {
    let baseline = b.memory_stats();
    let previous = b
        .set_current_stream(&streams[0])
        .ctx("set_current_stream")?;
    let mut machine = Machine {
        b,
        streams,
        dir,
        model: Model::new(b.capabilities().uncapturable_default_stream),
        graphs: (0..GRAPHS).map(|_| None).collect(),
        buffers: (0..BUFFERS).map(|_| None).collect(),
        handles: vec![None; HANDLES],
        seen_handles: HashSet::new(),
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
            Ok(Ok(step)) => counters.count(step),
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
    let _ = b.set_current_stream(&streams[0]);
    let teardown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(machine)));
    let restored = b.set_current_stream(&previous);
    outcome?;
    restored.ctx("set_current_stream back")?;
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
    counters.sequence_done();
    Ok(())
}
