//! The calls a hostile sequence is made of, and how a seed becomes a sequence.
//!
//! Every call names its objects by slot (a stream, an event, a graph, a buffer), so a sequence
//! is plain data drawn before it runs: the seed alone reproduces it, and the watchdog can print
//! it without touching any object of the sequence.

use accel_graph_api::CaptureErrorMode;

/// Streams of a sequence; stream 0 is the instance's default stream.
pub(super) const STREAMS: usize = 3;
/// Event slots, shared by the threads of a sequence.
pub(super) const EVENTS: usize = 3;
/// Graph slots: two, or one per thread of a threaded sequence.
pub(super) const GRAPHS: usize = 4;
/// `f32` buffer slots that ops, kernels and products use.
pub(super) const BUFFERS: usize = 4;
/// `f32` flags (two elements each): the conditions of `while_loop`s (and of some `if_then`s).
/// Only flag calls and the loops' own bodies write them, so every loop ends.
pub(super) const FLAGS: usize = 2;
/// Elements of each flag.
pub(super) const FLAG_LEN: usize = 2;
/// Captured nodes remembered for `update_node`.
pub(super) const NODES: usize = 8;
/// Lengths of the buffers a sequence allocates: most of them equal, so that whole-buffer
/// operands of two-buffer ops often match.
const LENGTHS: [usize; 6] = [16, 16, 16, 4, 4, 1];

/// A small, seeded random number generator (SplitMix64): the same seed gives the same
/// sequence on every machine.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A slot number in `0..n`.
    fn slot(&mut self, n: usize) -> u8 {
        self.below(n) as u8
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Which elements of a buffer an operand is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ViewSel {
    /// The whole buffer.
    Whole,
    /// Its first `n` elements (out of range when the buffer is shorter: a typed error).
    Prefix(u8),
    /// `len` elements from `start`.
    Range(u8, u8),
}

/// A buffer (or flag) slot and which of its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Operand {
    pub(super) slot: u8,
    pub(super) view: ViewSel,
}

/// A portable op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Fill,
    Copy,
    AddScalar,
    Scale,
    Axpy,
    Mul,
}

/// Where a new graph's pool comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PoolSel {
    /// A private pool.
    Own,
    /// The sequence's `graph_pool_handle()`.
    Shared,
    /// The pool of the graph in the slot (a private one if it has none yet).
    OfGraph(u8),
}

/// The condition of an `if_then`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cond {
    /// An element of a flag (`f32`).
    Flag(Operand),
    /// The sequence's one-element `u32` condition.
    U32,
}

/// An argument given to `update_node`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ArgSel {
    Buffer(Operand),
    F32(f32),
    U32(u32),
    I32(i32),
}

/// What a conditional node's body does besides its work: the calls a body should not make,
/// whose results the body ignores (an `Err` is [`Body::give_up`]'s job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Misbehave {
    Nothing,
    /// `capture_end` of a graph (perhaps the one capturing around the body).
    CaptureEnd(u8),
    /// `capture_begin` of a graph on the body's current stream.
    CaptureBegin(u8),
    Record(u8),
    Wait(u8),
    /// Switches the thread's current stream away from the body's own, unguarded.
    SetStream(u8),
    Synchronize,
    /// Allocates into a buffer slot (dropping what it held).
    Alloc(u8),
    DropBuffer(u8),
    Replay(u8),
    /// An `if_then` on the `u32` condition inside the body.
    Nested,
    /// `captured_node()` in the body (which names no node).
    CapturedNode,
    Download(u8),
}

/// The body of an `if_then` or `while_loop`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Body {
    /// Done first, in this order.
    pub(super) misbehave: [Misbehave; 2],
    /// The body returns an error before any work.
    pub(super) give_up: bool,
    /// Its work (its error is the body's).
    pub(super) op: Option<(OpKind, Operand, Operand)>,
    /// The body returns an error after its work (a `while_loop` body after zeroing its
    /// condition).
    pub(super) fail_after: bool,
}

