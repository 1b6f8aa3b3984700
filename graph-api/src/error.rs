//! The one error type of the project.

use std::{fmt, path::PathBuf};

use crate::{CaptureErrorMode, PoolId, RaceAccess, UpdateConflict};

/// Result alias used throughout accel-graph.
pub type Result<T, E = GraphError> = std::result::Result<T, E>;

/// Why a call conflicted with a capture in progress: decides which capture mode, if any,
/// would have allowed it (the remedy [`GraphError::UnsafeDuringCapture`] names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureConflict {
    /// The calling thread's own capture forbids the call (global or thread-local mode).
    CapturingThread,
    /// Another thread's capture in `global` mode forbids it.
    OtherThread,
    /// The call conflicts with capture in every mode: a device-wide synchronize, or waiting
    /// for a stream that is itself capturing.
    EveryMode,
}

impl CaptureConflict {
    fn remedy(self) -> &'static str {
        match self {
            CaptureConflict::CapturingThread => {
                "only capture_error_mode=\"relaxed\" allows this call on the capturing thread; \
                 or make it before capture_begin() or after capture_end()"
            }
            CaptureConflict::OtherThread => {
                "a \"global\" capture forbids it on every thread; capture with \"thread_local\" \
                 or \"relaxed\" to allow it from other threads"
            }
            CaptureConflict::EveryMode => {
                "no capture mode allows it while the capture runs; make it after capture_end()"
            }
        }
    }
}

impl fmt::Display for CaptureConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.remedy())
    }
}

