//! The calls a sequence is made of, and the random sequences.

use accel_graph_api::CaptureErrorMode;
use proptest::{collection::vec, prelude::*, strategy::Union};

/// Graph slots of a sequence.
pub(super) const GRAPHS: usize = 3;
/// Buffer slots of a sequence.
pub(super) const BUFFERS: usize = 4;
/// Pool-handle slots of a sequence.
pub(super) const HANDLES: usize = 2;
/// Streams of a sequence; stream 0 is the default stream.
pub(super) const STREAMS: usize = 3;
/// Buffer lengths a sequence allocates.
const LENGTHS: [usize; 3] = [1, 4, 16];
/// Random calls after the fixed start of a sequence, at most.
const MAX_ACTIONS: usize = 40;

/// Where a new graph's pool comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum PoolChoice {
    /// None given: a private pool.
    Own,
    /// The `graph_pool_handle()` id in a handle slot (none if the slot is empty).
    Handle(usize),
    /// The pool of the graph in a slot, if it is captured (none otherwise).
    ShareGraph(usize),
    /// `(5, 7)`: both halves non-zero.
    Invalid,
    /// `(0, 1 << 48)`: a well-formed id the instance never issued.
    Forged,
}

/// A portable op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Fill,
    Copy,
    AddScalar,
    Scale,
    Axpy,
}

impl OpKind {
    /// Reads a second buffer (so it must not alias the first, and lengths must match).
    pub(super) fn binary(self) -> bool {
        matches!(self, OpKind::Copy | OpKind::Axpy)
    }
}

/// One call of a sequence (indices are slots of the sequence's graphs, buffers, handles and
/// streams).
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
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
    /// Drops the buffer in a slot — also while captured work uses it: the graph keeps its
    /// memory, so later replays stay valid.
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
    /// `empty_cache()`: legal at any time, never disturbs a capture.
    EmptyCache,
}

fn action() -> impl Strategy<Value = Action> {
    let g = || 0..GRAPHS;
    let pool = prop_oneof![
        3 => Just(PoolChoice::Own),
        2 => (0..HANDLES).prop_map(PoolChoice::Handle),
        2 => (0..GRAPHS).prop_map(PoolChoice::ShareGraph),
        1 => Just(PoolChoice::Invalid),
        1 => Just(PoolChoice::Forged),
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
        (2, (0..BUFFERS).prop_map(Action::DropBuffer).boxed()),
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
        (1, Just(Action::EmptyCache).boxed()),
    ];
    Union::new_weighted(arms)
}

/// A sequence: two graphs and two buffers to start with (so that most calls apply), a
/// non-default stream made current, then random calls.
pub(super) fn sequence() -> impl Strategy<Value = Vec<Action>> {
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