/// One call of a sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Action {
    /// `set_current_stream` (of the calling thread).
    SetStream(u8),
    /// A new graph in the slot (the one it held is dropped).
    NewGraph {
        g: u8,
        keep_graph: bool,
        mode: CaptureErrorMode,
        pool: PoolSel,
    },
    DropGraph(u8),
    /// `set_current_stream(stream)`, then `capture_begin`.
    CaptureBegin {
        g: u8,
        stream: u8,
    },
    /// `capture_end` on the thread's current stream.
    CaptureEnd(u8),
    Replay(u8),
    Reset(u8),
    Instantiate(u8),
    /// `update_graph(g, from)`.
    UpdateGraph {
        g: u8,
        from: u8,
    },
    /// A new event in the slot (the one it held is dropped, perhaps recorded in a capture
    /// that goes on).
    NewEvent {
        e: u8,
        external: bool,
    },
    Record(u8),
    Wait(u8),
    EventSynchronize(u8),
    EventQuery(u8),
    Synchronize,
    StreamSynchronize(u8),
    EmptyCache,
    /// A new buffer in the slot (the one it held is dropped, perhaps used by a capture).
    Alloc {
        slot: u8,
        len: usize,
    },
    DropBuffer(u8),
    RecordStream {
        slot: u8,
        stream: u8,
    },
    /// `upload` of as many elements as the view has, plus `extra`.
    Upload {
        dst: Operand,
        extra: u8,
    },
    Download(Operand),
    /// A portable op on buffers (`src` is ignored by one-operand ops).
    Op {
        kind: OpKind,
        dst: Operand,
        src: Operand,
        scalar: f32,
    },
    /// `fill` of a flag.
    SetFlag {
        flag: Operand,
        value: f32,
    },
    /// `upload` into the `u32` condition.
    SetCond(u32),
    /// The affine kernel `y = 1.5 x + 0.25` over `n` elements.
    Kernel {
        y: Operand,
        x: Operand,
        n: u32,
        empty_grid: bool,
    },
    /// `C = op(A) op(B) + beta C`.
    Gemm {
        mnk: [u8; 3],
        transpose: [bool; 2],
        beta: f32,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    /// `captured_node()`, remembered for `update_node`.
    NoteNode,
    UpdateNode {
        g: u8,
        node: u8,
        index: u8,
        arg: ArgSel,
    },
    IfThen {
        cond: Cond,
        body: Body,
    },
    /// A loop whose body ends by zeroing its flag (unless it fails first).
    WhileLoop {
        flag: Operand,
        body: Body,
    },
    /// A host callback that does nothing.
    HostCallback,
}

/// What the backend offers that a sequence may draw.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offers {
    pub(super) conditionals: bool,
    pub(super) host_callbacks: bool,
}

/// Which slots one thread's calls name.
#[derive(Debug, Clone, Copy)]
struct Scope {
    /// The events it records, waits on and replaces: `first, count`.
    events: (u8, u8),
    /// The graphs whose captures it begins, ends and resets, and which it replaces and drops.
    own: (u8, u8),
    /// The graphs it replays, instantiates and updates.
    any: (u8, u8),
}

impl Scope {
    /// A single-thread sequence's: three events, two graphs.
    const SINGLE: Scope = Scope {
        events: (0, EVENTS as u8),
        own: (0, 2),
        any: (0, 2),
    };

    /// A thread of a sequence of `threads`: every event, and a graph for each thread (any
    /// thread's, whichever it names).
    fn threads(threads: usize) -> Scope {
        let all = (0, threads as u8);
        Scope {
            events: (0, EVENTS as u8),
            own: all,
            any: all,
        }
    }

    fn pick(rng: &mut Rng, (first, count): (u8, u8)) -> u8 {
        first + rng.slot(usize::from(count))
    }

    fn event(&self, rng: &mut Rng) -> u8 {
        Self::pick(rng, self.events)
    }

    fn own(&self, rng: &mut Rng) -> u8 {
        Self::pick(rng, self.own)
    }

    fn any(&self, rng: &mut Rng) -> u8 {
        Self::pick(rng, self.any)
    }
}

/// A sequence: calls made first by one thread, then each thread's calls.
#[derive(Debug, Clone)]
pub(super) struct Sequence {
    pub(super) setup: Vec<Action>,
    pub(super) threads: Vec<Vec<Action>>,
}

impl Sequence {
    /// A single-thread sequence.
    pub(super) fn single(seed: u64, offers: Offers) -> Self {
        let mut rng = Rng::new(seed);
        let setup = setup(&mut rng, Scope::SINGLE);
        let calls = 10 + rng.below(50);
        Sequence {
            setup,
            threads: vec![calls_for(&mut rng, offers, Scope::SINGLE, calls)],
        }
    }

    /// A sequence of 2 to 4 threads sharing streams, buffers, graphs and events, whose
    /// conditional nodes run on each other's streams and in each other's captures.
    pub(super) fn threaded(seed: u64, offers: Offers) -> Self {
        let mut rng = Rng::new(seed);
        let threads = 2 + rng.below(3);
        let scope = Scope::threads(threads);
        let setup = setup(&mut rng, scope);
        let threads = (0..threads)
            .map(|t| {
                // Each thread starts on a stream of its own choosing.
                let mut calls = vec![Action::SetStream(((t + 1) % STREAMS) as u8)];
                let n = 8 + rng.below(25);
                calls.extend(calls_for(&mut rng, offers, scope, n));
                calls
            })
            .collect();
        Sequence { setup, threads }
    }

