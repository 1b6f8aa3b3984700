//! §9: memory-safe replay. A graph keeps alive every block its captured work uses until it is
//! reset or dropped, so safe code cannot make a replay touch freed memory; a pool block freed
//! into its pool stays there (never handed to an ordinary allocation) while a graph that
//! recorded work on it lives; memory returns when the last holder lets go. And the same under
//! concurrency, under failure, and for random programs against a reference model.

use std::time::Duration;

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, DeviceBuffer, GraphError, GraphOptions,
};

use crate::{
    Case, Target,
    case::requirements::none,
    check::{CaseResult, Ctx, ensure, expect_all, new_graph, on_stream, read},
    config::SuiteConfig,
    lifetimes::{self, Contract},
    stress::{StressConfig, stress},
};

const SECTION: &str = "9 memory-safe replay";

/// The section's cases.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "9.01 drop then replay: a captured buffer dropped before replay leaves every other buffer unchanged",
            SECTION,
            none,
            drop_then_replay,
        ),
        Case::new(
            "9.02 replay after every captured buffer was dropped gives the same result as before",
            SECTION,
            none,
            same_result_after_drop,
        ),
        Case::new(
            "9.03 a buffer held by several graphs goes back only after the last one is reset",
            SECTION,
            none,
            held_by_several_graphs,
        ),
        Case::new(
            "9.04 shared pool: dropped pool buffers stay in the pool while a graph uses them",
            SECTION,
            none,
            shared_pool_keep_alive,
        ),
        Case::new(
            "9.05 a pool block freed inside another graph's capture is never handed to a plain allocation",
            SECTION,
            none,
            pool_block_freed_in_capture,
        ),
        Case::new(
            "9.06 stress: threads capturing and replaying in every mode while others make unsafe calls",
            SECTION,
            none,
            concurrency_stress,
        ),
        Case::new(
            "9.07 out of memory inside a capture: typed, the capture discarded or still endable, the stream usable",
            SECTION,
            none,
            out_of_memory_in_capture,
        ),
        Case::new(
            "9.08 graphs and buffers dropped on other threads, backend handles dropped first: nothing leaks",
            SECTION,
            none,
            drop_orders,
        ),
        Case::new(
            "9.09 random buffer lifetimes, PyTorch's contract, against the reference model (child processes)",
            SECTION,
            none,
            |t| lifetimes_case(t, Contract::PyTorch),
        ),
        Case::new(
            "9.10 random buffer lifetimes, any handle dropped at any time, against the reference model (child processes)",
            SECTION,
            none,
            |t| lifetimes_case(t, Contract::AnyDrop),
        ),
        Case::new(
            "9.11 memory_stats and memory_snapshot show graph-held blocks; empty_cache keeps what is in use",
            SECTION,
            none,
            stats_and_snapshot,
        ),
    ])
}

/// Issue scenario: x (64 Ki floats) captured as `x += 1`, x dropped, eight fresh buffers
/// filled with 7.0, replay: the fresh buffers must be untouched (a freed-and-reused block
/// would take the write). Repeated, then memory must be back to its baseline after reset.
fn drop_then_replay<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let repetitions = SuiteConfig::from_env().repetitions;
    let baseline = b.memory_stats();
    let stream = b.new_stream().ctx("new_stream")?;
    for rep in 0..repetitions {
        let x = b.alloc_from(&vec![0.0; 64 * 1024]).ctx("alloc x")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        b.capture_on(&stream, &mut g, || b.add_scalar(&x, 1.0))
            .ctx("capture x += 1")?;
        drop(x);
        let fresh: Vec<B::Buffer<f32>> = (0..8)
            .map(|_| b.alloc_from(&vec![7.0; 64 * 1024]))
            .collect::<Result<_, _>>()
            .ctx("alloc fresh buffers")?;
        {
            let _s = on_stream(b, &stream)?;
            g.replay().ctx("replay after x was dropped")?;
        }
        for (i, f) in fresh.iter().enumerate() {
            expect_all(
                b,
                f,
                7.0,
                &format!("repetition {rep}: fresh buffer {i} after the replay"),
            )?;
        }
        g.reset();
        drop(fresh);
        let after = b.memory_stats();
        ensure!(
            after == baseline,
            "repetition {rep}: memory not back to baseline after reset: before {baseline:?}, after {after:?}"
        );
    }
    println!(
        "    drop-then-replay: {repetitions} repetitions, 8 fresh buffers of 64Ki floats each \
         unchanged by every replay, memory_stats back to baseline after every reset"
    );
    Ok(())
}