/// Everything that can go wrong with a graph or a backend.
///
/// Each misuse of the graph API has its own variant, so callers (and the conformance suite) can
/// match on *what* went wrong; messages follow PyTorch's wording where PyTorch has one and say
/// what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// `capture_begin` on a graph that is capturing already.
    #[error("capture_begin() called while this graph is already capturing")]
    AlreadyCapturing,
    /// `capture_begin` on a graph that holds a captured graph (reset it first).
    #[error(
        "This graph instance already owns a captured graph. To capture a new graph, create a new \
         instance or call reset()."
    )]
    AlreadyCaptured,
    /// `capture_end` without a preceding `capture_begin`.
    #[error("capture_end() called without a preceding capture_begin()")]
    NotCapturing,
    /// An operation that needs a finished capture (`replay`, `instantiate`, `pool`,
    /// `debug_dump`, `nodes`) was called before one.
    #[error("Called {operation} without a preceding successful capture.")]
    NotCaptured {
        /// The operation that was called too early.
        operation: &'static str,
    },
    /// The executable graph was asked for before `instantiate()` (or a first replay).
    #[error(
        "the graph is captured but not instantiated yet: call instantiate() (or replay(), which \
         instantiates a keep_graph graph on first use) first"
    )]
    NotInstantiated,
    /// `instantiate()` called explicitly on a graph built with `keep_graph = false`.
    #[error("instantiate() is intended to be called by the user only when keep_graph=true")]
    InstantiateRequiresKeepGraph,
    /// The raw (un-instantiated) graph was destroyed at `capture_end` and cannot be reached.
    #[error(
        "You cannot access the raw graph unless the graph was created with keep_graph=true \
         (or debug mode enabled before capture_end())"
    )]
    RawGraphUnavailable,
    /// `debug_dump` without `enable_debug_mode()` (or `keep_graph`).
    #[error("Graphs debug not enabled, set with [graph].enable_debug_mode()")]
    DebugModeNotEnabled,
    /// Capture attempted on a stream that cannot be captured (CUDA's legacy default stream).
    #[error(
        "Graphs must be captured on a non-default stream. (However, after capture, it's ok to \
         replay them on the default stream.)"
    )]
    StreamNotCapturable,
    /// `capture_end` on a different stream than the capture began on.
    #[error(
        "Capture must end on the same stream it began on: make that stream current again (or \
         use a scoped capture, which does) before capture_end()"
    )]
    CaptureStreamMismatch,
    /// `capture_end` from another thread while the capture mode is not `relaxed`.
    #[error(
        "capture_end() called from a thread other than the one that began the capture \
         (allowed only with capture_error_mode=\"relaxed\"); the capture goes on"
    )]
    WrongThread,
    /// A call that is unsafe during capture (blocking synchronize, allocation outside the
    /// graph's pool, blocking copy) was made while a capture forbids it.
    #[error(
        "operation not permitted when stream is capturing: {operation} (capture mode {mode}): \
         {conflict}"
    )]
    UnsafeDuringCapture {
        /// What was called.
        operation: String,
        /// The capture error mode of the capture that forbade it.
        mode: CaptureErrorMode,
        /// Why it was forbidden, which decides the remedy.
        conflict: CaptureConflict,
    },
    /// The capture was invalidated by an earlier error; it must be reset.
    #[error(
        "the capture was invalidated by an earlier error ({reason}); call reset() (a scoped \
         capture does it for you) and capture again"
    )]
    CaptureInvalidated {
        /// What invalidated it.
        reason: String,
    },
    /// Work forked onto another stream during capture was never joined back to the capture
    /// stream before `capture_end`.
    #[error(
        "capture_end(): work forked onto another stream was not joined back into the capture \
         stream (record an event there and wait on it from the capture stream)"
    )]
    CaptureUnjoined,
    /// A pool id that cannot be used: both halves non-zero, or not issued by this backend
    /// instance (accel-graph is stricter than PyTorch here: a forged id could make unrelated
    /// graphs share memory).
    #[error("invalid pool id {pool}: {reason}")]
    InvalidPoolId {
        /// The id given.
        pool: PoolId,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An unknown capture error mode string.
    #[error(
        "Unknown capture error mode. Expected `default`, `global`, `thread_local`, or `relaxed`, \
         got '{0}'"
    )]
    UnknownCaptureErrorMode(String),
    /// An unknown backend name (`ACCEL_GRAPH_BACKEND`, `--backend`, `BackendKind::from_str`).
    #[error("unknown backend '{0}': expected one of mock, cuda, hip, wgpu (or auto)")]
    UnknownBackend(String),
    /// An environment variable that is set but not valid Unicode.
    #[error("environment variable {name} is set but is not valid Unicode: {value:?}")]
    InvalidEnvironment {
        /// The variable.
        name: &'static str,
        /// Its value, lossily decoded.
        value: String,
    },
    /// Buffers of different lengths given to an element-wise op.
    #[error("{op}: length mismatch: {expected} elements expected, got {got}")]
    LengthMismatch {
        /// The operation.
        op: &'static str,
        /// The length required.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A view's range past the end of its buffer (or a range whose start is past its end).
    #[error("view {start}..{end} is out of range for a buffer of {len} elements")]
    ViewOutOfRange {
        /// First element of the range asked for.
        start: usize,
        /// One past its last element.
        end: usize,
        /// Elements of the buffer (or view) it was asked of.
        len: usize,
    },
    /// A kernel launched with arguments that do not match its parameters.
    #[error("kernel {kernel}: {message}")]
    KernelArguments {
        /// The kernel's name.
        kernel: String,
        /// What did not match.
        message: String,
    },
    /// A kernel failed to compile or run: its compiler's log, or the panic of its host
    /// function on the mock (an index out of bounds, a wrong element type).
    #[error("kernel {kernel} failed: {message}")]
    KernelFailed {
        /// The kernel's name.
        kernel: String,
        /// The compiler's log or the panic's message.
        message: String,
    },
    /// A run-time library the call needs could not be loaded (NVRTC, cuBLAS, hipRTC, NCCL).
    #[error("{library} is unavailable: {reason}")]
    LibraryUnavailable {
        /// The library (`libnvrtc`, `libcublas`...).
        library: &'static str,
        /// The loader's message and what to install.
        reason: String,
    },
    /// A buffer, stream or event that belongs to another backend instance.
    #[error("{what} belongs to another backend instance")]
    ForeignObject {
        /// What was foreign.
        what: &'static str,
    },
    /// Replay touched device memory freed since capture (the mock's sanitizer, for work the
    /// backend cannot keep alive: native work captured through raw handles).
    #[error(
        "replay would touch device memory at {address:#x} that was freed after capture \
         (node {node}: {label}); on a GPU this is silent memory corruption"
    )]
    DanglingBuffer {
        /// Device address of the freed memory.
        address: u64,
        /// Graph node that touches it.
        node: usize,
        /// The node's label.
        label: String,
    },
    /// Two accesses to overlapping bytes of one memory block, at least one a write, with
    /// nothing ordering them (the mock's race sanitizer): in a captured graph, two nodes with
    /// no path between them; in eager work, two streams with no event wait or synchronize in
    /// between. On a GPU the result would depend on timing.
    #[error(
        "data race: {first} and {second} touch the same bytes, at least one writes, and \
         nothing orders them; order them with record_event on one stream and wait_event on \
         the other (in a capture: join the branches before the second access) or a synchronize"
    )]
    DataRace {
        /// The access that came first.
        first: Box<RaceAccess>,
        /// The access that raced with it (the work that failed).
        second: Box<RaceAccess>,
    },
    /// A host callback panicked (the panic was caught at the device boundary).
    #[error("host callback {callback} panicked: {message}")]
    HostCallbackPanicked {
        /// Which callback: its node in a graph, or an eager callback.
        callback: String,
        /// The panic message.
        message: String,
    },
    /// A graph update was refused: the two graphs' topologies differ (`update_from`), or a
    /// node cannot take the new arguments (`update_node`). The graph is left as it was — its
    /// executable, its raw graph and the memory it holds.
    #[error(
        "graph update refused ({conflict}{}): {reason}; the graph is unchanged (capture and \
         instantiate a new graph for a different topology)",
        match node { Some(n) => format!(", node {n}"), None => String::new() }
    )]
    UpdateRefused {
        /// What differed.
        conflict: UpdateConflict,
        /// The node concerned (its index among the nodes the API issued), when one is.
        node: Option<usize>,
        /// What exactly, in words.
        reason: String,
    },
    /// [`Backend::captured_node`](crate::Backend::captured_node) has no node to name: the
    /// current stream is not capturing, or has issued no work in its capture yet, or is a
    /// conditional node's body (whose nodes cannot be updated one at a time).
    #[error("no captured node to name: {reason}")]
    NodeUnavailable {
        /// Why.
        reason: String,
    },
    /// An argument that does not match what a graphed callable or wrapper captured with.
    #[error("{0}")]
    ArgumentMismatch(String),
    /// `capture_end()` called while a conditional node's body of the capture is being
    /// captured (from inside the body): the capture goes on until the body returns, and is
    /// invalidated, so its own `capture_end` reports [`GraphError::CaptureInvalidated`].
    #[error(
        "capture_end() called inside a conditional node's body: the node ends when its body \
         returns, so the capture cannot end here; it is invalidated (end it after the \
         conditional returns, which reports CaptureInvalidated, then capture again)"
    )]
    CaptureEndInsideBody,
    /// A `while` loop run by the host (eagerly, or replayed by a backend that emulates
    /// conditional nodes) ran [`WHILE_ITERATION_LIMIT`](crate::WHILE_ITERATION_LIMIT)
    /// iterations without its condition becoming false: on a GPU it would never finish.
    #[error(
        "a while loop ran {iterations} iterations without its condition becoming false{where_} \
         (a GPU would never finish): the body's work must make the condition false"
    )]
    WhileLoopLimit {
        /// Iterations run.
        iterations: u64,
        /// Where it ran (`" (eager)"`, or the node's label), for the message.
        where_: String,
    },
    /// Operands of one op that share some bytes but are not the same view: what the op would
    /// read depends on the order the device runs its threads in (docs/SEMANTICS.md, the
    /// rules for overlapping operands). Identical views are the in-place form of an
    /// element-wise op and are accepted; GEMM's `C` may overlap neither `A` nor `B`.
    #[error(
        "{op}: {detail}: the result would depend on the order the device runs its threads in; \
         pass disjoint views (or the same view, for an element-wise op in place)"
    )]
    OverlappingOperands {
        /// The op.
        op: &'static str,
        /// Which operands overlap, and where.
        detail: String,
    },
    /// Ranks of a communicator did not come within its timeout (to a barrier, to the
    /// communicator's creation, to the comparison of a capture, to a collective on the mock,
    /// or the device's work of a collective did not finish in
    /// [`Communicator::wait`](crate::collective::Communicator::wait)). The communicator is
    /// unusable on this rank from then on.
    #[error(
        "communicator {communicator}: rank {rank} waited {waited_ms} ms in {operation} for {}, \
         in vain (a rank that died, hangs, or issued a different sequence of collectives); the \
         communicator is unusable on this rank from now on",
        missing_ranks(missing)
    )]
    CommTimeout {
        /// The communicator's name.
        communicator: String,
        /// The rank that waited.
        rank: usize,
        /// What it waited in (`"join #0"`, `"capture #2"`, `"all_reduce #7"`, `"wait"`).
        operation: String,
        /// The ranks that did not come (empty when the device's work did not finish).
        missing: Vec<usize>,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The ranks of a communicator issued, or captured, different collectives: a capture
    /// whose sequence (count, kind, sizes, element types) differs from another rank's is
    /// discarded (a replay would hang or corrupt memory); on the mock, an eager collective that
    /// differs from another rank's fails too.
    #[error("communicator {communicator}: rank {rank}: {message}")]
    CollectiveMismatch {
        /// The communicator's name.
        communicator: String,
        /// The rank reporting.
        rank: usize,
        /// What differed.
        message: String,
    },
    /// A communicator that a timeout or an abort made unusable on this rank.
    #[error(
        "communicator {communicator} is unusable on rank {rank}: {reason}; make a new \
         communicator (a new id) on every rank"
    )]
    CommUnusable {
        /// The communicator's name.
        communicator: String,
        /// The rank.
        rank: usize,
        /// What made it unusable.
        reason: String,
    },
    /// Two communicators were given the same name on one store (or a rank joined twice, or
    /// the store holds a previous launch's communicator of that name): ranks of one could
    /// otherwise meet ranks of the other and sum their data. A rank that finds its place
    /// taken is refused, and so is every rank of a communicator that learns of such a rank
    /// while it joins.
    #[error(
        "communicator {communicator}: rank {rank}: the name is already in use on this store: \
         {reason}; communicators sharing a store need distinct names (and a FileStore a fresh \
         directory for each launch)"
    )]
    CommNameClash {
        /// The communicator's name.
        communicator: String,
        /// The rank reporting.
        rank: usize,
        /// What was found.
        reason: String,
    },
    /// The store the ranks meet through cannot be used: no server answered at its address
    /// within the connect timeout (rank 0, which hosts a
    /// [`TcpStore`](crate::collective::TcpStore), is not up or not reachable), the connection
    /// was closed or reset (rank 0 dropped its store or died), an answer did not come within
    /// the store's I/O timeout, the peer does not speak the store's protocol, or rank 0 could
    /// not listen on its address. Meetings through the store cannot go on on this rank.
    #[error("store {store} is unavailable: {reason}")]
    StoreUnavailable {
        /// The store's address (`host:port`).
        store: String,
        /// What failed, and what to check.
        reason: String,
    },
    /// A collective issued into a capture in `global` mode while several ranks share this
    /// process's capture domain (one thread per device): another rank's calls during the
    /// capture would invalidate it.
    #[error(
        "communicator {communicator}: a collective captured in capture_error_mode \"global\" \
         while {ranks} ranks of communicators share this process's capture domain: each rank's \
         calls would invalidate the others' captures; capture with capture_error_mode \
         \"thread_local\" (NCCL's rule for one thread per device)"
    )]
    CollectiveCaptureMode {
        /// The communicator's name.
        communicator: String,
        /// Ranks of live communicators in the capture domain.
        ranks: usize,
    },
    /// A fault injected on purpose (mock backend's fault injection).
    #[error("injected fault: {operation} #{count} fails as configured")]
    InjectedFault {
        /// Which operation failed.
        operation: &'static str,
        /// Its ordinal (1-based).
        count: u64,
    },
    /// The device hit an unrecoverable error (an illegal address in a kernel, a lost device):
    /// every later call of the backend reports it again. Only a new process recovers.
    #[error(
        "{backend} device fault {name}: {message} (the device context is unusable from now on; \
         every later call reports this)"
    )]
    DeviceFault {
        /// Backend name.
        backend: &'static str,
        /// Symbolic name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
        name: String,
        /// Description from the driver.
        message: String,
    },
    /// A device or driver call failed.
    #[error("{backend} error {name} ({code}): {message}")]
    Driver {
        /// Backend name (`cuda`, `hip`, `wgpu`, `mock`).
        backend: &'static str,
        /// Numeric error code.
        code: i64,
        /// Symbolic name, e.g. `CUDA_ERROR_INVALID_VALUE`.
        name: String,
        /// Description from the driver.
        message: String,
    },
    /// The backend cannot be used on this machine or build.
    #[error("backend {backend} unavailable: {reason}")]
    BackendUnavailable {
        /// Backend name.
        backend: &'static str,
        /// Why (driver text where there is one).
        reason: String,
    },
    /// The backend lacks a capability.
    #[error("unsupported on this backend: {what}")]
    Unsupported {
        /// What is missing.
        what: String,
    },
    /// Device memory exhausted, or a size that overflows the address space.
    #[error("{backend}: out of memory allocating {requested_bytes} bytes")]
    OutOfMemory {
        /// Backend name.
        backend: &'static str,
        /// Bytes requested (`usize::MAX` when the size itself overflowed).
        requested_bytes: usize,
    },
    /// File I/O failed (debug dumps).
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The ranks of a [`GraphError::CommTimeout`], for its message.
fn missing_ranks(missing: &[usize]) -> String {
    match missing {
        [] => "the device's work".to_owned(),
        [one] => format!("rank {one}"),
        many => format!(
            "ranks {}",
            many.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl GraphError {
    /// True for `capture_end` errors after which the capture is still active, so it can still
    /// be ended correctly (from the right thread or stream) or reset.
    pub fn capture_still_active(&self) -> bool {
        matches!(
            self,
            GraphError::WrongThread
                | GraphError::CaptureStreamMismatch
                | GraphError::CaptureEndInsideBody
        )
    }

    /// An [`GraphError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        GraphError::Io {
            path: path.into(),
            source,
        }
    }

    /// An [`GraphError::OutOfMemory`] for a size that overflowed while it was computed.
    pub fn size_overflow(backend: &'static str) -> Self {
        GraphError::OutOfMemory {
            backend,
            requested_bytes: usize::MAX,
        }
    }
}
