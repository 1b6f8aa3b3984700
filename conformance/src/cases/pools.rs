//! §5.8: graph memory pools, observed through `memory_stats()` and `device_address()`.

use accel_graph_api::{AcceleratorGraph, Backend, DeviceBuffer, GraphOptions, MemoryStats, PoolId};

use crate::{
    Target,
    check::{CaseResult, Ctx, capture_add_one, ensure, expect_all, new_graph, replay_on},
};

/// Elements of the temporaries the cases allocate inside captures.
const TEMP_LEN: usize = 1024;

fn plain_bytes(s: &MemoryStats) -> usize {
    s.reserved_bytes - s.pool_reserved_bytes
}

/// Captures `x += tmp` with `tmp = 3` allocated (and dropped) inside the capture; returns the
/// temporary's device address.
fn capture_with_temp<B: Backend>(
    b: &B,
    stream: &B::Stream,
    g: &mut B::Graph,
    x: &B::Buffer<f32>,
    value: f32,
) -> Result<u64, String> {
    b.capture_on(stream, g, || {
        let tmp = b.alloc(TEMP_LEN)?;
        b.fill(&tmp, value)?;
        b.axpy(x, 1.0, &tmp)?;
        Ok(tmp.device_address())
    })
    .ctx("capture of tmp = alloc(); fill(tmp); x += tmp")
}

/// 5.08a: a temporary allocated inside a capture lands in the graph's private pool, not in
/// plain memory; the pool goes when its only graph is reset.
pub(crate) fn capture_allocates_from_pool<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; TEMP_LEN]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let before = b.memory_stats();
    let mut g = new_graph(b, GraphOptions::new())?;
    capture_with_temp(b, &stream, &mut g, &x, 3.0)?;
    let captured = b.memory_stats();
    ensure!(
        captured.pool_reserved_bytes >= before.pool_reserved_bytes + TEMP_LEN * 4,
        "a {TEMP_LEN}-element allocation inside the capture did not land in a pool: \
         before {before:?}, after {captured:?}"
    );
    ensure!(
        plain_bytes(&captured) == plain_bytes(&before),
        "the capture's allocation was a plain one: before {before:?}, after {captured:?}"
    );
    let pool = g.pool().ctx("pool()")?;
    ensure!(
        pool.is_private(),
        "a graph given no pool reports pool {pool}"
    );
    ensure!(
        captured.pools.len() == before.pools.len() + 1
            && captured.pool(pool).is_some_and(|p| p.graphs == 1)
            && before.pool(pool).is_none(),
        "the graph's private pool {pool} is not counted (held by one graph): before \
         {before:?}, after {captured:?}"
    );
    replay_on(b, &stream, &mut g)?;
    expect_all(
        b,
        &x,
        3.0,
        "replay of x += tmp (tmp filled with 3 in the graph)",
    )?;
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 6.0, "second replay")?;
    g.reset();
    let after = b.memory_stats();
    ensure!(
        after == before,
        "after reset() of the only graph of the pool, its memory is still held: \
         before {before:?}, after {after:?}"
    );
    Ok(())
}