    /// Calls in all.
    pub(super) fn len(&self) -> usize {
        self.setup.len() + self.threads.iter().map(Vec::len).sum::<usize>()
    }
}

/// Every buffer slot and the graph slots of `scope` filled, with random lengths and options.
fn setup(rng: &mut Rng, scope: Scope) -> Vec<Action> {
    let mut calls: Vec<Action> = (0..BUFFERS)
        .map(|slot| Action::Alloc {
            slot: slot as u8,
            len: rng.pick(&LENGTHS),
        })
        .collect();
    let (first, count) = scope.any;
    for g in first..first + count {
        calls.push(new_graph(rng, scope, g));
    }
    calls
}

fn new_graph(rng: &mut Rng, scope: Scope, g: u8) -> Action {
    Action::NewGraph {
        g,
        keep_graph: rng.chance(40),
        mode: rng.pick(&CaptureErrorMode::ALL),
        pool: match rng.below(4) {
            0 => PoolSel::Shared,
            1 => PoolSel::OfGraph(scope.any(rng)),
            _ => PoolSel::Own,
        },
    }
}

/// `n` random calls or episodes (an episode counts as one).
fn calls_for(rng: &mut Rng, offers: Offers, scope: Scope, n: usize) -> Vec<Action> {
    let mut calls = Vec::new();
    for _ in 0..n {
        if rng.chance(12) {
            episode(rng, offers, scope, &mut calls);
        } else {
            calls.push(call(rng, offers, scope));
        }
    }
    calls
}

fn view(rng: &mut Rng) -> ViewSel {
    match rng.below(4) {
        0 | 1 => ViewSel::Whole,
        2 => ViewSel::Prefix(1 + rng.below(4) as u8),
        _ => ViewSel::Range(rng.below(5) as u8, 1 + rng.below(4) as u8),
    }
}

fn operand(rng: &mut Rng) -> Operand {
    Operand {
        slot: rng.slot(BUFFERS),
        view: view(rng),
    }
}

/// Two operands, most of the time of equal lengths (same view of buffers of the same
/// length, or same-length views), so that two-buffer ops are often legal.
fn operands(rng: &mut Rng) -> (Operand, Operand) {
    let dst = operand(rng);
    let mut src = operand(rng);
    if rng.chance(70) {
        src.view = match dst.view {
            ViewSel::Range(_, len) => ViewSel::Range(rng.below(5) as u8, len),
            other => other,
        };
    }
    (dst, src)
}

fn flag(rng: &mut Rng) -> Operand {
    Operand {
        slot: rng.slot(FLAGS),
        view: match rng.below(10) {
            0 => ViewSel::Whole,
            1..=3 => ViewSel::Range(1, 1),
            _ => ViewSel::Prefix(1),
        },
    }
}

fn op_kind(rng: &mut Rng) -> OpKind {
    rng.pick(&[
        OpKind::Fill,
        OpKind::Copy,
        OpKind::AddScalar,
        OpKind::Scale,
        OpKind::Axpy,
        OpKind::Mul,
    ])
}

fn op(rng: &mut Rng) -> Action {
    let (dst, src) = operands(rng);
    Action::Op {
        kind: op_kind(rng),
        dst,
        src,
        scalar: rng.pick(&[0.5, 1.0, -2.0, 3.0]),
    }
}

fn misbehave(rng: &mut Rng, scope: Scope) -> Misbehave {
    if rng.chance(45) {
        return Misbehave::Nothing;
    }
    match rng.below(13) {
        0 => Misbehave::CaptureEnd(scope.own(rng)),
        1 => Misbehave::CaptureBegin(scope.own(rng)),
        2 => Misbehave::Record(scope.event(rng)),
        3 => Misbehave::Wait(scope.event(rng)),
        4 => Misbehave::SetStream(rng.slot(STREAMS)),
        5 => Misbehave::Synchronize,
        6 => Misbehave::Alloc(rng.slot(BUFFERS)),
        7 => Misbehave::DropBuffer(rng.slot(BUFFERS)),
        8 => Misbehave::Replay(scope.any(rng)),
        9 => Misbehave::Nested,
        10 => Misbehave::CapturedNode,
        11 => Misbehave::Download(rng.slot(BUFFERS)),
        _ => Misbehave::SetStream(0),
    }
}

