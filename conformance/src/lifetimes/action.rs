//! The actions of a buffer-lifetime program, and how random programs are drawn.

use proptest::{collection::vec, prelude::*};

/// Buffer slots of a program.
pub(crate) const BUFFERS: u8 = 6;
/// Graph slots.
pub(crate) const GRAPHS: u8 = 3;
/// Pool-handle slots.
pub(crate) const HANDLES: u8 = 2;
/// Buffer lengths: 7 and 64 elements round to the same 512-byte pool block, 130 to 1 KiB,
/// 1000 to 4 KiB, so pool blocks are reused across lengths (a smaller buffer on a larger
/// block) as well as at equal lengths.
pub(crate) const LENGTHS: [usize; 4] = [7, 64, 130, 1000];
/// Segments of a program (each one action, or a capture episode of a few).
pub(crate) const MAX_SEGMENTS: usize = 10;

/// Where a new graph's pool comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolChoice {
    /// A private pool of its own.
    Own,
    /// The user pool in a handle slot.
    Handle(u8),
    /// The pool of the graph in a graph slot (`pool = g.pool()`).
    Graph(u8),
}

/// One step of a program. Its small numbers *choose* among the objects that fit the action at
/// its point (the `k`-th live buffer, the `k`-th captured graph, modulo how many there are),
/// so almost every action does something; one with no candidate (or illegal under the
/// program's contract) is skipped, so any sequence is a program and shrinking never produces
/// an invalid one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Action {
    /// A new buffer in an empty slot: plain outside a capture, from the capture's pool inside.
    Alloc { slot: u8, len: usize },
    /// Drops a buffer (when the contract allows it).
    Drop { slot: u8 },
    /// `x = value`.
    Fill { slot: u8, value: f32 },
    /// `x += c`.
    AddScalar { slot: u8, c: f32 },
    /// `x *= a`.
    Scale { slot: u8, a: f32 },
    /// `y += a * x` (equal lengths).
    Axpy { y: u8, a: f32, x: u8 },
    /// `dst = src` (equal lengths).
    Copy { dst: u8, src: u8 },
    /// Begins capturing a graph that holds no capture (no other capture open), making a new
    /// one with `pool` in a free slot first when `fresh` or when there is none to reuse.
    Begin {
        g: u8,
        fresh: bool,
        pool: PoolChoice,
    },
    /// Ends the open capture.
    End,
    /// Replays a captured graph (no capture open).
    Replay { g: u8 },
    /// Resets a graph (aborting its capture if it is the one open).
    Reset { g: u8 },
    /// Drops a graph.
    DropGraph { g: u8 },
    /// A new user pool handle.
    NewHandle { p: u8 },
    /// Downloads a buffer and compares it with the model (no capture open).
    Check { slot: u8 },
    /// `empty_cache()`.
    EmptyCache,
}

fn slot(n: u8) -> impl Strategy<Value = u8> {
    0..n
}

/// Values that keep arithmetic exact and finite over a program (no NaN, whose bit patterns
/// differ between devices; no infinity).
fn small() -> impl Strategy<Value = f32> {
    (-8i8..=8).prop_map(|v| f32::from(v) / 4.0)
}

fn factor() -> impl Strategy<Value = f32> {
    prop::sample::select(vec![-1.0f32, 0.5, 1.0, 2.0])
}

fn action() -> impl Strategy<Value = Action> {
    let pool = prop_oneof![
        3 => Just(PoolChoice::Own),
        2 => slot(HANDLES).prop_map(PoolChoice::Handle),
        2 => slot(GRAPHS).prop_map(PoolChoice::Graph),
    ];
    prop_oneof![
        6 => (slot(BUFFERS), prop::sample::select(LENGTHS.to_vec()))
            .prop_map(|(slot, len)| Action::Alloc { slot, len }),
        4 => slot(BUFFERS).prop_map(|slot| Action::Drop { slot }),
        3 => (slot(BUFFERS), small()).prop_map(|(slot, value)| Action::Fill { slot, value }),
        3 => (slot(BUFFERS), small()).prop_map(|(slot, c)| Action::AddScalar { slot, c }),
        2 => (slot(BUFFERS), factor()).prop_map(|(slot, a)| Action::Scale { slot, a }),
        3 => (slot(BUFFERS), factor(), slot(BUFFERS)).prop_map(|(y, a, x)| Action::Axpy { y, a, x }),
        3 => (slot(BUFFERS), slot(BUFFERS)).prop_map(|(dst, src)| Action::Copy { dst, src }),
        5 => (slot(GRAPHS), any::<bool>(), pool).prop_map(|(g, fresh, pool)| Action::Begin { g, fresh, pool }),
        5 => Just(Action::End),
        5 => slot(GRAPHS).prop_map(|g| Action::Replay { g }),
        2 => slot(GRAPHS).prop_map(|g| Action::Reset { g }),
        2 => slot(GRAPHS).prop_map(|g| Action::DropGraph { g }),
        1 => slot(HANDLES).prop_map(|p| Action::NewHandle { p }),
        4 => slot(BUFFERS).prop_map(|slot| Action::Check { slot }),
        1 => Just(Action::EmptyCache),
    ]
}

/// A capture episode: begin, a body of work (allocations from the capture's pool, ops,
/// drops — of buffers the capture used too), end, then a few replays.
fn episode() -> impl Strategy<Value = Vec<Action>> {
    let pool = prop_oneof![
        2 => Just(PoolChoice::Own),
        1 => slot(HANDLES).prop_map(PoolChoice::Handle),
        1 => slot(GRAPHS).prop_map(PoolChoice::Graph),
    ];
    (
        (slot(GRAPHS), any::<bool>(), pool),
        vec(action(), 1..=6),
        vec(slot(GRAPHS), 0..=3),
    )
        .prop_map(|((g, fresh, pool), body, replays)| {
            let mut actions = vec![Action::Begin { g, fresh, pool }];
            actions.extend(body);
            actions.push(Action::End);
            actions.extend(replays.into_iter().map(|g| Action::Replay { g }));
            actions
        })
}

/// Random programs: up to [`MAX_SEGMENTS`] segments, each a single action or a capture
/// episode, flattened.
pub(crate) fn program() -> impl Strategy<Value = Vec<Action>> {
    let segment = prop_oneof![
        3 => action().prop_map(|a| vec![a]),
        2 => episode(),
    ];
    vec(segment, 1..=MAX_SEGMENTS).prop_map(|segments| segments.concat())
}
