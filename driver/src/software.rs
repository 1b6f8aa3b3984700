//! Stream capture in software, for drivers whose device has no graphs of its own (the mock,
//! wgpu): CUDA's stream-capture rules over recorded commands, written once.
//!
//! A capture records the commands issued on its streams as nodes whose dependencies are the
//! issuing stream's *frontier* (its last nodes), so fork/join through events gives a real
//! dependency graph, as CUDA's stream capture does:
//!
//! * recording an event on a capturing stream marks that stream's frontier; waiting on it from
//!   another stream *forks* that stream into the capture, its next work depending on the
//!   marked nodes; waiting on it from a capturing stream *joins* them;
//! * waiting from a capturing stream on an event recorded outside the capture is
//!   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` and invalidates the capture; waiting outside a
//!   capture on an event recorded inside one is the same error; waiting on an event of another
//!   capture is `CUDA_ERROR_STREAM_CAPTURE_MERGE` and invalidates the waiting capture;
//! * beginning a capture on a stream that takes part in one is `CUDA_ERROR_ILLEGAL_STATE`;
//! * ending a capture whose forked work was not joined back into the origin stream is
//!   `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`; work recorded into an invalidated capture is
//!   `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`;
//! * a call on an event last recorded in a capture, made while another thread grows or ends
//!   that capture, crashes the CUDA driver (the two update each other): a software capture made
//!   with [`SoftwareCapture::modelling_driver_races`] panics there, naming the rule
//!   ([`SoftwareCapture::check_link`]).

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use accel_graph_api::{
    GraphError, GraphTopology, NodeKind, UpdateConflict, backend_kit::EmulatedCudaError,
};

use crate::{DriverError, DriverResult, api::CapturePoint};

/// A recorded command and the nodes it runs after (all recorded before it).
#[derive(Debug, Clone)]
pub struct Node<C> {
    /// The command.
    pub command: C,
    /// Indices of the nodes it depends on.
    pub deps: Vec<usize>,
    /// The stream that recorded it (its driver key), for reports that name it.
    pub stream: u64,
}

/// The topology of recorded nodes (in recording order): a node per command, of the kind and
/// label `describe` gives it, and an edge from each of its dependencies.
pub fn topology<C>(
    nodes: &[Node<C>],
    describe: impl Fn(&C) -> (NodeKind, String),
) -> GraphTopology {
    let mut t = GraphTopology::default();
    for node in nodes {
        let (kind, label) = describe(&node.command);
        t.add_node(kind, label);
    }
    for (id, node) in nodes.iter().enumerate() {
        // Sorted: deterministic DOT bytes whatever order the joins came in.
        let mut deps = node.deps.clone();
        deps.sort_unstable();
        for dep in deps {
            t.add_edge(dep, id);
        }
    }
    t
}

/// What an event's last record marked.
#[derive(Debug, Clone, Default)]
pub enum EventMark<E> {
    /// Never recorded: waiting on it is a no-op, as in CUDA.
    #[default]
    Unrecorded,
    /// Recorded outside any capture, at the driver's point `E` (a submission, a tick).
    Eager(E),
    /// Recorded on a stream of capture `capture`, after `nodes`.
    Captured {
        /// The capture.
        capture: u64,
        /// The recording stream's frontier.
        nodes: Vec<usize>,
    },
}

struct Capture<C> {
    origin: u64,
    /// Whether an event was recorded in it: only then do its growth and end race with calls
    /// on events (see `SoftwareCapture::check_link`).
    events_recorded: bool,
    nodes: Vec<Node<C>>,
    /// Per member stream: the nodes its next command depends on.
    frontiers: HashMap<u64, Vec<usize>>,
    invalid: Option<String>,
}

struct State<C> {
    captures: HashMap<u64, Capture<C>>,
    /// Which capture each capturing stream takes part in.
    membership: HashMap<u64, u64>,
    /// Captures being grown or ended by a call in progress (only when modelling the driver's
    /// races), with the number of such calls.
    changing: HashMap<u64, usize>,
    next_id: u64,
}

/// The captures in progress of one software device. Streams are named by their driver keys.
pub struct SoftwareCapture<C> {
    state: Mutex<State<C>>,
    /// Whether a capture's growth and end leave a window in which a call on an event recorded
    /// in it is caught (see [`SoftwareCapture::check_link`]).
    model_races: bool,
}

