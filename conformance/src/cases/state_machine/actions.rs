//! The calls a sequence is made of, and the random sequences.

use accel_graph_api::CaptureErrorMode;
use proptest::{collection::vec, prelude::*, strategy::Union};

/// Graph slots of a sequence.
pub(super) const GRAPHS: usize = 3;
/// Buffer slots of a sequence.
pub(super) const BUFFERS: usize = 4;
/// Pool-handle slots of a sequence.
pub(super) const HANDLES: usize = 2;
/// Streams of each instance; stream 0 is the instance's default stream.
pub(super) const STREAMS: usize = 3;
/// Backend instances of a sequence (two instances of one device). Where the suite can open
/// only one, actions naming the second instance name the first.
pub(super) const INSTANCES: usize = 2;
/// Buffer lengths a sequence allocates and uses.
const LENGTHS: [usize; 3] = [1, 4, 16];
/// Element counts whose size overflows: the byte count (`> usize::MAX / 4`) or its rounding to
/// a pool block or an aligned address range (`usize::MAX / 4`).
const OVERFLOWING: [usize; 4] = [
    usize::MAX / 4,
    usize::MAX / 4 + 1,
    usize::MAX / 2 + 1,
    usize::MAX,
];
/// The smallest "huge" element count drawn: 2^56 elements, 2^58 bytes, more than any device
/// or any host's address space holds (so a refusal never depends on the machine).
pub(super) const HUGE_MIN: usize = usize::MAX >> 8;
/// Microbatches the static buffer loader is asked for (0, 1, 2: loads beyond the loaded
/// count are refused).
pub(super) const MICROBATCHES: usize = 3;
/// Length of the graphed callable's static input.
pub(super) const UTILITY_LEN: usize = 4;
/// Batch sizes of the bucketed cache (rows of one element): a 1-element buffer is padded to 2,
/// a 4-element one fills its bucket, a 16-element one runs eagerly.
pub(super) const BUCKETS: [usize; 2] = [2, 4];
/// Random calls (or episodes) after the fixed start of a sequence, at most.
const MAX_ACTIONS: usize = 40;

/// Where a new graph's pool comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum PoolChoice {
    /// None given: a private pool.
    Own,
    /// The `graph_pool_handle()` id in a handle slot (none if the slot is empty), issued by
    /// the instance that filled the slot.
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

/// A utility of accel-graph-utils a sequence can hold (one of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Utility {
    /// A graphed callable `y = 2x` over a static input of [`UTILITY_LEN`] elements.
    Graphed,
    /// A static buffer loader.
    Loader,
    /// A bucketed cache of `y = 2x` over the buckets [`BUCKETS`].
    Bucketed,
}

/// One call of a sequence. Indices are slots of the sequence's graphs, buffers and handles,
/// streams of an instance, and instances (`on`: the instance the call is made through; a
/// graph's calls go through the instance that made it).
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
    NewGraph {
        on: usize,
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
    /// Allocates `len` elements: a length a device holds, or one far beyond (refused with
    /// `OutOfMemory`, or refused as an unsafe call first where a capture forbids it).
    Alloc {
        on: usize,
        slot: usize,
        len: usize,
    },
    /// Drops the buffer in a slot — also while captured work uses it: the graph keeps its
    /// memory, so later replays stay valid.
    DropBuffer(usize),
    /// A portable op through instance `on` on buffers `a` (and `b`), of any instance: a buffer
    /// of the other instance is `ForeignObject`.
    Op {
        on: usize,
        kind: OpKind,
        a: usize,
        b: usize,
    },
    /// Makes stream `stream` of instance `of` current through instance `on` (`ForeignObject`
    /// when they differ).
    UseStream {
        on: usize,
        of: usize,
        stream: usize,
    },
    NewPoolHandle {
        on: usize,
        slot: usize,
    },
    Synchronize {
        on: usize,
    },
    Download {
        on: usize,
        slot: usize,
    },
    /// `empty_cache()`: legal at any time, never disturbs a capture.
    EmptyCache {
        on: usize,
    },
    /// A host callback on `on`'s current stream that drops whatever buffer is in `slot` when it
    /// runs: at once when the stream does not capture, at every replay when it does — in the
    /// middle of the replay, before the graph's later nodes that may use that buffer.
    HostDrop {
        on: usize,
        slot: usize,
    },
    /// Makes (or makes anew) the sequence's utility of this kind, on instance `on`.
    MakeUtility {
        on: usize,
        utility: Utility,
    },
    /// Calls the graphed callable with the buffer in `slot`.
    GraphedCall(usize),
    /// Loads the buffer in `slot` as the only input of `microbatch` of stage `stage` (0:
    /// training, 1: validation).
    Load {
        stage: usize,
        microbatch: usize,
        slot: usize,
    },
    /// Runs the bucketed cache on the buffer in `slot` (`run_device`).
    BucketedRun(usize),
}

