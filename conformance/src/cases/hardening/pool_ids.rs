//! 10.05 – 10.06: pool ids. `(0, 0)` means "no pool" however it is given, and an id the
//! instance never issued is refused, even one it *would* issue next (stricter than PyTorch: a
//! forged id could make unrelated graphs share memory).

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, PoolId};

use crate::{
    Target,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_err, new_graph, replay_on,
    },
};

/// Elements of the temporary each capture allocates from its pool.
const TEMP_LEN: usize = 256;

/// Captures `tmp = 1 (from the pool); x += tmp` into `g` on `stream`; returns `g.pool()`.
fn capture_with_temp<B: Backend>(
    b: &B,
    stream: &B::Stream,
    g: &mut B::Graph,
    x: &B::Buffer<f32>,
) -> Result<PoolId, String> {
    b.capture_on(stream, g, || {
        let tmp = b.alloc(TEMP_LEN)?;
        b.fill(&tmp, 1.0)?;
        b.axpy(x, 1.0, &tmp)
    })
    .ctx("capture of tmp = 1; x += tmp")?;
    g.pool().ctx("pool()")
}

/// 10.05: a graph whose options hold `Some(PoolId::NONE)` — set through the public field,
/// bypassing the builder — gets a private pool of its own: `pool()` is a private id, not
/// `(0, 0)`, and two such graphs do not share a pool (they used to share one called
/// `(0, 0)`). A graph given `pool=g.pool()` does share `g`'s pool. The three replay what they
/// captured.
pub(super) fn none_through_the_field<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; TEMP_LEN]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut none = GraphOptions::new();
    none.pool = Some(PoolId::NONE);
    let mut g1 = new_graph(b, none)?;
    let mut g2 = new_graph(b, none)?;
    let p1 = capture_with_temp(b, &stream, &mut g1, &x)?;
    let p2 = capture_with_temp(b, &stream, &mut g2, &x)?;
    for (name, pool) in [("g1", p1), ("g2", p2)] {
        ensure!(
            pool.is_private(),
            "{name}, given pool (0, 0) through the field, reports pool {pool}: expected a \
             private (n, 0) id"
        );
    }
    ensure!(
        p1 != p2,
        "two graphs given pool (0, 0) share pool {p1}: each must get a private pool"
    );
    let pools = b.memory_stats().pools;
    ensure!(
        pools.iter().any(|p| p.pool == p1) && pools.iter().any(|p| p.pool == p2),
        "memory_stats() does not list both private pools {p1} and {p2}: {pools:?}"
    );
    let mut shared = GraphOptions::new();
    shared.pool = Some(p1);
    let mut g3 = new_graph(b, shared)?;
    let p3 = capture_with_temp(b, &stream, &mut g3, &x)?;
    ensure!(
        p3 == p1,
        "a graph given pool=g1.pool() ({p1}) reports pool {p3}"
    );
    // Graphs sharing a pool replay in capture order.
    for g in [&mut g1, &mut g2, &mut g3] {
        replay_on(b, &stream, g)?;
    }
    expect_all(
        b,
        &x,
        3.0,
        "one replay of each of the three graphs (x += 1 each)",
    )
}

/// `graph(options)` with `pool` set (by the builder and through the field) is `InvalidPoolId`.
fn refused<B: Backend>(b: &B, pool: PoolId, what: &str) -> CaseResult {
    expect_err!(
        b.graph(GraphOptions::new().pool(pool)),
        GraphError::InvalidPoolId { .. },
        format!("graph(pool={pool}), {what}")
    );
    let mut options = GraphOptions::new();
    options.pool = Some(pool);
    expect_err!(
        b.graph(options),
        GraphError::InvalidPoolId { .. },
        format!("graph(options with the field pool={pool}), {what}")
    );
    Ok(())
}

/// 10.06: ids this instance never issued are `InvalidPoolId`, however plausible: the private
/// id right after a graph's `(a, 0)` — the one the instance would issue next — and the user id
/// after a `graph_pool_handle()`; and an issued id turned into the other kind (`(a, 0)` given
/// as `(0, a)`). The private pool the next graph gets is its own.
pub(super) fn forged_ids<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    capture_add_one(b, &stream, &mut g, &x)?;
    let own = g.pool().ctx("pool()")?;
    ensure!(own.is_private(), "a graph given no pool reports {own}");
    let next_private = PoolId(own.0.checked_add(1).ok_or("private id at u64::MAX")?, 0);
    refused(b, next_private, "the private id after the graph's own")?;
    refused(
        b,
        PoolId(0, own.0),
        "the graph's private id given as a user id",
    )?;
    let handle = b.graph_pool_handle();
    let next_user = PoolId(0, handle.1.checked_add(1).ok_or("user id at u64::MAX")?);
    refused(b, next_user, "the user id after a graph_pool_handle()")?;
    refused(b, PoolId(handle.1, 0), "a user id given as a private id")?;
    // The ids really issued are still accepted.
    for issued in [own, handle] {
        drop(new_graph(b, GraphOptions::new().pool(issued))?);
    }
    // A graph given no pool gets a private pool no other graph has (it may well be the id that
    // was forged above: that the forged id was refused is what keeps the pool its own).
    let mut next = new_graph(b, GraphOptions::new())?;
    capture_add_one(b, &stream, &mut next, &x)?;
    let fresh = next.pool().ctx("pool()")?;
    ensure!(
        fresh.is_private() && fresh != own,
        "the next graph's pool is {fresh} (the first graph's is {own})"
    );
    println!(
        "10.06: the next graph's private pool is {fresh}; the forged ids were {next_private} \
         and {next_user}"
    );
    replay_on(b, &stream, &mut g)?;
    replay_on(b, &stream, &mut next)?;
    expect_all(b, &x, 2.0, "one replay of each graph")
}