fn body(rng: &mut Rng, scope: Scope) -> Body {
    Body {
        misbehave: [misbehave(rng, scope), misbehave(rng, scope)],
        give_up: rng.chance(10),
        op: rng.chance(85).then(|| {
            let (dst, src) = operands(rng);
            (op_kind(rng), dst, src)
        }),
        fail_after: rng.chance(10),
    }
}

fn conditional(rng: &mut Rng, scope: Scope) -> Action {
    if rng.chance(50) {
        Action::IfThen {
            cond: if rng.chance(50) {
                Cond::U32
            } else {
                Cond::Flag(flag(rng))
            },
            body: body(rng, scope),
        }
    } else {
        Action::WhileLoop {
            flag: flag(rng),
            body: body(rng, scope),
        }
    }
}

fn arg(rng: &mut Rng) -> ArgSel {
    match rng.below(5) {
        0 | 1 => ArgSel::Buffer(operand(rng)),
        2 => ArgSel::F32(rng.pick(&[0.0, 1.0, -7.5])),
        3 => ArgSel::U32(rng.pick(&[0, 1, 4, 1000])),
        _ => ArgSel::I32(-1),
    }
}

/// One call, drawn by weight.
fn call(rng: &mut Rng, offers: Offers, scope: Scope) -> Action {
    loop {
        let action = match rng.below(100) {
            0..=6 => Action::SetStream(rng.slot(STREAMS)),
            7..=13 => Action::CaptureBegin {
                g: scope.own(rng),
                stream: rng.slot(STREAMS),
            },
            14..=20 => Action::CaptureEnd(scope.own(rng)),
            21..=25 => Action::Record(scope.event(rng)),
            26..=30 => Action::Wait(scope.event(rng)),
            31..=42 => op(rng),
            43..=45 => Action::Alloc {
                slot: rng.slot(BUFFERS),
                len: rng.pick(&LENGTHS),
            },
            46..=47 => Action::DropBuffer(rng.slot(BUFFERS)),
            48..=52 => Action::Replay(scope.any(rng)),
            53 => Action::Reset(scope.own(rng)),
            54..=55 => Action::Instantiate(scope.any(rng)),
            56..=57 => {
                let g = scope.own(rng);
                new_graph(rng, scope, g)
            }
            58 => Action::DropGraph(scope.own(rng)),
            59 => Action::UpdateGraph {
                g: scope.any(rng),
                from: scope.any(rng),
            },
            60..=61 => Action::Synchronize,
            62..=63 => Action::StreamSynchronize(rng.slot(STREAMS)),
            64 => Action::EventSynchronize(scope.event(rng)),
            65 => Action::EventQuery(scope.event(rng)),
            66 => Action::EmptyCache,
            67..=68 => Action::NewEvent {
                e: scope.event(rng),
                external: rng.chance(30),
            },
            69 => Action::Upload {
                dst: operand(rng),
                extra: u8::from(rng.chance(20)),
            },
            70 => Action::Download(operand(rng)),
            71 => Action::RecordStream {
                slot: rng.slot(BUFFERS),
                stream: rng.slot(STREAMS),
            },
            72..=73 => Action::SetFlag {
                flag: flag(rng),
                value: rng.pick(&[0.0, 1.0]),
            },
            74 => Action::SetCond(rng.pick(&[0, 1])),
            75..=78 => {
                let (y, x) = operands(rng);
                Action::Kernel {
                    y,
                    x,
                    n: rng.pick(&[1, 4, 16, 17]),
                    empty_grid: rng.chance(5),
                }
            }
            79..=81 => Action::Gemm {
                mnk: [
                    1 + rng.below(2) as u8,
                    1 + rng.below(2) as u8,
                    1 + rng.below(3) as u8,
                ],
                transpose: [rng.chance(30), rng.chance(30)],
                beta: rng.pick(&[0.0, 1.0]),
                a: Operand {
                    slot: rng.slot(BUFFERS),
                    view: ViewSel::Prefix(rng.pick(&[1, 2, 4, 6])),
                },
                b: Operand {
                    slot: rng.slot(BUFFERS),
                    view: ViewSel::Prefix(rng.pick(&[1, 2, 4, 6])),
                },
                c: Operand {
                    slot: rng.slot(BUFFERS),
                    view: ViewSel::Prefix(rng.pick(&[1, 2, 4])),
                },
            },
            82..=84 => Action::NoteNode,
            85..=88 => Action::UpdateNode {
                g: scope.any(rng),
                node: rng.slot(NODES),
                index: rng.below(6) as u8,
                arg: arg(rng),
            },
            89..=96 if offers.conditionals => conditional(rng, scope),
            97..=99 if offers.host_callbacks => Action::HostCallback,
            _ => continue,
        };
        return action;
    }
}

