//! The model: PyTorch's graph state machine with CUDA's capture rules, predicting what each
//! call must do. It knows no backend.

use accel_graph_api::{CaptureErrorMode, GraphState, PoolId};

use std::collections::BTreeSet;

use super::actions::{BUCKETS, GRAPHS, INSTANCES};

/// Whether a capture will still end cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Validity {
    /// Nothing happened that could invalidate it.
    Clean,
    /// Something happened that CUDA may or may not count against it.
    Maybe,
    /// It was invalidated: `capture_end` must fail with `CaptureInvalidated`.
    Invalid,
}

/// The model of one graph object: PyTorch's state machine plus what the capture recorded.
#[derive(Debug, Clone)]
pub(super) struct ModelGraph {
    /// The instance that made the graph (its calls go through it).
    pub(super) instance: usize,
    pub(super) keep_graph: bool,
    /// The resolved capture error mode.
    pub(super) mode: CaptureErrorMode,
    /// The pool the graph was given.
    pub(super) pool_option: Option<PoolId>,
    pub(super) state: GraphState,
    pub(super) debug: bool,
    /// The raw graph survives `capture_end` (keep_graph or debug mode at capture_end).
    pub(super) raw_kept: bool,
    pub(super) capture_stream: usize,
    pub(super) validity: Validity,
    /// Copies captured (Memcpy nodes).
    pub(super) copies: usize,
    /// Other ops captured (Kernel or Memset nodes).
    pub(super) other_ops: usize,
    /// Buffer slots emptied by the captured host callbacks, one per Host node, in order.
    pub(super) host_drops: Vec<usize>,
    /// The pool `pool()` reported, once asked.
    pub(super) pool: Option<PoolId>,
}

impl ModelGraph {
    /// A new graph object of `instance`.
    pub(super) fn new(
        instance: usize,
        keep_graph: bool,
        mode: CaptureErrorMode,
        pool: Option<PoolId>,
    ) -> Self {
        ModelGraph {
            instance,
            keep_graph,
            mode: mode.resolved(),
            pool_option: pool,
            state: GraphState::Empty,
            debug: false,
            raw_kept: false,
            capture_stream: 0,
            validity: Validity::Clean,
            copies: 0,
            other_ops: 0,
            host_drops: Vec::new(),
            pool: None,
        }
    }

    pub(super) fn captured(&self) -> bool {
        matches!(self.state, GraphState::Captured | GraphState::Ready)
    }

    /// A capture began on `stream`.
    pub(super) fn begin(&mut self, stream: usize) {
        self.state = GraphState::Capturing;
        self.capture_stream = stream;
        self.validity = Validity::Clean;
        self.copies = 0;
        self.other_ops = 0;
        self.host_drops.clear();
        self.pool = None;
    }

    /// The capture ended successfully.
    pub(super) fn end(&mut self) {
        self.state = if self.keep_graph {
            GraphState::Captured
        } else {
            GraphState::Ready
        };
        self.raw_kept = self.keep_graph || self.debug;
    }

    /// Back to `Empty`: what `reset()` and every failed `capture_end` do.
    pub(super) fn discard(&mut self) {
        self.state = GraphState::Empty;
        self.raw_kept = false;
        self.pool = None;
        self.validity = Validity::Clean;
    }

    /// Something happened that may count against the capture (if it is still clean).
    fn taint(&mut self) {
        if self.state == GraphState::Capturing && self.validity == Validity::Clean {
            self.validity = Validity::Maybe;
        }
    }
}

/// How the current stream relates to the captures in progress.
pub(super) enum OnStream {
    NotCapturing,
    /// Graph `i` captures it and nothing has happened that might have invalidated that.
    Clean(usize),
    /// A capture that may be (or is) invalidated runs on it.
    Unclean,
}

/// The model of a whole sequence: the graph slots, each instance's current stream, and the
/// utilities.
///
/// The instances are of one device, so they share its capture rules: a capture made through
/// either forbids unsafe calls made through both (all calls are made on one thread), and a
/// device-wide synchronize through either conflicts with the captures of both.
#[derive(Debug, Clone)]
pub(super) struct Model {
    pub(super) graphs: Vec<Option<ModelGraph>>,
    /// The current stream of each instance.
    pub(super) current: [usize; INSTANCES],
    /// The default stream (stream 0) refuses capture.
    pub(super) uncapturable_default: bool,
    pub(super) utilities: ModelUtilities,
}

/// The model of the sequence's utilities: which instance made each, and what it holds.
#[derive(Debug, Clone, Default)]
pub(super) struct ModelUtilities {
    /// The graphed callable's instance.
    pub(super) graphed: Option<usize>,
    /// The loader's instance and, per stage, the length of each microbatch's input.
    pub(super) loader: Option<(usize, [Vec<usize>; 2])>,
    /// The bucketed cache's instance and the buckets it captured.
    pub(super) bucketed: Option<(usize, BTreeSet<usize>)>,
}