impl Action {
    /// The name of the call, for the counts printed.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Action::NewGraph { .. } => "new_graph",
            Action::DropGraph(_) => "drop_graph",
            Action::CaptureBegin(_) => "capture_begin",
            Action::CaptureEnd(_) => "capture_end",
            Action::Instantiate(_) => "instantiate",
            Action::Replay(_) => "replay",
            Action::Reset(_) => "reset",
            Action::Pool(_) => "pool",
            Action::EnableDebugMode(_) => "enable_debug_mode",
            Action::DebugDump(_) => "debug_dump",
            Action::Nodes(_) => "nodes",
            Action::Alloc { len, .. } if *len >= HUGE_MIN => "alloc(huge)",
            Action::Alloc { .. } => "alloc",
            Action::DropBuffer(_) => "drop_buffer",
            Action::Op { .. } => "op",
            Action::UseStream { on, of, .. } if on != of => "use_stream(other instance's)",
            Action::UseStream { .. } => "use_stream",
            Action::NewPoolHandle { .. } => "graph_pool_handle",
            Action::Synchronize { .. } => "synchronize",
            Action::Download { .. } => "download",
            Action::EmptyCache { .. } => "empty_cache",
            Action::HostDrop { .. } => "host_drop",
            Action::MakeUtility { .. } => "make_utility",
            Action::GraphedCall(_) => "graphed_call",
            Action::Load { .. } => "load",
            Action::BucketedRun(_) => "bucketed_run",
        }
    }
}

fn instance() -> impl Strategy<Value = usize> {
    prop_oneof![5 => Just(0usize), 1 => Just(1usize)]
}

fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        16 => prop::sample::select(LENGTHS.to_vec()),
        1 => prop::sample::select(OVERFLOWING.to_vec()),
        1 => HUGE_MIN..=usize::MAX,
    ]
}