/// Two graphs hold `a` (one writes `a = 2 * src + 1`, one copies `a` into `out`): after the
/// user dropped `a` and `src`, replaying both still gives `out` the same result as before.
fn same_result_after_drop<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    let src = b
        .alloc_from(&crate::check::ramp(1000, 0.5))
        .ctx("alloc src")?;
    let a = b.alloc(1000).ctx("alloc a")?;
    let out = b.alloc_from(&[0.0; 1000]).ctx("alloc out")?;
    let mut write = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut write, || {
        b.copy(&a, &src)?;
        b.scale(&a, 2.0)?;
        b.add_scalar(&a, 1.0)
    })
    .ctx("capture the writer")?;
    let mut read_out = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut read_out, || b.copy(&out, &a))
        .ctx("capture the reader")?;
    let run = |write: &mut B::Graph, read_out: &mut B::Graph| -> CaseResult {
        let _s = on_stream(b, &stream)?;
        write.replay().ctx("replay the writer")?;
        read_out.replay().ctx("replay the reader")
    };
    run(&mut write, &mut read_out)?;
    let before = read(b, &out)?;
    {
        // On the replays' stream, so that they are ordered after the clear.
        let _s = on_stream(b, &stream)?;
        b.fill(&out, -1.0).ctx("clear out")?;
    }
    drop(a);
    drop(src);
    run(&mut write, &mut read_out)?;
    let after = read(b, &out)?;
    ensure!(
        before
            .iter()
            .map(|v| v.to_bits())
            .eq(after.iter().map(|v| v.to_bits())),
        "the result changed once the captured buffers were dropped: {:?} vs {:?}",
        &before[..4],
        &after[..4]
    );
    ensure!(
        before[10] == 11.0,
        "unexpected result {} (2 * 5 + 1 expected)",
        before[10]
    );
    Ok(())
}

/// A plain buffer captured by three graphs and then dropped stays reserved (graph-held) until
/// the last of them is reset or dropped.
fn held_by_several_graphs<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    let baseline = b.memory_stats();
    let x = b.alloc_from(&[1.0; 4096]).ctx("alloc x")?;
    let bytes = 4096 * 4;
    let mut graphs = Vec::new();
    for k in 0..3 {
        let mut g = new_graph(b, GraphOptions::new())?;
        b.capture_on(&stream, &mut g, || b.add_scalar(&x, k as f32))
            .ctx("capture")?;
        graphs.push(g);
    }
    drop(x);
    let held = b.memory_stats();
    ensure!(
        held.graph_held_bytes >= bytes && held.live_buffers == baseline.live_buffers,
        "x dropped while three graphs use it: expected at least {bytes} graph-held bytes and no \
         live buffer, got {held:?}"
    );
    for (i, g) in graphs.iter_mut().enumerate() {
        {
            let _s = on_stream(b, &stream)?;
            g.replay().ctx("replay after x was dropped")?;
        }
        g.reset();
        let now = b.memory_stats();
        if i < 2 {
            ensure!(
                now.graph_held_bytes >= bytes,
                "x went back after {} of 3 graphs were reset: {now:?}",
                i + 1
            );
        }
    }
    drop(graphs);
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back after the last graph: before {baseline:?}, after {after:?}"
    );
    Ok(())
}