/// The bucket of a batch of `rows` rows: the smallest of [`BUCKETS`] that holds it, `None`
/// beyond the largest (an eager run).
pub(super) fn bucket_for(rows: usize) -> Option<usize> {
    BUCKETS.iter().copied().find(|&b| b >= rows)
}

impl Model {
    pub(super) fn new(uncapturable_default: bool) -> Self {
        Model {
            graphs: vec![None; GRAPHS],
            current: [0; INSTANCES],
            uncapturable_default,
            utilities: ModelUtilities::default(),
        }
    }

    pub(super) fn graph(&self, i: usize) -> &ModelGraph {
        self.graphs[i].as_ref().expect("slot checked")
    }

    pub(super) fn graph_mut(&mut self, i: usize) -> &mut ModelGraph {
        self.graphs[i].as_mut().expect("slot checked")
    }

    /// The graph capturing `stream` of `instance`, if any.
    pub(super) fn capture_on(&self, instance: usize, stream: usize) -> Option<usize> {
        self.graphs.iter().position(|m| {
            m.as_ref().is_some_and(|m| {
                m.instance == instance
                    && m.state == GraphState::Capturing
                    && m.capture_stream == stream
            })
        })
    }

    fn capturing(&self) -> impl Iterator<Item = &ModelGraph> {
        self.graphs
            .iter()
            .flatten()
            .filter(|m| m.state == GraphState::Capturing)
    }

    pub(super) fn any_capture(&self) -> bool {
        self.capturing().next().is_some()
    }

    /// How `instance`'s current stream relates to the captures in progress.
    pub(super) fn on_current(&self, instance: usize) -> OnStream {
        match self.capture_on(instance, self.current[instance]) {
            None => OnStream::NotCapturing,
            Some(i) if self.graph(i).validity == Validity::Clean => OnStream::Clean(i),
            Some(_) => OnStream::Unclean,
        }
    }

    /// Eager work on `instance`'s default stream while another stream captures (of either
    /// instance: they share the device): on CUDA's legacy stream that synchronizes with the
    /// capture; whether it does is the backend's business.
    pub(super) fn default_stream_ambiguous(&self, instance: usize) -> bool {
        self.current[instance] == 0 && self.capture_on(instance, 0).is_none() && self.any_capture()
    }

    /// Memory may have gone back to the device, or a capture's neighbour changed: captures in
    /// progress may count that as an unsafe call.
    pub(super) fn taint_captures(&mut self) {
        self.graphs.iter_mut().flatten().for_each(ModelGraph::taint);
    }

    /// [`Model::taint_captures`] if any capture runs (a graph or buffer went away).
    pub(super) fn released(&mut self) {
        if self.any_capture() {
            self.taint_captures();
        }
    }

    /// An unsafe call on this thread: every non-relaxed capture is invalidated.
    pub(super) fn unsafe_call_made(&mut self) {
        for m in self.graphs.iter_mut().flatten() {
            if m.state == GraphState::Capturing {
                if m.mode == CaptureErrorMode::Relaxed {
                    m.taint();
                } else {
                    m.validity = Validity::Invalid;
                }
            }
        }
    }

    /// A device-wide synchronize: it conflicts with every capture, in every mode.
    pub(super) fn device_synchronized(&mut self) {
        for m in self.graphs.iter_mut().flatten() {
            if m.state == GraphState::Capturing {
                m.validity = Validity::Invalid;
            }
        }
    }

    /// Whether an unsafe call now is forbidden (`Some(true)`: a non-relaxed capture of this
    /// thread is in progress), allowed (`Some(false)`: no capture), or allowed by the mode but
    /// possibly in conflict with the capture itself (`None`: only relaxed captures).
    pub(super) fn unsafe_call_forbidden(&self) -> Option<bool> {
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
    pub(super) fn instantiation_contended(&self) -> bool {
        self.capturing()
            .any(|m| m.mode != CaptureErrorMode::Relaxed)
    }

    /// [`Model::instantiation_contended`], not counting graph `i`'s own capture.
    pub(super) fn instantiation_contended_besides(&self, i: usize) -> bool {
        self.graphs.iter().enumerate().any(|(j, m)| {
            j != i
                && m.as_ref().is_some_and(|m| {
                    m.state == GraphState::Capturing && m.mode != CaptureErrorMode::Relaxed
                })
        })
    }

    /// Whether `stream` of `instance` must be capturing now; `None` where the model cannot
    /// tell (a capture on it that may have been invalidated).
    pub(super) fn capturing_expected(&self, instance: usize, stream: usize) -> Option<bool> {
        match self.capture_on(instance, stream) {
            Some(i) if self.graph(i).validity != Validity::Clean => None,
            Some(_) => Some(true),
            None => Some(false),
        }
    }

    /// Whether `capture_begin` on `instance`'s current stream must fail with
    /// `StreamNotCapturable`.
    pub(super) fn begin_refused_by_default_stream(&self, instance: usize) -> bool {
        self.current[instance] == 0 && self.uncapturable_default
    }
}
