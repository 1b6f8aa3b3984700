//! Benchmark of graph editing on the CUDA backend, each figure a median, each result checked
//! bit for bit against a fresh capture of the same work:
//!
//! (a) `update_node` of one node of a 1000-node graph vs capturing and instantiating the graph
//!     again (target: ≥ 20× cheaper);
//! (b) `update_from` of a 1000-node graph vs instantiating its source (target: ≥ 2× cheaper);
//! (c) a `while_loop` of 100 iterations of a 10-kernel body, one launch, vs a host loop that
//!     replays the body and reads the condition back each time (target: ≥ 2× faster), and vs
//!     the same 1000 kernels unrolled into one graph (target: ≤ 1.1× its GPU time);
//! (d) 10 child graphs of 100 nodes vs the flat 1000-node graph (target: ≤ 1.05× its GPU time);
//! (e) 16 buckets of one topology: instantiating one shared executable vs instantiating 16
//!     (target: ≥ 5× less time), the cost of switching the shared one to each bucket (an
//!     update, paid at run time), and the bucketed cache with shared executables against one
//!     with an executable per bucket, run for run.
//!
//! Every line of the report starts with `editing:`. GPU times come from CUDA events around the
//! launch, host times from the host clock. The exit status is non-zero when a result differs
//! (a target missed is reported, not an error).
//!
//! ```text
//! cargo run --release -p accel-graph-cuda --example graph_editing
//! ```

use std::{process::ExitCode, time::Instant};

use accel_graph_api::{EventOptions, GraphError, kernel::KernelArg, prelude::*};
use accel_graph_cuda::{CudaBackend, CudaBuffer, CudaGraph, CudaStreamHandle};
use accel_graph_utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes};

type R<T> = Result<T, GraphError>;

/// Elements per buffer (4 KiB: launch-bound kernels, as graphs are for).
const ELEMS: usize = 1024;
/// Nodes of the big graphs.
const NODES: usize = 1000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median host time of `f` over `reps` runs, in microseconds.
fn host_us(reps: usize, mut f: impl FnMut() -> R<()>) -> R<f64> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median(times))
}

/// Median GPU time of the work `f` issues on `stream`, by timing events, in milliseconds.
fn gpu_ms(
    b: &CudaBackend,
    stream: &CudaStreamHandle,
    reps: usize,
    mut f: impl FnMut() -> R<()>,
) -> R<f64> {
    let timing = EventOptions::new().enable_timing(true);
    let (start, end) = (b.new_event_with(timing)?, b.new_event_with(timing)?);
    let _on = b.use_stream(stream)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        b.record_event(&start)?;
        f()?;
        b.record_event(&end)?;
        b.event_synchronize(&end)?;
        times.push(f64::from(b.elapsed_time(&start, &end)?));
    }
    Ok(median(times))
}

fn ramp(seed: f32) -> Vec<f32> {
    (0..ELEMS)
        .map(|i| seed + (i % 61) as f32 * 0.0625)
        .collect()
}

/// Op `i` of the 1000-op chain over `y` and `x`, with scalar `c` where it takes one: bounded
/// values, so every result is finite and compared bit for bit.
fn op(b: &CudaBackend, i: usize, y: &CudaBuffer, x: &CudaBuffer, c: f32) -> R<()> {
    match i % 4 {
        0 => b.add_scalar(y, c),
        1 => b.scale(y, 0.5),
        2 => b.axpy(y, 0.25, x),
        _ => b.add_scalar(y, -0.125),
    }
}

