//! 12.02: the stream-order rule keeps PyTorch's reuse on one stream — captures into a shared
//! pool, one after the other on the same stream, reuse the blocks the earlier ones freed.

use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, Result};

use super::order_after;
use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, new_graph, on_stream},
};

/// Capture/drop cycles.
const CYCLES: usize = 1000;
/// Elements of each temporary.
const ELEMENTS: usize = 4096;
/// Every this many cycles the graph is replayed and its result checked.
const CHECK_EVERY: usize = 250;

/// One cycle's body, captured on `main`: two temporaries one after the other (the second may
/// take the first's block), their sum in `out`; with `forked`, a third temporary on `side`,
/// forked from `main` and joined back, copied to `side_out`.
#[allow(clippy::too_many_arguments)]
fn body<B: Backend>(
    b: &B,
    main: &B::Stream,
    side: &B::Stream,
    events: Option<(&B::Event, &B::Event)>,
    out: &B::Buffer<f32>,
    side_out: &B::Buffer<f32>,
    value: f32,
) -> Result<()> {
    if let Some((fork, _)) = events {
        order_after(b, side, main, fork)?;
        let _side = b.use_stream(side)?;
        let u = b.alloc(ELEMENTS)?;
        b.fill(&u, value)?;
        b.copy(side_out, &u)?;
    }
    let first = b.alloc(ELEMENTS)?;
    b.fill(&first, value)?;
    b.copy(out, &first)?;
    drop(first);
    let second = b.alloc(ELEMENTS)?;
    b.fill(&second, 1.0)?;
    b.axpy(out, 1.0, &second)?;
    if let Some((_, join)) = events {
        order_after(b, main, side, join)?;
    }
    Ok(())
}

/// 12.02a / 12.02b: a graph holds a shared pool; 1000 times, another graph captures into the
/// pool on the same stream (with `forked`, forking a side stream and joining it back),
/// allocating and dropping temporaries, and is dropped. After the first cycle the pool's
/// reserved bytes never change: each capture reuses the blocks the one before freed on the
/// same streams. Every 250 cycles the graph replays its values.
pub(super) fn no_growth<B: Backend>(t: &Target<B>, forked: bool) -> CaseResult {
    let b = t.backend();
    let main = b.new_stream().ctx("new_stream")?;
    let side = b.new_stream().ctx("new_stream")?;
    let (fork, join) = (
        b.new_event().ctx("new_event")?,
        b.new_event().ctx("new_event")?,
    );
    let events = forked.then_some((&fork, &join));
    let out = b.alloc_from(&[0.0; ELEMENTS]).ctx("alloc out")?;
    let side_out = b.alloc_from(&[0.0; ELEMENTS]).ctx("alloc side_out")?;
    let pool = b.graph_pool_handle();
    // Holds the pool for the whole run, so its free blocks stay cached between cycles.
    let mut keeper = new_graph(b, GraphOptions::new().pool(pool))?;
    b.capture_on(&main, &mut keeper, || b.alloc::<f32>(1).map(drop))
        .ctx("capture of the graph holding the pool")?;
    let mut reserved_after_first = None;
    for cycle in 0..CYCLES {
        let value = (cycle % 13) as f32;
        let mut g = new_graph(b, GraphOptions::new().pool(pool))?;
        b.capture_on(&main, &mut g, || {
            body(b, &main, &side, events, &out, &side_out, value)
        })
        .ctx(&format!("cycle {cycle}: capture"))?;
        if cycle % CHECK_EVERY == 0 {
            {
                let _main = on_stream(b, &main)?;
                g.replay().ctx("replay")?;
            }
            expect_all(b, &out, value + 1.0, &format!("cycle {cycle}: out"))?;
            if forked {
                expect_all(b, &side_out, value, &format!("cycle {cycle}: side_out"))?;
            }
        }
        drop(g);
        let stats = b.memory_stats();
        let reserved = stats.pool(pool).map_or(0, |p| p.reserved_bytes);
        match reserved_after_first {
            None => reserved_after_first = Some(reserved),
            Some(first) => ensure!(
                reserved == first,
                "cycle {cycle}: the pool holds {reserved} bytes, {first} after the first cycle: \
                 a capture on the same stream did not reuse the blocks the previous one freed"
            ),
        }
    }
    println!(
        "    {CYCLES} capture/drop cycles into one pool{}: {} bytes reserved throughout",
        if forked {
            " (forking a side stream)"
        } else {
            ""
        },
        reserved_after_first.unwrap_or(0)
    );
    Ok(())
}