fn action() -> impl Strategy<Value = Action> {
    let g = || 0..GRAPHS;
    let buffer = || 0..BUFFERS;
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
    let utility = prop::sample::select(vec![Utility::Graphed, Utility::Loader, Utility::Bucketed]);
    let arms: Vec<(u32, BoxedStrategy<Action>)> = vec![
        (
            4,
            (instance(), g(), any::<bool>(), pool, mode)
                .prop_map(|(on, slot, keep_graph, pool, mode)| Action::NewGraph {
                    on,
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
            5,
            (instance(), buffer(), length())
                .prop_map(|(on, slot, len)| Action::Alloc { on, slot, len })
                .boxed(),
        ),
        (2, buffer().prop_map(Action::DropBuffer).boxed()),
        (
            10,
            (instance(), kind, buffer(), buffer())
                .prop_map(|(on, kind, a, b)| Action::Op { on, kind, a, b })
                .boxed(),
        ),
        (
            4,
            (instance(), prop::bool::weighted(0.2), 0..STREAMS)
                .prop_map(|(on, foreign, stream)| Action::UseStream {
                    on,
                    of: if foreign { 1 - on } else { on },
                    stream,
                })
                .boxed(),
        ),
        (
            1,
            (instance(), 0..HANDLES)
                .prop_map(|(on, slot)| Action::NewPoolHandle { on, slot })
                .boxed(),
        ),
        (
            1,
            instance().prop_map(|on| Action::Synchronize { on }).boxed(),
        ),
        (
            1,
            (instance(), buffer())
                .prop_map(|(on, slot)| Action::Download { on, slot })
                .boxed(),
        ),
        (
            1,
            instance().prop_map(|on| Action::EmptyCache { on }).boxed(),
        ),
        (
            1,
            (instance(), buffer())
                .prop_map(|(on, slot)| Action::HostDrop { on, slot })
                .boxed(),
        ),
        (
            2,
            (instance(), utility)
                .prop_map(|(on, utility)| Action::MakeUtility { on, utility })
                .boxed(),
        ),
        (4, buffer().prop_map(Action::GraphedCall).boxed()),
        (
            4,
            (0..2usize, 0..MICROBATCHES, buffer())
                .prop_map(|(stage, microbatch, slot)| Action::Load {
                    stage,
                    microbatch,
                    slot,
                })
                .boxed(),
        ),
        (4, buffer().prop_map(Action::BucketedRun).boxed()),
    ];
    Union::new_weighted(arms)
}

/// An episode: a capture of a few ops on the sequence's buffers, ended, a buffer it used
/// dropped or replaced, and the graph replayed — the path on which a graph must keep the
/// memory of its captured work alive, rare among calls drawn one by one. Each call of it is
/// still checked on its own (any of them may not apply, or fail as the model predicts).
fn episode() -> impl Strategy<Value = Vec<Action>> {
    let kind = prop::sample::select(vec![
        OpKind::Fill,
        OpKind::Copy,
        OpKind::AddScalar,
        OpKind::Scale,
        OpKind::Axpy,
    ]);
    let op = (instance(), kind, 0..BUFFERS, 0..BUFFERS).prop_map(|(on, kind, a, b)| Action::Op {
        on,
        kind,
        a,
        b,
    });
    (
        0..GRAPHS,
        vec(op, 1..4),
        0..BUFFERS,
        any::<bool>(),
        instance(),
    )
        .prop_map(|(g, ops, slot, drop_it, on)| {
            let mut actions = vec![Action::CaptureBegin(g)];
            actions.extend(ops);
            actions.push(Action::CaptureEnd(g));
            actions.push(if drop_it {
                Action::DropBuffer(slot)
            } else {
                Action::Alloc { on, slot, len: 4 }
            });
            actions.push(Action::Replay(g));
            actions
        })
}

/// A sequence: two graphs and two buffers to start with (so that most calls apply), a
/// non-default stream made current on each instance, then random calls and episodes.
pub(super) fn sequence() -> impl Strategy<Value = Vec<Action>> {
    let new_graph = |slot: usize| {
        (
            instance(),
            any::<bool>(),
            prop::sample::select(CaptureErrorMode::ALL.to_vec()),
        )
            .prop_map(move |(on, keep_graph, mode)| Action::NewGraph {
                on,
                slot,
                keep_graph,
                pool: PoolChoice::Own,
                mode,
            })
    };
    let alloc = |slot: usize| {
        (instance(), prop::sample::select(LENGTHS.to_vec()))
            .prop_map(move |(on, len)| Action::Alloc { on, slot, len })
    };
    (
        new_graph(0),
        new_graph(1),
        alloc(0),
        alloc(1),
        vec(
            prop_oneof![
                12 => action().prop_map(|a| vec![a]),
                1 => episode(),
            ],
            0..MAX_ACTIONS,
        ),
    )
        .prop_map(|(g0, g1, a0, a1, rest)| {
            let mut actions = vec![g0, g1, a0, a1];
            for on in 0..INSTANCES {
                actions.push(Action::UseStream {
                    on,
                    of: on,
                    stream: 1,
                });
            }
            actions.extend(rest.into_iter().flatten());
            actions
        })
}