/// 5.08b (`user_pool` false: `pool=g1.pool()`) and 5.08c (`user_pool`: a
/// `graph_pool_handle()` pool): the second graph's temporary reuses the first one's freed
/// block, the pool does not grow, and it goes only when both graphs are gone.
pub(crate) fn second_graph_reuses<B: Backend>(t: &Target<B>, user_pool: bool) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; TEMP_LEN]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let before = b.memory_stats();
    let handle = user_pool.then(|| b.graph_pool_handle());
    let first_options = match handle {
        Some(h) => GraphOptions::new().pool(h),
        None => GraphOptions::new(),
    };
    let mut g1 = new_graph(b, first_options)?;
    let address1 = capture_with_temp(b, &stream, &mut g1, &x, 2.0)?;
    let pool = g1.pool().ctx("g1.pool()")?;
    if let Some(h) = handle {
        ensure!(pool == h, "g1.pool() is {pool}, built with pool {h}");
    }
    let after_first = b.memory_stats();
    let mut g2 = new_graph(b, GraphOptions::new().pool(pool))?;
    let address2 = capture_with_temp(b, &stream, &mut g2, &x, 3.0)?;
    let after_second = b.memory_stats();
    ensure!(
        g2.pool().ctx("g2.pool()")? == pool,
        "g2 was given pool {pool} but reports {:?}",
        g2.pool()
    );
    ensure!(
        address2 == address1,
        "the second graph's temporary is at {address2:#x}, not at the first graph's \
         freed temporary {address1:#x}"
    );
    ensure!(
        after_second.pool_reserved_bytes == after_first.pool_reserved_bytes
            && after_second.pools.len() == after_first.pools.len(),
        "sharing the pool grew it: after g1 {after_first:?}, after g2 {after_second:?}"
    );
    // Replayed in capture order, graphs sharing a pool compute what they captured.
    replay_on(b, &stream, &mut g1)?;
    replay_on(b, &stream, &mut g2)?;
    expect_all(b, &x, 5.0, "x after replaying g1 (x += 2) then g2 (x += 3)")?;
    g1.reset();
    ensure!(
        b.memory_stats().pool_reserved_bytes == after_second.pool_reserved_bytes,
        "resetting g1 released memory g2 still uses: {:?}",
        b.memory_stats()
    );
    replay_on(b, &stream, &mut g2)?;
    expect_all(b, &x, 8.0, "x after replaying g2 alone")?;
    drop(g2);
    let after = b.memory_stats();
    ensure!(
        after == before,
        "with both graphs gone the pool is still held: before {before:?}, after {after:?}"
    );
    Ok(())
}

/// 5.08d: pool memory a graph holds stays while any graph holds the pool; once none does, the
/// block of a buffer allocated from the pool still stays while the buffer lives, and
/// everything returns when every graph and buffer let go.
pub(crate) fn pool_released_last<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    let before = b.memory_stats();
    let mut g1 = new_graph(b, GraphOptions::new())?;
    // The output is allocated inside the capture and kept: it belongs to the pool.
    let out = b
        .capture_on(&stream, &mut g1, || {
            let out = b.alloc(TEMP_LEN)?;
            b.fill(&out, 7.0)?;
            Ok(out)
        })
        .ctx("capture g1: out = alloc(); fill(out)")?;
    let pool = g1.pool().ctx("g1.pool()")?;
    let mut g2 = new_graph(b, GraphOptions::new().pool(pool))?;
    let y = b.alloc_from(&[0.0; TEMP_LEN]).ctx("alloc_from")?;
    capture_with_temp(b, &stream, &mut g2, &y, 1.0)?;
    let held = b.memory_stats();
    ensure!(
        held.pool_reserved_bytes > before.pool_reserved_bytes,
        "nothing reserved in the pool: {held:?}"
    );
    replay_on(b, &stream, &mut g1)?;
    expect_all(b, &out, 7.0, "the pool buffer after replay")?;
    g1.reset();
    ensure!(
        b.memory_stats().pool_reserved_bytes == held.pool_reserved_bytes,
        "reset of g1 released pool memory while g2 and a buffer hold it: {:?}",
        b.memory_stats()
    );
    drop(g2);
    // No graph holds the pool any more: its free blocks may go back to the device, but the
    // block of the buffer that lives stays.
    let orphaned = b.memory_stats();
    ensure!(
        orphaned.pool(pool).is_some_and(|p| p.graphs == 0
            && p.active_bytes >= TEMP_LEN * 4
            && p.reserved_bytes >= p.active_bytes),
        "with g1 reset and g2 dropped, pool {pool} must still hold the block of the live \
         buffer allocated from it: {orphaned:?}"
    );
    expect_all(b, &out, 7.0, "the pool buffer outlives its graphs")?;
    drop(out);
    drop(y);
    let after = b.memory_stats();
    ensure!(
        after == before,
        "with every graph and buffer gone the pool memory is still held: \
         before {before:?}, after {after:?}"
    );
    Ok(())
}