/// Two graphs share a user pool; each allocates a temporary and an output in it. The user
/// drops every pool buffer: replays still work, plain buffers allocated meanwhile are
/// untouched, and memory goes back once both graphs are reset.
fn shared_pool_keep_alive<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let baseline = b.memory_stats();
    let stream = b.new_stream().ctx("new_stream")?;
    let pool = b.graph_pool_handle();
    let input = b.alloc_from(&[2.0; 512]).ctx("alloc input")?;
    let sink = b.alloc_from(&[0.0; 512]).ctx("alloc sink")?;
    let mut graphs = Vec::new();
    let mut outputs = Vec::new();
    for k in 1..=2 {
        let mut g = new_graph(b, GraphOptions::new().pool(pool))?;
        let out = b
            .capture_on(&stream, &mut g, || {
                let tmp = b.alloc(512)?;
                b.copy(&tmp, &input)?;
                b.scale(&tmp, k as f32)?;
                let out = b.alloc(512)?;
                b.copy(&out, &tmp)?;
                b.axpy(&sink, 1.0, &out)?;
                Ok(out)
            })
            .ctx("capture into the shared pool")?;
        graphs.push(g);
        outputs.push(out);
    }
    drop(outputs);
    let fresh: Vec<B::Buffer<f32>> = (0..4)
        .map(|_| b.alloc_from(&[7.0; 512]))
        .collect::<Result<_, _>>()
        .ctx("alloc plain buffers")?;
    for g in &mut graphs {
        let _s = on_stream(b, &stream)?;
        g.replay().ctx("replay with every pool buffer dropped")?;
    }
    expect_all(
        b,
        &sink,
        2.0 + 4.0,
        "the sink after one replay of each graph",
    )?;
    for (i, f) in fresh.iter().enumerate() {
        expect_all(b, f, 7.0, &format!("plain buffer {i}"))?;
    }
    drop((graphs, fresh, input, sink));
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back: before {baseline:?}, after {after:?}"
    );
    Ok(())
}

/// The silent corruption, made deterministic: g3 (own pool) outputs b11; g3 goes; g4
/// (another pool) captures `b11 -= 2` and the last handle to b11 is dropped inside that
/// capture; ordinary buffers allocated and filled afterwards must be untouched by g4's replay.
fn pool_block_freed_in_capture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let baseline = b.memory_stats();
    let stream = b.new_stream().ctx("new_stream")?;
    let b7 = b.alloc_from(&[3.0; 1000]).ctx("alloc b7")?;
    let b8 = b.alloc_from(&[4.0; 1000]).ctx("alloc b8")?;
    let mut g3 = new_graph(b, GraphOptions::new())?;
    let b11 = b
        .capture_on(&stream, &mut g3, || {
            let b11 = b.alloc(1000)?;
            b.copy(&b11, &b7)?;
            b.axpy(&b11, 1.0, &b8)?;
            Ok(b11)
        })
        .ctx("capture g3")?;
    {
        let _s = on_stream(b, &stream)?;
        g3.replay().ctx("replay g3")?;
    }
    drop(g3);
    let mut g4 = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g4, move || {
        b.add_scalar(&b11, -2.0)?;
        drop(b11);
        Ok(())
    })
    .ctx("capture g4, dropping b11 inside it")?;
    let ordinary: Vec<B::Buffer<f32>> = (0..6)
        .map(|_| b.alloc(1000))
        .collect::<Result<_, _>>()
        .ctx("ordinary allocations")?;
    for o in &ordinary {
        b.fill(o, -4.0).ctx("fill")?;
    }
    {
        let _s = on_stream(b, &stream)?;
        g4.replay().ctx("replay g4")?;
    }
    for (i, o) in ordinary.iter().enumerate() {
        expect_all(
            b,
            o,
            -4.0,
            &format!("ordinary buffer {i} after g4's replay"),
        )?;
    }
    drop((g4, ordinary, b7, b8));
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back: before {baseline:?}, after {after:?}"
    );
    Ok(())
}

