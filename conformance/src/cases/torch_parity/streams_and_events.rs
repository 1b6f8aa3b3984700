//! Several streams and events around a capture: `test_graph_debugdump`, `test_graph_timing`,
//! `test_graph_record_stream`.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, EventOptions, GraphOptions, MemoryStats,
    backend_kit::pools::POOL_GRANULARITY,
};

use super::{
    pools_and_memory::BIG,
    support::{Spin, add, ambient, clone_of, full, wait_stream},
};
use crate::Target;
use crate::check::{CaseResult, Ctx, ensure, new_graph, on_stream};

/// A `torch.cuda.CUDAGraph()`: `capture_begin()` and `torch.cuda.graph(g)` default to mode
/// `"global"`.
fn cuda_graph<B: Backend>(b: &B) -> Result<B::Graph, String> {
    new_graph(
        b,
        GraphOptions::new().capture_error_mode(CaptureErrorMode::Global),
    )
}

/// 11.07: with debug mode enabled before capture, a capture begun on `s0` computes `z = x +
/// y`, forks `s1` into it for `z + y`, joins back and ends; after synchronizing, `debug_dump`
/// writes the two-stream graph to a `.dot` file (PyTorch asserts only that it raises
/// nothing; the port also checks the file is a DOT digraph).
pub(crate) fn graph_debugdump<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (ambient_stream, _current) = ambient(b)?;
    b.empty_cache().ctx("empty_cache")?;
    // `randn` and `rand_like`: any values do.
    let x = full(b, BIG, 0.5).ctx("x = randn(10240000)")?;
    let y = full(b, BIG, 0.25).ctx("y = rand_like(x)")?;
    let mut g = cuda_graph(b)?;
    g.enable_debug_mode();
    let s0 = b.new_stream().ctx("new_stream")?;
    let s1 = b.new_stream().ctx("new_stream")?;
    wait_stream(b, &s0, &ambient_stream).ctx("s0.wait_stream(ambient)")?;
    let z = {
        let _on_s0 = on_stream(b, &s0)?;
        g.capture_begin().ctx("capture_begin on s0")?;
        let z = add(b, &x, &y).ctx("z = x + y")?;
        {
            let _on_s1 = on_stream(b, &s1)?;
            wait_stream(b, &s1, &s0).ctx("s1.wait_stream(s0)")?;
            drop(add(b, &z, &y).ctx("z + y on s1")?);
        }
        wait_stream(b, &s0, &s1).ctx("s0.wait_stream(s1)")?;
        g.capture_end().ctx("capture_end")?;
        z
    };
    b.stream_synchronize(&s0).ctx("s0.synchronize()")?;
    b.synchronize().ctx("synchronize")?;
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let path = dir.path().join("out_multi_stream.dot");
    g.debug_dump(&path).ctx("debug_dump")?;
    let dot = std::fs::read_to_string(&path).map_err(|e| format!("reading the dump: {e}"))?;
    ensure!(
        dot.contains("digraph"),
        "debug_dump did not write a DOT digraph: {dot:?}"
    );
    drop(z);
    Ok(())
}

/// 11.08: two timing events made `external` are recorded around `z = x + y` inside a
/// capture, so each replay records them; after a replay, `elapsed_time(start, end) > 0`.
pub(crate) fn graph_timing<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    b.empty_cache().ctx("empty_cache")?;
    let x = full(b, BIG, 0.5).ctx("x = randn(10240000)")?;
    let y = full(b, BIG, 0.25).ctx("y = rand_like(x)")?;
    let mut g = cuda_graph(b)?;
    let timing = EventOptions::new().enable_timing(true).external(true);
    let start = b
        .new_event_with(timing)
        .ctx("Event(enable_timing=True, external=True)")?;
    let end = b
        .new_event_with(timing)
        .ctx("Event(enable_timing=True, external=True)")?;
    // `with torch.cuda.graph(g):` captures on a side stream.
    let capture_stream = b.new_stream().ctx("new_stream")?;
    let z = b
        .capture_on(&capture_stream, &mut g, || {
            b.record_event(&start)?;
            let z = add(b, &x, &y)?;
            b.record_event(&end)?;
            Ok(z)
        })
        .ctx("capture of start.record(); z = x + y; end.record()")?;
    b.synchronize().ctx("synchronize")?;
    g.replay().ctx("replay")?;
    b.synchronize().ctx("synchronize")?;
    let ms = b
        .elapsed_time(&start, &end)
        .ctx("start.elapsed_time(end)")?;
    // A NaN is not positive either.
    let positive = ms > 0.0;
    ensure!(
        positive,
        "elapsed_time between the replayed external events is {ms} ms, expected > 0"
    );
    drop(z);
    Ok(())
}

/// Ops of the stand-in for `torch.cuda._sleep(FIFTY_MIL_CYCLES)`.
const SLEEP_SPIN_OPS: usize = 128;

/// Bytes of a 3-element buffer: `zeros((3,))`.
const THREE_FLOATS: usize = 3 * 4;