fn chain(
    b: &CudaBackend,
    y: &CudaBuffer,
    x: &CudaBuffer,
    range: std::ops::Range<usize>,
    c: f32,
) -> R<()> {
    range.into_iter().try_for_each(|i| op(b, i, y, x, c))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Replays `g` on `stream` with `y` reset to `init` first; returns `y`.
fn run(
    b: &CudaBackend,
    stream: &CudaStreamHandle,
    g: &mut CudaGraph,
    y: &CudaBuffer,
    init: &[f32],
) -> R<Vec<f32>> {
    b.upload(y, init)?;
    {
        let _on = b.use_stream(stream)?;
        g.replay()?;
    }
    b.synchronize()?;
    b.download(y)
}

struct Report {
    mismatches: Vec<String>,
}

impl Report {
    fn same(&mut self, what: &str, a: &[f32], b: &[f32]) {
        let ok = bits(a) == bits(b);
        println!(
            "editing: {what}: {}",
            if ok { "identical" } else { "DIFFERENT" }
        );
        if !ok {
            self.mismatches.push(what.to_owned());
        }
    }

    fn ratio(&self, what: &str, ratio: f64, target: &str, met: bool) {
        println!(
            "editing: {what}: {ratio:.2}x (target {target}: {})",
            if met { "met" } else { "NOT met" }
        );
    }
}

/// (a) and (b).
fn updates(b: &CudaBackend, s: &CudaStreamHandle, report: &mut Report) -> R<()> {
    let (y, x) = (b.alloc_from(&ramp(1.0))?, b.alloc_from(&ramp(-2.0))?);
    let (y2, x2) = (b.alloc_from(&ramp(3.0))?, b.alloc_from(&ramp(0.5))?);
    let init = ramp(1.0);
    let mut g = b.graph(GraphOptions::new())?;
    let node = b.capture_on(s, &mut g, || {
        chain(b, &y, &x, 0..500, 0.75)?;
        let node = b.captured_node()?; // op 499 (an add_scalar of -0.125)
        chain(b, &y, &x, 500..NODES, 0.75)?;
        Ok(node)
    })?;
    // (a) one scalar of one node, against capture + instantiate of the whole graph.
    let mut value = 0.0f32;
    let update = host_us(200, || {
        value += 1.0 / 64.0;
        g.update_node(node, &[(1, KernelArg::scalar(value))])
    })?;
    // The graphs are dropped after the timing: destroying them is not part of making one.
    let mut made = Vec::new();
    let recapture = host_us(20, || {
        let mut fresh = b.graph(GraphOptions::new())?;
        b.capture_on(s, &mut fresh, || chain(b, &y, &x, 0..NODES, 0.75))?;
        made.push(fresh);
        Ok(())
    })?;
    drop(made);
    println!(
        "editing: node update: {update:.2} us; capture + instantiate of {NODES} nodes: \
         {recapture:.1} us"
    );
    report.ratio(
        "node update vs re-capture + instantiate",
        recapture / update,
        ">= 20x cheaper",
        recapture / update >= 20.0,
    );
    g.update_node(node, &[(1, KernelArg::scalar(-3.5f32))])?;
    let updated = run(b, s, &mut g, &y, &init)?;
    let mut fresh = b.graph(GraphOptions::new())?;
    b.capture_on(s, &mut fresh, || {
        chain(b, &y, &x, 0..499, 0.75)?;
        b.add_scalar(&y, -3.5)?;
        chain(b, &y, &x, 500..NODES, 0.75)
    })?;
    report.same(
        "node update against a fresh capture",
        &updated,
        &run(b, s, &mut fresh, &y, &init)?,
    );

    // (b) the whole graph from another capture, against instantiating that capture.
    let mut h = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(s, &mut h, || chain(b, &y2, &x2, 0..NODES, -0.25))?;
    let update = host_us(20, || g.update_from(&h))?;
    let instantiate = host_us(20, || h.instantiate())?;
    println!(
        "editing: update_from ({NODES} nodes): {update:.1} us; instantiate: {instantiate:.1} us"
    );
    report.ratio(
        "whole-graph update vs re-instantiate",
        instantiate / update,
        ">= 2x cheaper",
        instantiate / update >= 2.0,
    );
    let init2 = ramp(3.0);
    let updated = run(b, s, &mut g, &y2, &init2)?;
    report.same(
        "whole-graph update against the source's replay",
        &updated,
        &run(b, s, &mut h, &y2, &init2)?,
    );
    Ok(())
}

/// The 10-kernel body: 9 ops on `y`, then one decrement of the counter.
fn body(b: &CudaBackend, y: &CudaBuffer, x: &CudaBuffer, left: &CudaBuffer) -> R<()> {
    chain(b, y, x, 0..9, 0.5)?;
    b.add_scalar(left, -1.0)
}

/// (c).
fn loops(b: &CudaBackend, s: &CudaStreamHandle, report: &mut Report) -> R<()> {
    if !b.capabilities().conditional_nodes {
        println!("editing: while loop: skipped (capabilities().conditional_nodes is false)");
        return Ok(());
    }
    const ITERATIONS: usize = 100;
    let (y, x, left) = (
        b.alloc_from(&ramp(1.0))?,
        b.alloc_from(&ramp(0.25))?,
        b.alloc(1)?,
    );
    let init = ramp(1.0);
    let mut looped = b.graph(GraphOptions::new())?;
    b.capture_on(s, &mut looped, || {
        b.fill(&left, ITERATIONS as f32)?;
        b.while_loop(&left, || body(b, &y, &x, &left))
    })?;
    let mut unrolled = b.graph(GraphOptions::new())?;
    b.capture_on(s, &mut unrolled, || {
        b.fill(&left, ITERATIONS as f32)?;
        (0..ITERATIONS).try_for_each(|_| body(b, &y, &x, &left))
    })?;
    let mut one = b.graph(GraphOptions::new())?;
    b.capture_on(s, &mut one, || body(b, &y, &x, &left))?;

    let while_result = run(b, s, &mut looped, &y, &init)?;
    report.same(
        "while loop against the unrolled graph",
        &while_result,
        &run(b, s, &mut unrolled, &y, &init)?,
    );
    let mut host_loop = || -> R<()> {
        let _on = b.use_stream(s)?;
        b.fill(&left, ITERATIONS as f32)?;
        loop {
            one.replay()?;
            if b.download(&left)?[0] == 0.0 {
                return Ok(());
            }
        }
    };
    b.upload(&y, &init)?;
    host_loop()?;
    report.same(
        "while loop against the host-driven loop",
        &while_result,
        &b.download(&y)?,
    );

    let while_wall = host_us(20, || {
        let _on = b.use_stream(s)?;
        looped.replay()?;
        b.stream_synchronize(s)
    })?;
    let host_wall = host_us(10, &mut host_loop)?;
    let while_gpu = gpu_ms(b, s, 20, || looped.replay())?;
    let unrolled_gpu = gpu_ms(b, s, 20, || unrolled.replay())?;
    println!(
        "editing: while loop ({ITERATIONS} x 10 kernels): one launch {while_wall:.1} us wall, \
         {:.1} us GPU; host-driven loop {host_wall:.1} us wall; unrolled graph {:.1} us GPU",
        while_gpu * 1e3,
        unrolled_gpu * 1e3
    );
    report.ratio(
        "while loop vs host-driven loop (wall)",
        host_wall / while_wall,
        ">= 2x faster",
        host_wall / while_wall >= 2.0,
    );
    report.ratio(
        "while loop vs unrolled graph (GPU time)",
        while_gpu / unrolled_gpu,
        "<= 1.1x",
        while_gpu / unrolled_gpu <= 1.1,
    );
    Ok(())
}

/// (d).
fn children(b: &CudaBackend, s: &CudaStreamHandle, report: &mut Report) -> R<()> {
    let (y, x) = (b.alloc_from(&ramp(2.0))?, b.alloc_from(&ramp(-1.0))?);
    let init = ramp(2.0);
    let mut kids = Vec::new();
    for k in 0..10 {
        let mut child = b.graph(GraphOptions::new())?;
        b.capture_on(s, &mut child, || {
            chain(b, &y, &x, k * 100..(k + 1) * 100, 0.375)
        })?;
        kids.push(child);
    }
    let mut parent = b.graph(GraphOptions::new())?;
    b.capture_on(s, &mut parent, || {
        kids.iter_mut().try_for_each(|c| c.replay())
    })?;
    let mut flat = b.graph(GraphOptions::new())?;
    b.capture_on(s, &mut flat, || chain(b, &y, &x, 0..NODES, 0.375))?;
    report.same(
        "10 child graphs against the flat graph",
        &run(b, s, &mut parent, &y, &init)?,
        &run(b, s, &mut flat, &y, &init)?,
    );
    let nested = gpu_ms(b, s, 20, || parent.replay())?;
    let plain = gpu_ms(b, s, 20, || flat.replay())?;
    println!(
        "editing: 10 child graphs of 100 nodes: {:.1} us GPU; flat {NODES} nodes: {:.1} us GPU",
        nested * 1e3,
        plain * 1e3
    );
    report.ratio(
        "child graphs vs flat graph (GPU time)",
        nested / plain,
        "<= 1.05x",
        nested / plain <= 1.05,
    );
    Ok(())
}

/// The bucket model: 64 ops over a copy of its input.
fn model(b: &CudaBackend, x: &[&CudaBuffer]) -> R<Vec<CudaBuffer>> {
    let y = b.alloc(x[0].len())?;
    b.copy(&y, x[0])?;
    for _ in 0..32 {
        b.scale(&y, 0.75)?;
        b.add_scalar(&y, 0.5)?;
    }
    Ok(vec![y])
}

/// (e).
fn buckets(b: &CudaBackend, s: &CudaStreamHandle, report: &mut Report) -> R<()> {
    const BUCKETS: usize = 16;
    const WIDTH: usize = 4096;
    // Instantiation alone: 16 executables, against one updated to each of the other 15.
    let mut graphs = Vec::new();
    let mut inputs = Vec::new();
    for rows in 1..=BUCKETS {
        let x = b.alloc_from(&vec![1.0f32; rows * WIDTH])?;
        let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
        let out = b.capture_on(s, &mut g, || model(b, &[&x]))?;
        graphs.push(g);
        inputs.push((x, out));
    }
    let t = Instant::now();
    for g in &mut graphs {
        g.instantiate()?;
    }
    let separate = t.elapsed().as_secs_f64() * 1e6;
    let mut shared = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(s, &mut shared, || model(b, &[&inputs[0].0]).map(drop))?;
    let t = Instant::now();
    let instantiated = shared.instantiate();
    let one = t.elapsed().as_secs_f64() * 1e6;
    instantiated?;
    // Switching the one executable to every bucket in turn: what a cache whose runs visit all
    // buckets pays, spread over its runs (one update per switch).
    let t = Instant::now();
    let updated = graphs.iter().try_for_each(|g| shared.update_from(g));
    let switches = t.elapsed().as_secs_f64() * 1e6;
    match updated {
        Ok(()) => {
            println!(
                "editing: {BUCKETS} buckets: {BUCKETS} instantiations {separate:.0} us; one \
                 shared executable: instantiation {one:.0} us, then {BUCKETS} switches (one \
                 update each) {switches:.0} us, {:.0} us per switch",
                switches / BUCKETS as f64
            );
            report.ratio(
                "shared executable vs one per bucket (instantiation time)",
                separate / one,
                ">= 5x lower",
                separate / one >= 5.0,
            );
            println!(
                "editing: shared executable vs one per bucket, instantiation + a switch to \
                 every bucket: {:.2}x lower",
                separate / (one + switches)
            );
        }
        // The buckets differ in their copy's size: a driver that refuses to update that keeps
        // the buckets apart (the cache below then holds one executable per bucket).
        Err(e @ GraphError::UpdateRefused { .. }) => {
            println!("editing: {BUCKETS} buckets: the driver refused the update: {e}");
        }
        Err(e) => return Err(e),
    }

    // The caches, run for run.
    let sizes = CaptureSizes::new(1..=BUCKETS)?;
    let opts = BucketedCacheOptions::new().warmup_iters(1).precapture(true);
    let t = Instant::now();
    let mut one_per_bucket = BucketedGraphCache::new(b, model, sizes.clone(), vec![WIDTH], opts)?;
    let build_separate = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let mut deduplicating =
        BucketedGraphCache::new(b, model, sizes, vec![WIDTH], opts.share_executables(true))?;
    let build_shared = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "editing: bucketed cache, {BUCKETS} buckets captured: one executable per bucket \
         {build_separate:.1} ms ({} executables); shared {build_shared:.1} ms ({} executable(s))",
        one_per_bucket.executables(),
        deduplicating.executables()
    );
    let mut different = false;
    for (i, rows) in [3, 16, 1, 7, 7, 12, 2, 16].into_iter().enumerate() {
        let data: Vec<f32> = (0..rows * WIDTH)
            .map(|j| (j % 13) as f32 * 0.5 + i as f32)
            .collect();
        let a = one_per_bucket.run(&[&data])?.download(0)?;
        let c = deduplicating.run(&[&data])?.download(0)?;
        different |= bits(&a) != bits(&c);
    }
    println!(
        "editing: bucketed cache stats, shared: {}",
        deduplicating.stats()
    );
    if different {
        report.mismatches.push("bucketed cache runs".to_owned());
    }
    println!(
        "editing: bucketed cache, shared executables against one per bucket: {}",
        if different { "DIFFERENT" } else { "identical" }
    );
    Ok(())
}

fn main() -> ExitCode {
    let b = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            println!("editing: skipped: {e}");
            return ExitCode::SUCCESS;
        }
    };
    let caps = b.capabilities();
    println!(
        "editing: device {}; graph_update {}, child_graphs {}, conditional_nodes {}, \
         conditional_if_else {}",
        caps.device_name,
        caps.graph_update,
        caps.child_graphs,
        caps.conditional_nodes,
        caps.conditional_if_else
    );
    let mut report = Report {
        mismatches: Vec::new(),
    };
    let result = b.new_stream().and_then(|s| {
        updates(&b, &s, &mut report)?;
        loops(&b, &s, &mut report)?;
        children(&b, &s, &mut report)?;
        buckets(&b, &s, &mut report)
    });
    match (result, report.mismatches.is_empty()) {
        (Ok(()), true) => {
            println!("editing: OK");
            ExitCode::SUCCESS
        }
        (Ok(()), false) => {
            println!("editing: FAILED: results differ: {:?}", report.mismatches);
            ExitCode::FAILURE
        }
        (Err(e), _) => {
            println!("editing: FAILED: {e:?}: {e}");
            ExitCode::FAILURE
        }
    }
}