/// 9.06: the stress at CI size (8 workers per mode, cycles from the environment).
fn concurrency_stress<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let config = StressConfig {
        workers_per_mode: 8,
        cycles: SuiteConfig::from_env().stress_cycles,
        replays: 2,
        disturbers: 2,
        elements: 256,
        deadline: Duration::from_secs(600),
    };
    let baseline = b.memory_stats();
    let report = stress(b, config)?;
    let expected = (config.workers_per_mode * config.cycles) as u64;
    ensure!(
        report.cycles.iter().all(|&c| c == expected),
        "cycles per mode {:?}, expected {expected} each",
        report.cycles
    );
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back after the stress: before {baseline:?}, after {after:?}"
    );
    println!(
        "    stress: {} cycles per mode (global, thread_local, relaxed), {} global captures \
         invalidated and retried, {} unsafe calls ({} refused), {:.2?}",
        expected,
        report.global_invalidations,
        report.unsafe_calls,
        report.refused_unsafe_calls,
        report.elapsed
    );
    Ok(())
}

/// An allocation the device cannot satisfy, inside a capture: `OutOfMemory`. A scoped
/// capture whose body returns it is discarded; an explicit capture is not invalidated by it
/// and still ends (as PyTorch's `test_graph_capture_oom` expects); the stream works after.
fn out_of_memory_in_capture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    // 2^40 floats (4 TiB): more than any device here has.
    const HUGE: usize = 1 << 40;
    let mut g = new_graph(b, GraphOptions::new())?;
    let scoped = b.capture_on(&stream, &mut g, || b.alloc::<f32>(HUGE).map(drop));
    ensure!(
        matches!(scoped, Err(GraphError::OutOfMemory { .. })),
        "scoped capture allocating 4 TiB: expected OutOfMemory, got {scoped:?}"
    );
    ensure!(
        g.state() == accel_graph_api::GraphState::Empty
            && !b.is_capturing(&stream).ctx("is_capturing")?,
        "the failed scoped capture was not discarded"
    );
    let x = b.alloc_from(&[0.0; 16]).ctx("alloc x")?;
    {
        let _s = on_stream(b, &stream)?;
        g.capture_begin().ctx("capture_begin")?;
        let huge = b.alloc::<f32>(HUGE);
        ensure!(
            matches!(huge, Err(GraphError::OutOfMemory { .. })),
            "explicit capture allocating 4 TiB: expected OutOfMemory, got {huge:?}"
        );
        b.add_scalar(&x, 1.0)
            .ctx("add_scalar after the refused allocation")?;
        g.capture_end()
            .ctx("capture_end after the refused allocation")?;
        g.replay().ctx("replay")?;
    }
    expect_all(b, &x, 1.0, "x after one replay")?;
    Ok(())
}

/// Graphs and buffers moved to other threads and dropped there, and every backend handle but
/// the target's own dropped before the graphs and buffers made through it: nothing leaks.
fn drop_orders<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let baseline = b.memory_stats();
    let stream = b.new_stream().ctx("new_stream")?;
    let clone = b.clone();
    let x = clone.alloc_from(&[1.0; 300]).ctx("alloc x")?;
    let mut g = clone.graph(GraphOptions::new()).ctx("graph")?;
    clone
        .capture_on(&stream, &mut g, || {
            let tmp = clone.alloc(300)?;
            clone.copy(&tmp, &x)?;
            clone.axpy(&x, 1.0, &tmp)
        })
        .ctx("capture")?;
    drop(clone);
    let handle = std::thread::spawn(move || {
        // Replaying on another thread's default stream is fine; then both go here.
        let mut g = g;
        let replayed = g.replay();
        drop(g);
        drop(x);
        replayed
    });
    match handle.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("replay on another thread: {e}")),
        Err(_) => return Err("the other thread panicked".to_owned()),
    }
    // A capture begun on this thread and its graph dropped on another mid-capture: the
    // capture is aborted there and nothing is left capturing.
    let mut g = new_graph(
        b,
        GraphOptions::new().capture_error_mode(CaptureErrorMode::Relaxed),
    )?;
    {
        let _s = on_stream(b, &stream)?;
        g.capture_begin().ctx("capture_begin")?;
        let y = b.alloc(64).ctx("pool alloc")?;
        b.fill(&y, 1.0).ctx("fill")?;
    }
    std::thread::spawn(move || drop(g))
        .join()
        .map_err(|_| "dropping a capturing graph on another thread panicked".to_owned())?;
    ensure!(
        !b.is_capturing(&stream).ctx("is_capturing")?,
        "the stream is still capturing after its graph was dropped on another thread"
    );
    b.synchronize().ctx("synchronize")?;
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back: before {baseline:?}, after {after:?}"
    );
    Ok(())
}