/// 11.19: memory used across streams is reclaimed only after those streams pass the point of
/// its drop, and a capture does not try to reclaim it early. `potential_problem` is
/// `record_stream`ed onto `s0`, which is kept busy (a spin standing in for `_sleep`) before
/// it fills the buffer, and the buffer is dropped. A capture on `s1` then allocates (`b =
/// a.clone()`), forks `s2` in, which fills `b`, `record_stream`s it onto `s2` *during the
/// capture* and drops it, joins back and ends. PyTorch passes when nothing raises and
/// nothing leaks; the port checks both, and that the deferred blocks are accounted as the
/// `MemoryStats` documentation says (held: reserved, once; dropped: not allocated).
pub(crate) fn graph_record_stream<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    b.empty_cache().ctx("empty_cache")?;
    let spin = Spin::new(b, SLEEP_SPIN_OPS)?;
    let baseline = b.memory_stats();
    let potential_problem = full(b, 3, 0.0).ctx("potential_problem = zeros(3)")?;
    let a = full(b, 3, 0.0).ctx("a = zeros(3)")?;
    let s0 = b.new_stream().ctx("new_stream")?;
    let s1 = b.new_stream().ctx("new_stream")?;
    let s2 = b.new_stream().ctx("new_stream")?;
    let mut g = cuda_graph(b)?;
    b.synchronize().ctx("synchronize")?;
    {
        let _on_s0 = on_stream(b, &s0)?;
        b.record_stream(&potential_problem, &s0)
            .ctx("potential_problem.record_stream(s0)")?;
        spin.run(b)
            .ctx("the spin standing in for _sleep(FIFTY_MIL_CYCLES)")?;
        b.fill(&potential_problem, 1.0)
            .ctx("potential_problem.fill_(1.0) on s0")?;
    }
    // Accounting failures are reported at the end, once the protocol ran to its end: a
    // failure must not leave a capture or deferred frees behind for the next case.
    let mut accounting = Vec::new();
    let before_drop = b.memory_stats();
    drop(potential_problem);
    // Freed at once if s0 is done already (always on the mock), held until it is otherwise.
    accounting.extend(
        expect_dropped(
            &before_drop,
            &b.memory_stats(),
            THREE_FLOATS,
            "potential_problem dropped while s0 may still use it",
        )
        .err(),
    );

    let before_capture = b.memory_stats();
    {
        let _on_s1 = on_stream(b, &s1)?;
        g.capture_begin().ctx("capture_begin on s1")?;
        // An allocation during the capture while potential_problem's free may be pending: it
        // must not query that free's event (illegal during a capture).
        let copy = clone_of(b, &a).ctx("b = a.clone()")?;
        wait_stream(b, &s2, &s1).ctx("s2.wait_stream(s1)")?;
        {
            let _on_s2 = on_stream(b, &s2)?;
            b.fill(&copy, 1.0).ctx("b.fill_(1.0) on s2")?;
            b.record_stream(&copy, &s2)
                .ctx("b.record_stream(s2) during the capture")?;
            let held = b.memory_stats();
            drop(copy);
            // s2 is capturing: the block waits for the capture's end, held.
            accounting.extend(
                expect_dropped(
                    &held,
                    &b.memory_stats(),
                    THREE_FLOATS.next_multiple_of(POOL_GRANULARITY),
                    "b dropped during the capture after record_stream(s2)",
                )
                .err(),
            );
        }
        wait_stream(b, &s1, &s2).ctx("s1.wait_stream(s2)")?;
        g.capture_end().ctx("capture_end")?;
    }
    let pool = g.pool().ctx("pool()")?;
    b.synchronize().ctx("synchronize")?;
    // The dummy allocation that makes PyTorch's allocator process the deferred frees.
    drop(full(b, 3, 0.0).ctx("zeros(3)")?);
    // Settle any end-of-life event recorded by that processing.
    b.synchronize().ctx("synchronize")?;
    let settled = b.memory_stats();
    let pool_stats = settled.pool(pool);
    ensure!(
        pool_stats.is_some_and(|p| p.active_bytes == 0 && p.graphs == 1),
        "b's block should be back in the graph's pool {pool}, free: {pool_stats:?} \
         (before the capture {before_capture:?}, now {settled:?})"
    );
    ensure!(
        settled.allocated_bytes == baseline.allocated_bytes + THREE_FLOATS
            && settled.reserved_bytes
                == baseline.reserved_bytes
                    + THREE_FLOATS
                    + pool_stats.map_or(0, |p| p.reserved_bytes),
        "after the streams finished, only a ({THREE_FLOATS} B) and the graph's pool should be \
         held beyond the baseline: potential_problem's block must be gone. Baseline \
         {baseline:?}, now {settled:?}"
    );
    drop((g, a, spin));
    ensure!(accounting.is_empty(), "{}", accounting.join("\n"));
    Ok(())
}

/// After a buffer whose block has `bytes` bytes was dropped while streams may still use it: it is no longer allocated (`MemoryStats`
/// counts as allocated the buffers handed out and not dropped), and it is either gone or
/// still reserved — counted once: reserved bytes are what is held from the device.
fn expect_dropped(
    before: &MemoryStats,
    after: &MemoryStats,
    bytes: usize,
    what: &str,
) -> CaseResult {
    let mut wrong = Vec::new();
    let freed = before.allocated_bytes.checked_sub(after.allocated_bytes);
    let allocated_ok = freed == Some(bytes) && after.live_buffers + 1 == before.live_buffers;
    if !allocated_ok {
        wrong.push("the dropped buffer still counts as allocated".to_owned());
    }
    // A block still held keeps reserved unchanged; one gone takes its bytes with it.
    let reserved_ok = after.reserved_bytes == before.reserved_bytes
        || after.reserved_bytes + bytes == before.reserved_bytes;
    if !reserved_ok {
        wrong.push(format!(
            "reserved bytes went from {} to {}: the block is either still held (unchanged) or \
             gone ({bytes} B less), nothing else",
            before.reserved_bytes, after.reserved_bytes
        ));
    }
    ensure!(
        wrong.is_empty(),
        "{what}: {}; before {before:?}, after {after:?}",
        wrong.join("; ")
    );
    Ok(())
}