/// Keeps `action` if `keep` (drawn with probability 9/10: the episodes' variations).
fn maybe(keep: bool, calls: &mut Vec<Action>, action: Action) {
    if keep {
        calls.push(action);
    }
}

/// A capturing stream (never the default one, which may refuse to capture) and two others.
fn three_streams(rng: &mut Rng) -> (u8, u8, u8) {
    let origin = 1 + rng.below(STREAMS - 1) as u8;
    let other = if origin == 1 { 2 } else { 1 };
    let side = if rng.chance(60) { other } else { 0 };
    let eager = rng.slot(STREAMS);
    (origin, side, eager)
}

/// A few calls that walk one of the paths random calls seldom walk in full.
fn episode(rng: &mut Rng, offers: Offers, scope: Scope, calls: &mut Vec<Action>) {
    let g = scope.own(rng);
    let (origin, side, eager) = three_streams(rng);
    // Two distinct events of the scope.
    let (e_in, e_out) = {
        let (first, count) = scope.events;
        let a = rng.slot(usize::from(count));
        let b = (a + 1 + rng.slot(usize::from(count) - 1)) % count;
        (first + a, first + b)
    };
    calls.push(Action::CaptureBegin { g, stream: origin });
    match rng.below(5) {
        // An event recorded in a capture that an eager wait then invalidates, waited on
        // from another stream (twice), then the capture ended.
        0 => {
            maybe(rng.chance(90), calls, Action::Record(e_in));
            maybe(rng.chance(90), calls, op(rng));
            maybe(rng.chance(90), calls, Action::SetStream(eager));
            maybe(rng.chance(90), calls, Action::Record(e_out));
            maybe(rng.chance(90), calls, Action::SetStream(origin));
            maybe(rng.chance(90), calls, Action::Wait(e_out));
            maybe(rng.chance(90), calls, Action::SetStream(side));
            maybe(rng.chance(90), calls, Action::Wait(e_in));
            maybe(rng.chance(90), calls, Action::Wait(e_in));
            maybe(rng.chance(90), calls, op(rng));
            maybe(rng.chance(90), calls, Action::SetStream(origin));
        }
        // Fork and join, the forked stream waiting twice.
        1 => {
            maybe(rng.chance(90), calls, op(rng));
            maybe(rng.chance(90), calls, Action::Record(e_in));
            maybe(rng.chance(90), calls, Action::SetStream(side));
            maybe(rng.chance(90), calls, Action::Wait(e_in));
            maybe(rng.chance(90), calls, Action::Wait(e_in));
            maybe(rng.chance(90), calls, op(rng));
            maybe(rng.chance(90), calls, Action::Record(e_out));
            maybe(rng.chance(90), calls, Action::SetStream(origin));
            maybe(rng.chance(90), calls, Action::Wait(e_out));
        }
        // A conditional node in the capture.
        2 if offers.conditionals => {
            maybe(rng.chance(90), calls, op(rng));
            calls.push(conditional(rng, scope));
            maybe(rng.chance(90), calls, op(rng));
        }
        // Buffers the capture uses dropped and replaced meanwhile.
        3 => {
            let (dst, src) = operands(rng);
            calls.push(Action::Op {
                kind: OpKind::Axpy,
                dst,
                src,
                scalar: 2.0,
            });
            maybe(rng.chance(90), calls, Action::DropBuffer(src.slot));
            maybe(
                rng.chance(90),
                calls,
                Action::Alloc {
                    slot: dst.slot,
                    len: rng.pick(&LENGTHS),
                },
            );
            maybe(rng.chance(90), calls, op(rng));
        }
        // Nodes named for updates.
        _ => {
            let (y, x) = operands(rng);
            maybe(
                rng.chance(90),
                calls,
                Action::Kernel {
                    y,
                    x,
                    n: 4,
                    empty_grid: false,
                },
            );
            maybe(rng.chance(90), calls, Action::NoteNode);
            maybe(rng.chance(90), calls, op(rng));
            maybe(rng.chance(90), calls, Action::NoteNode);
        }
    }
    calls.push(Action::CaptureEnd(g));
    maybe(rng.chance(90), calls, Action::Replay(g));
    if rng.chance(50) {
        calls.push(Action::UpdateNode {
            g,
            node: rng.slot(NODES),
            index: rng.below(3) as u8,
            arg: arg(rng),
        });
        calls.push(Action::Replay(g));
    }
}