/// 9.09 / 9.10: the buffer-lifetime differential test, in child processes when the running
/// binary supports them (the conformance harness does), else in this process.
fn lifetimes_case<B: Backend>(t: &Target<B>, contract: Contract) -> CaseResult {
    let programs = SuiteConfig::from_env().lifetime_programs as u64;
    let summary = if lifetimes::isolation::children_enabled() {
        lifetimes::run_isolated(contract, 0..programs, Duration::from_secs(120))
    } else {
        lifetimes::run_in_process(t.backend(), contract, 0..programs)
    };
    println!("    {}", summary.line(contract));
    if summary.clean() {
        return Ok(());
    }
    let findings: Vec<String> = summary
        .findings
        .iter()
        .take(5)
        .map(|f| format!("seed {}: {:?} {}", f.seed, f.verdict, f.minimal))
        .collect();
    Err(format!(
        "{}\n{}",
        summary.line(contract),
        findings.join("\n")
    ))
}

/// Statistics and snapshots while a graph holds a dropped buffer, and after it goes.
fn stats_and_snapshot<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let baseline = b.memory_stats();
    let stream = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0; 1000]).ctx("alloc x")?;
    let x_address = x.device_address();
    let mut g = new_graph(b, GraphOptions::new())?;
    let out = b
        .capture_on(&stream, &mut g, || {
            let out = b.alloc(1000)?;
            b.copy(&out, &x)?;
            Ok(out)
        })
        .ctx("capture")?;
    let pool = g.pool().ctx("pool")?;
    drop(x);
    b.empty_cache().ctx("empty_cache")?;
    let stats = b.memory_stats();
    ensure!(
        stats.graph_held_bytes >= 4000,
        "x is held by the graph after its drop, but graph_held_bytes is {}",
        stats.graph_held_bytes
    );
    let pool_stats = stats
        .pool(pool)
        .ok_or("the graph's pool is not in memory_stats")?;
    ensure!(
        pool_stats.graphs == 1 && pool_stats.active_bytes >= 4000,
        "pool stats while the graph holds it and `out` lives: {pool_stats:?}"
    );
    let snapshot = b.memory_snapshot();
    let x_block = snapshot
        .iter()
        .find(|blk| blk.address == x_address)
        .ok_or("x's block is missing from the snapshot while the graph holds it")?;
    ensure!(
        x_block.state == accel_graph_api::BlockState::GraphHeld && x_block.pool.is_none(),
        "x's block in the snapshot: {x_block:?}"
    );
    let out_block = snapshot
        .iter()
        .find(|blk| blk.address == out.device_address())
        .ok_or("out's block is missing from the snapshot")?;
    ensure!(
        out_block.state == accel_graph_api::BlockState::Live && out_block.pool == Some(pool),
        "out's block in the snapshot: {out_block:?}"
    );
    drop(g);
    b.empty_cache().ctx("empty_cache")?;
    let kept = b.memory_stats();
    ensure!(
        kept.reserved_bytes.saturating_sub(baseline.reserved_bytes) == out_block.bytes,
        "with the graph gone, only out's block ({} bytes) may stay reserved: {kept:?}",
        out_block.bytes
    );
    drop(out);
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back: before {baseline:?}, after {after:?}"
    );
    Ok(())
}