/// 5.08e: `graph_pool_handle()` ids are unique user ids, private pool ids are unique too, and
/// `pool()` reports the pool a graph was given.
pub(crate) fn pool_ids<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let handles: Vec<PoolId> = (0..64).map(|_| b.graph_pool_handle()).collect();
    for (i, h) in handles.iter().enumerate() {
        ensure!(
            h.is_user(),
            "graph_pool_handle() returned {h}, not a (0, n) user id"
        );
        ensure!(
            !handles[..i].contains(h),
            "graph_pool_handle() returned {h} twice"
        );
    }
    let x = b.alloc_from(&[0.0; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut private = Vec::new();
    for _ in 0..3 {
        let mut g = new_graph(b, GraphOptions::new())?;
        capture_add_one(b, &stream, &mut g, &x)?;
        let pool = g.pool().ctx("pool()")?;
        ensure!(pool.is_private(), "a graph given no pool reports {pool}");
        ensure!(
            !private.contains(&pool) && !handles.contains(&pool),
            "private pool id {pool} is not unique"
        );
        ensure!(
            g.pool().ctx("pool()")? == pool,
            "pool() changed between two calls"
        );
        private.push(pool);
    }
    let mut g = new_graph(b, GraphOptions::new().pool(handles[7]))?;
    capture_add_one(b, &stream, &mut g, &x)?;
    ensure!(
        g.pool().ctx("pool()")? == handles[7],
        "a graph given pool {} reports {:?}",
        handles[7],
        g.pool()
    );
    Ok(())
}

/// Elements of each op's output in 5.08f, and the ops of its forward.
const FORWARD_LEN: usize = 256;
const FORWARD_OPS: usize = 128;

/// 5.08f's forward: the way allocating frameworks (candle, cudarc code) compute — a copy of
/// the input into a fresh buffer, then `FORWARD_OPS` steps, each allocating its output and
/// dropping its input. The result outlives the call.
fn allocating_forward<B: Backend>(
    b: &B,
    x: &B::Buffer<f32>,
) -> accel_graph_api::Result<B::Buffer<f32>> {
    let mut current = b.alloc::<f32>(FORWARD_LEN)?;
    b.copy(&current, x)?;
    for i in 0..FORWARD_OPS {
        let next = b.alloc::<f32>(FORWARD_LEN)?;
        b.copy(&next, &current)?;
        b.scale(&next, if i % 2 == 0 { 0.5 } else { 1.75 })?;
        b.add_scalar(&next, (i % 7) as f32)?;
        current = next;
    }
    Ok(current)
}

/// 5.08f: a forward that allocates every op's output inside the capture and drops its inputs
/// (129 allocations and 128 frees per graph), its result outliving the capture. Replays equal
/// the eager forward bit for bit, the result keeps its address and holds each replay's answer,
/// memory stays flat over the replays (ten per repetition of the suite), and the result
/// dropped between replays leaves the graph replaying and the memory returned at its reset.
pub(crate) fn per_op_allocations<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let host: Vec<f32> = (0..FORWARD_LEN).map(|i| (i % 97) as f32 * 0.25).collect();
    let x = b.alloc_from(&host).ctx("alloc_from")?;
    let eager = allocating_forward(b, &x).ctx("eager forward")?;
    let eager = b.download(&eager).ctx("download")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let before = b.memory_stats();
    let mut g = new_graph(b, GraphOptions::new())?;
    let result = b
        .capture_on(&stream, &mut g, || allocating_forward(b, &x))
        .ctx("capture of the allocating forward")?;
    let address = result.device_address();
    let replays = crate::SuiteConfig::from_env().repetitions.max(1) * 10;
    let mut after_first = None;
    for r in 0..replays {
        replay_on(b, &stream, &mut g)?;
        if r == 0 || r + 1 == replays {
            b.synchronize().ctx("synchronize")?;
            let got = b.download(&result).ctx("download")?;
            ensure!(
                got.iter()
                    .map(|v| v.to_bits())
                    .eq(eager.iter().map(|v| v.to_bits())),
                "replay {} of the allocating forward differs from the eager forward",
                r + 1
            );
        }
        if r == 0 {
            after_first = Some(b.memory_stats());
        }
    }
    let after = b.memory_stats();
    ensure!(
        Some(&after) == after_first.as_ref(),
        "memory grew over {replays} replays: after the first {after_first:?}, after the last \
         {after:?}"
    );
    ensure!(
        result.device_address() == address,
        "the result moved over the replays"
    );
    drop(result);
    replay_on(b, &stream, &mut g)?;
    replay_on(b, &stream, &mut g)?;
    b.synchronize().ctx("synchronize")?;
    g.reset();
    let end = b.memory_stats();
    ensure!(
        end == before,
        "after the result was dropped and the graph reset, memory is still held: before the \
         capture {before:?}, after {end:?}"
    );
    Ok(())
}