impl<C> Default for SoftwareCapture<C> {
    fn default() -> Self {
        SoftwareCapture {
            state: Mutex::new(State {
                captures: HashMap::new(),
                membership: HashMap::new(),
                changing: HashMap::new(),
                next_id: 1,
            }),
            model_races: false,
        }
    }
}

fn error(kind: EmulatedCudaError, message: impl Into<String>) -> DriverError {
    DriverError::emulated(kind, message)
}

impl<C> SoftwareCapture<C> {
    /// A software capture that also models the CUDA driver's races between a capture and the
    /// events recorded in it: a command recorded into a capture an event was recorded in, and
    /// such a capture's end, yield the thread half-way, and [`SoftwareCapture::check_link`]
    /// panics on a call that meets them. For a mock, whose purpose is to catch what would
    /// break a real driver.
    pub fn modelling_driver_races() -> Self {
        SoftwareCapture {
            model_races: true,
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<C>> {
        // Every update is a few map operations that cannot panic half-way.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The capture `stream` takes part in, if an event was recorded in it.
    fn capture_with_events(&self, stream: u64) -> Option<u64> {
        let state = self.lock();
        let id = *state.membership.get(&stream)?;
        state
            .captures
            .get(&id)
            .is_some_and(|c| c.events_recorded)
            .then_some(id)
    }

    /// Marks capture `id` as changing, lets other threads run, and unmarks it — the window in
    /// which the driver would crash on a call on an event recorded in it (only when modelling
    /// the driver's races).
    fn changing_window(&self, id: u64) {
        *self.lock().changing.entry(id).or_default() += 1;
        std::thread::yield_now();
        let mut state = self.lock();
        if let Some(n) = state.changing.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                state.changing.remove(&id);
            }
        }
    }

    /// Begins a capture on `stream`.
    pub fn begin(&self, stream: u64) -> DriverResult<()> {
        let mut state = self.lock();
        if state.membership.contains_key(&stream) {
            return Err(error(
                EmulatedCudaError::IllegalState,
                format!("stream {stream:#x} takes part in a capture already"),
            ));
        }
        let id = state.next_id;
        state.next_id = state.next_id.saturating_add(1);
        state.captures.insert(
            id,
            Capture {
                origin: stream,
                events_recorded: false,
                nodes: Vec::new(),
                frontiers: HashMap::from([(stream, Vec::new())]),
                invalid: None,
            },
        );
        state.membership.insert(stream, id);
        Ok(())
    }

    /// The capture `stream` takes part in.
    pub fn capture_id(&self, stream: u64) -> Option<u64> {
        self.lock().membership.get(&stream).copied()
    }

    /// Where `stream` stands in its capture: the capture (as the graph it records into) and
    /// the node its last command became, when its frontier is that one node.
    pub fn point(&self, stream: u64) -> Option<CapturePoint<usize>> {
        let state = self.lock();
        let id = *state.membership.get(&stream)?;
        let capture = state.captures.get(&id)?;
        let last = match capture.frontiers.get(&stream).map(Vec::as_slice) {
            Some(&[node]) => Some(node),
            _ => None,
        };
        Some(CapturePoint { graph: id, last })
    }

    /// True while any capture is in progress.
    pub fn any_active(&self) -> bool {
        !self.lock().captures.is_empty()
    }

    /// Invalidates every capture in progress (what a device-wide conflict does), keeping the
    /// first reason of each.
    pub fn invalidate_all(&self, reason: &str) {
        for capture in self.lock().captures.values_mut() {
            capture.invalid.get_or_insert_with(|| reason.to_owned());
        }
    }

    /// Records `command` if `stream` is capturing (`Ok(None)`), else hands it back to be run
    /// now (`Ok(Some(command))`). Recording into an invalidated capture fails.
    pub fn record(&self, stream: u64, command: C) -> DriverResult<Option<C>> {
        if self.model_races
            && let Some(id) = self.capture_with_events(stream)
        {
            self.changing_window(id);
        }
        let mut state = self.lock();
        let State {
            captures,
            membership,
            ..
        } = &mut *state;
        let Some(capture) = membership.get(&stream).and_then(|id| captures.get_mut(id)) else {
            return Ok(Some(command));
        };
        if let Some(reason) = &capture.invalid {
            return Err(error(EmulatedCudaError::CaptureInvalidated, reason.clone()));
        }
        let id = capture.nodes.len();
        let deps = std::mem::replace(capture.frontiers.entry(stream).or_default(), vec![id]);
        capture.nodes.push(Node {
            command,
            deps,
            stream,
        });
        Ok(None)
    }

    /// What recording an event on `stream` marks: the stream's frontier if it is capturing,
    /// else `None` (the driver marks its own eager point).
    pub fn record_event<E>(&self, stream: u64) -> DriverResult<Option<EventMark<E>>> {
        let mut state = self.lock();
        let State {
            captures,
            membership,
            ..
        } = &mut *state;
        let Some(&id) = membership.get(&stream) else {
            return Ok(None);
        };
        let Some(capture) = captures.get_mut(&id) else {
            return Ok(None);
        };
        if let Some(reason) = &capture.invalid {
            return Err(error(EmulatedCudaError::CaptureInvalidated, reason.clone()));
        }
        capture.events_recorded = true;
        let nodes = capture.frontiers.entry(stream).or_default().clone();
        Ok(Some(EventMark::Captured { capture: id, nodes }))
    }

    /// Before a call on an event whose last record made `mark`: when modelling the driver's
    /// races, panics if another thread is growing or ending the capture the mark belongs to —
    /// the CUDA driver crashes there (a segmentation fault in `cuEventRecordWithFlags`), so a
    /// driver layer must keep the two apart.
    pub fn check_link<E>(&self, mark: &EventMark<E>) {
        if let EventMark::Captured { capture, .. } = mark
            && self.lock().changing.contains_key(capture)
        {
            panic!(
                "an event last recorded in capture {capture} was used while another thread \
                 grew or ended that capture: the CUDA driver crashes here (the driver layer \
                 must serialise the two)"
            );
        }
    }

    /// Makes `stream` wait for `mark`: CUDA's fork/join rules (see the module documentation).
    /// `Ok(())` for eager marks on a stream that is not capturing: ordering those is the
    /// driver's business.
    pub fn wait_event<E>(
        &self,
        stream: u64,
        is_default: bool,
        mark: &EventMark<E>,
    ) -> DriverResult<()> {
        let mut state = self.lock();
        let State {
            captures,
            membership,
            ..
        } = &mut *state;
        let waiting_in = membership.get(&stream).copied();
        match (mark, waiting_in) {
            (EventMark::Unrecorded, _) | (EventMark::Eager(_), None) => Ok(()),
            (EventMark::Eager(_), Some(own)) => {
                let capture = captures.get_mut(&own);
                if let Some(reason) = capture.as_ref().and_then(|c| c.invalid.clone()) {
                    return Err(error(EmulatedCudaError::CaptureInvalidated, reason));
                }
                let message = "a capturing stream waited on an event recorded outside the capture";
                if let Some(c) = capture {
                    c.invalid.get_or_insert_with(|| message.to_owned());
                }
                Err(error(EmulatedCudaError::CaptureIsolation, message))
            }
            (EventMark::Captured { capture, nodes }, None) => {
                let Some(c) = captures.get_mut(capture) else {
                    return Err(error(
                        EmulatedCudaError::CaptureIsolation,
                        "waited outside capture on an event recorded inside a capture",
                    ));
                };
                if is_default {
                    // The default stream never takes part in a capture, so to it the event
                    // lies out of reach, as for an ended capture; the capture is untouched.
                    return Err(error(
                        EmulatedCudaError::CaptureIsolation,
                        "the default stream waited on an event recorded in a capture (the \
                         default stream cannot join a capture)",
                    ));
                }
                if let Some(reason) = &c.invalid {
                    return Err(error(EmulatedCudaError::CaptureInvalidated, reason.clone()));
                }
                // Fork: the stream joins the capture, after the event's nodes.
                c.frontiers.insert(stream, nodes.clone());
                membership.insert(stream, *capture);
                Ok(())
            }
            (EventMark::Captured { capture, nodes }, Some(own)) => {
                let Some(c) = captures.get_mut(&own) else {
                    return Ok(());
                };
                if let Some(reason) = &c.invalid {
                    return Err(error(EmulatedCudaError::CaptureInvalidated, reason.clone()));
                }
                if *capture != own {
                    let message =
                        "a capturing stream waited on an event recorded in another capture";
                    c.invalid.get_or_insert_with(|| message.to_owned());
                    return Err(error(EmulatedCudaError::CaptureMerge, message));
                }
                // Join: the stream's next work also depends on the event's nodes.
                let frontier = c.frontiers.entry(stream).or_default();
                for &n in nodes {
                    if !frontier.contains(&n) {
                        frontier.push(n);
                    }
                }
                frontier.sort_unstable();
                Ok(())
            }
        }
    }

    /// Invalidates the capture `stream` takes part in (a forbidden call on it), keeping the
    /// first reason.
    pub fn invalidate_stream(&self, stream: u64, reason: &str) {
        let mut state = self.lock();
        let State {
            captures,
            membership,
            ..
        } = &mut *state;
        if let Some(c) = membership.get(&stream).and_then(|id| captures.get_mut(id)) {
            c.invalid.get_or_insert_with(|| reason.to_owned());
        }
    }

    /// Ends the capture that began on `stream`; every stream of it stops capturing whatever
    /// the outcome. Returns the recorded nodes in recording order (a topological order).
    pub fn end(&self, stream: u64) -> DriverResult<Vec<Node<C>>> {
        let mut state = self.lock();
        let Some(id) = state.membership.get(&stream).copied() else {
            return Err(error(
                EmulatedCudaError::IllegalState,
                format!("stream {stream:#x} is not capturing"),
            ));
        };
        if state.captures.get(&id).is_some_and(|c| c.origin != stream) {
            return Err(error(
                EmulatedCudaError::IllegalState,
                "a capture must end on the stream it began on",
            ));
        }
        // CUDA's end updates the events recorded in the capture (see `check_link`).
        if self.model_races && state.captures.get(&id).is_some_and(|c| c.events_recorded) {
            drop(state);
            self.changing_window(id);
            state = self.lock();
        }
        let Some(capture) = state.captures.remove(&id) else {
            return Err(error(EmulatedCudaError::IllegalState, "no such capture"));
        };
        state.membership.retain(|_, c| *c != id);
        drop(state);
        if let Some(reason) = capture.invalid {
            return Err(error(EmulatedCudaError::CaptureInvalidated, reason));
        }
        // Unjoined: some node that nothing depends on is not among the origin's last nodes.
        let origin_tail = capture
            .frontiers
            .get(&capture.origin)
            .cloned()
            .unwrap_or_default();
        let mut joined = vec![false; capture.nodes.len()];
        for &d in capture
            .nodes
            .iter()
            .flat_map(|n| &n.deps)
            .chain(&origin_tail)
        {
            if let Some(j) = joined.get_mut(d) {
                *j = true;
            }
        }
        if joined.iter().any(|&j| !j) {
            return Err(error(
                EmulatedCudaError::CaptureUnjoined,
                "work forked onto another stream was not joined back",
            ));
        }
        Ok(capture.nodes)
    }
}

/// `Ok` when `theirs` has the topology of `mine` — as many nodes, each of the kind `kind`
/// gives the one at its place, with the same dependencies — else the
/// [`GraphError::UpdateRefused`] an update from `theirs` to `mine` gets.
pub fn same_topology<C>(
    mine: &[Node<C>],
    theirs: &[Node<C>],
    kind: impl Fn(&C) -> NodeKind,
) -> DriverResult<()> {
    let refuse = |conflict, node: Option<usize>, reason: String| {
        Err(DriverError::Api(GraphError::UpdateRefused {
            conflict,
            node,
            reason,
        }))
    };
    if mine.len() != theirs.len() {
        return refuse(
            UpdateConflict::NodeCount,
            None,
            format!(
                "the graph has {} nodes, the other {}",
                mine.len(),
                theirs.len()
            ),
        );
    }
    for (i, (a, b)) in mine.iter().zip(theirs).enumerate() {
        let (ka, kb) = (kind(&a.command), kind(&b.command));
        if ka != kb {
            return refuse(
                UpdateConflict::NodeKind,
                None,
                format!("graph node {i} is a {ka} node, the other's a {kb} node"),
            );
        }
        let (mut da, mut db) = (a.deps.clone(), b.deps.clone());
        da.sort_unstable();
        db.sort_unstable();
        if da != db {
            return refuse(
                UpdateConflict::Edges,
                None,
                format!("graph node {i} depends on nodes {da:?}, the other's on {db:?}"),
            );
        }
    }
    Ok(())
}

/// The error for a blocking wait on an event recorded in a capture (it stands for no work).
pub fn captured_event_error() -> DriverError {
    captured_event_error_in("event_synchronize")
}

/// The error for `operation` (a synchronize, a timing) on an event recorded in a capture.
pub fn captured_event_error_in(operation: &str) -> DriverError {
    error(
        EmulatedCudaError::CapturedEvent,
        format!("{operation} on an event recorded in a capture"),
    )
}
