//! The bodies of the §17 cases: each runs on every rank (rank `ctx.rank` of
//! `ctx.world_size`). Data are small integers, so every sum is exact whatever order a device
//! reduces in, and results are compared bit for bit with what the case computes on the host.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, DeviceBuffer, GraphError, GraphOptions,
    GraphState, Result,
    collective::{Communicator, ReduceOp},
    half::bf16,
};
use accel_graph_utils::{
    CaptureBarrier, FullGraphWrapper, GraphedCallableOptions, Stage,
    make_graphed_callables_across_ranks,
};

use super::{CollectiveCase, RankCtx};
use crate::check::{CaseResult, Ctx, ensure, expect_err};

/// A mismatch or a discarded capture must be reported well within this (the communicators'
/// timeout is 30 s, so a report this fast did not come from a timeout).
const FAST: Duration = Duration::from_secs(5);

/// The timeout of the cases that wait for a rank on purpose.
const SHORT: Duration = Duration::from_secs(1);

/// The cases of §17, in running order.
pub(super) fn cases<B: Backend>() -> Vec<CollectiveCase<B>> {
    Vec::from([
        CollectiveCase::new(
            "17.01 all_reduce eager: sum, prod, max, min of f32; sum of bf16 and i32; on views",
            1,
            all_reduce_eager,
        ),
        CollectiveCase::new(
            "17.02 all_gather, reduce_scatter (in place too) and broadcast from every root, eager",
            1,
            each_collective_eager,
        ),
        CollectiveCase::new(
            "17.03 captured collectives do not run; replays equal eager runs and the host, exactly",
            1,
            captured_equals_eager,
        ),
        CollectiveCase::new(
            "17.04 a graph keeps its collectives' buffers and communicator alive",
            1,
            captured_keep_alive,
        ),
        CollectiveCase::new(
            "17.05 captures of different collective sequences fail fast with CollectiveMismatch",
            2,
            mismatched_captures,
        ),
        CollectiveCase::new(
            "17.06 after a mismatched capture the communicator works, eager and captured",
            2,
            usable_after_mismatch,
        ),
        CollectiveCase::new(
            "17.07 a rank that never joins: CommTimeout naming it",
            1,
            rank_never_joins,
        ),
        CollectiveCase::new(
            "17.08 a rank that never issues its collective: CommTimeout, then CommUnusable",
            2,
            rank_never_issues,
        ),
        CollectiveCase::new(
            "17.09 a capture discarded on one rank fails the others' fast",
            2,
            capture_discarded_on_one_rank,
        ),
        CollectiveCase::new(
            "17.10 misuse is a typed error before any rank is disturbed",
            1,
            misuse,
        ),
        CollectiveCase::new(
            "17.11 full-iteration wrapper and graphed callables across ranks equal eager",
            1,
            utilities_across_ranks,
        ),
    ])
}

/// Element `i` of rank `rank`'s data: an integer in -5..=5.
fn value(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i * 3) % 11) as f32 - 5.0
}

fn values(rank: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| value(rank, i)).collect()
}

/// `Σ_q value(q, i)` over the world.
fn sums(world: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0..world).map(|q| value(q, i)).sum())
        .collect()
}

/// A new stream and an empty graph capturing in `thread_local` mode (ranks that are threads of
/// one process must not use `global`).
fn graph_of<B: Backend>(b: &B) -> std::result::Result<(B::Stream, B::Graph), String> {
    let stream = b.new_stream().ctx("new_stream")?;
    let graph = b
        .graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))
        .ctx("graph")?;
    Ok((stream, graph))
}

fn download<B: Backend, T: accel_graph_api::Element>(
    b: &B,
    x: &B::Buffer<T>,
) -> std::result::Result<Vec<T>, String> {
    b.download(x).ctx("download")
}

fn all_reduce_eager<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm("c")?;
    const N: usize = 37;
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
        comm.all_reduce(&x, op).ctx("all_reduce")?;
        let want: Vec<f32> = (0..N)
            .map(|i| {
                (1..w).fold(value(0, i), |acc, q| match op {
                    ReduceOp::Max => acc.max(value(q, i)),
                    ReduceOp::Min => acc.min(value(q, i)),
                    _ => acc + value(q, i),
                })
            })
            .collect();
        let got = download(b, &x)?;
        ensure!(
            got == want,
            "all_reduce({op}) of f32: got {got:?}, want {want:?}"
        );
    }
    // Products of ±1, 2 and 1/2 are exact.
    let factor = |q: usize, i: usize| [1.0f32, 2.0, -1.0, 0.5][(q + i) % 4];
    let x = b
        .alloc_from(&(0..N).map(|i| factor(r, i)).collect::<Vec<_>>())
        .ctx("alloc")?;
    comm.all_reduce(&x, ReduceOp::Prod)
        .ctx("all_reduce(prod)")?;
    let want: Vec<f32> = (0..N)
        .map(|i| (0..w).map(|q| factor(q, i)).product())
        .collect();
    let got = download(b, &x)?;
    ensure!(got == want, "all_reduce(prod): got {got:?}, want {want:?}");

    let xb = b
        .alloc_from(
            &values(r, N)
                .into_iter()
                .map(bf16::from_f32)
                .collect::<Vec<_>>(),
        )
        .ctx("alloc bf16")?;
    comm.all_reduce(&xb, ReduceOp::Sum).ctx("all_reduce bf16")?;
    let want: Vec<bf16> = sums(w, N).into_iter().map(bf16::from_f32).collect();
    let got = download(b, &xb)?;
    ensure!(
        got == want,
        "all_reduce(sum) of bf16: got {got:?}, want {want:?}"
    );

    let xi = b
        .alloc_from(
            &(0..N)
                .map(|i| (r * 1000 + i) as i32 - 7)
                .collect::<Vec<_>>(),
        )
        .ctx("alloc i32")?;
    comm.all_reduce(&xi, ReduceOp::Sum).ctx("all_reduce i32")?;
    let want: Vec<i32> = (0..N)
        .map(|i| (0..w).map(|q| (q * 1000 + i) as i32 - 7).sum())
        .collect();
    let got = download(b, &xi)?;
    ensure!(
        got == want,
        "all_reduce(sum) of i32: got {got:?}, want {want:?}"
    );

    // On a view: only the view's elements change.
    let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
    comm.all_reduce(x.view(4..20).ctx("view")?, ReduceOp::Sum)
        .ctx("all_reduce on a view")?;
    let got = download(b, &x)?;
    let s = sums(w, N);
    let want: Vec<f32> = (0..N)
        .map(|i| {
            if (4..20).contains(&i) {
                s[i]
            } else {
                value(r, i)
            }
        })
        .collect();
    ensure!(
        got == want,
        "all_reduce on elements 4..20: got {got:?}, want {want:?}"
    );
    Ok(())
}

fn each_collective_eager<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm("c")?;
    const N: usize = 5;
    let gathered: Vec<f32> = (0..w).flat_map(|q| values(q, N)).collect();

    let send = b.alloc_from(&values(r, N)).ctx("alloc")?;
    let recv = b.alloc_from(&vec![-99.0; w * N]).ctx("alloc")?;
    comm.all_gather(&send, &recv).ctx("all_gather")?;
    let got = download(b, &recv)?;
    ensure!(
        got == gathered,
        "all_gather: got {got:?}, want {gathered:?}"
    );

    // In place: this rank's part of the receive buffer is the send buffer.
    let mut init = vec![-99.0; w * N];
    init[r * N..(r + 1) * N].copy_from_slice(&values(r, N));
    let buf = b.alloc_from(&init).ctx("alloc")?;
    comm.all_gather(buf.view(r * N..(r + 1) * N).ctx("view")?, &buf)
        .ctx("all_gather in place")?;
    let got = download(b, &buf)?;
    ensure!(
        got == gathered,
        "all_gather in place: got {got:?}, want {gathered:?}"
    );

    let full = sums(w, w * N);
    let mine = full[r * N..(r + 1) * N].to_vec();
    let send = b.alloc_from(&values(r, w * N)).ctx("alloc")?;
    let recv = b.alloc_from(&[-99.0; N]).ctx("alloc")?;
    comm.reduce_scatter(&send, &recv, ReduceOp::Sum)
        .ctx("reduce_scatter")?;
    let got = download(b, &recv)?;
    ensure!(got == mine, "reduce_scatter: got {got:?}, want {mine:?}");
    let got = download(b, &send)?;
    ensure!(
        got == values(r, w * N),
        "reduce_scatter changed its send buffer: {got:?}"
    );

    let buf = b.alloc_from(&values(r, w * N)).ctx("alloc")?;
    comm.reduce_scatter(
        &buf,
        buf.view(r * N..(r + 1) * N).ctx("view")?,
        ReduceOp::Sum,
    )
    .ctx("reduce_scatter in place")?;
    let got = b
        .download(buf.view(r * N..(r + 1) * N).ctx("view")?)
        .ctx("download")?;
    ensure!(
        got == mine,
        "reduce_scatter in place: got {got:?}, want {mine:?}"
    );

    for root in 0..w {
        let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
        comm.broadcast(&x, root).ctx("broadcast")?;
        let got = download(b, &x)?;
        ensure!(
            got == values(root, N),
            "broadcast from root {root}: got {got:?}"
        );
    }
    Ok(())
}

/// The buffers of [`program`].
struct Bufs<B: Backend> {
    x: B::Buffer<f32>,
    xb: B::Buffer<bf16>,
    y: B::Buffer<f32>,
    z: B::Buffer<f32>,
}

const PN: usize = 6;

fn bufs<B: Backend>(b: &B, r: usize, w: usize) -> Result<Bufs<B>> {
    Ok(Bufs {
        x: b.alloc_from(&values(r, PN))?,
        xb: b.alloc_from(
            &values(r + 1, PN)
                .into_iter()
                .map(bf16::from_f32)
                .collect::<Vec<_>>(),
        )?,
        y: b.alloc_from(&vec![0.0; w * PN])?,
        z: b.alloc_from(&[0.0; PN])?,
    })
}

/// Every collective once, with some work between: `x += 1; x = Σx; xb = Σxb; y =
/// gather(x); z = my part of max(y); z = broadcast(z from the last rank)`.
fn program<B: Backend>(comm: &Communicator<B>, bufs: &Bufs<B>) -> Result<()> {
    let b = comm.backend();
    b.add_scalar(&bufs.x, 1.0)?;
    comm.all_reduce(&bufs.x, ReduceOp::Sum)?;
    comm.all_reduce(&bufs.xb, ReduceOp::Sum)?;
    comm.all_gather(&bufs.x, &bufs.y)?;
    comm.reduce_scatter(&bufs.y, &bufs.z, ReduceOp::Max)?;
    comm.broadcast(&bufs.z, comm.world_size() - 1)
}

#[allow(clippy::type_complexity)]
fn contents<B: Backend>(
    b: &B,
    bufs: &Bufs<B>,
) -> std::result::Result<(Vec<f32>, Vec<bf16>, Vec<f32>, Vec<f32>), String> {
    Ok((
        download(b, &bufs.x)?,
        download(b, &bufs.xb)?,
        download(b, &bufs.y)?,
        download(b, &bufs.z)?,
    ))
}

fn captured_equals_eager<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm("c")?;
    let eager = bufs(b, r, w).ctx("alloc")?;
    let graphed = bufs(b, r, w).ctx("alloc")?;
    let before = contents(b, &graphed)?;
    for _ in 0..2 {
        program(&comm, &eager).ctx("eager program")?;
    }
    let (stream, mut graph) = graph_of(b)?;
    b.capture_on(&stream, &mut graph, || program(&comm, &graphed))
        .ctx("capture")?;
    ensure!(
        contents(b, &graphed)? == before,
        "capturing ran the collectives (the buffers changed)"
    );
    for _ in 0..2 {
        graph.replay().ctx("replay")?;
    }
    let (got, want) = (contents(b, &graphed)?, contents(b, &eager)?);
    ensure!(
        got == want,
        "two replays {got:?} differ from two eager runs {want:?}"
    );
    // On the host: x1 = Σ(x0 + 1), x2 = w·(x1 + 1); xb2 = w·Σxb0; y = [x2; w]; z = x2.
    let x2: Vec<f32> = sums(w, PN)
        .into_iter()
        .map(|s| w as f32 * (s + w as f32 + 1.0))
        .collect();
    let xb2: Vec<bf16> = (0..PN)
        .map(|i| bf16::from_f32(w as f32 * (1..=w).map(|q| value(q, i)).sum::<f32>()))
        .collect();
    let y2: Vec<f32> = (0..w).flat_map(|_| x2.clone()).collect();
    ensure!(
        want == (x2.clone(), xb2, y2, x2),
        "eager results {want:?} differ from the host's"
    );
    Ok(())
}

fn captured_keep_alive<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    const N: usize = 9;
    let out = b.alloc_from(&[0.0; N]).ctx("alloc")?;
    let (stream, mut graph) = graph_of(b)?;
    {
        let comm = ctx.comm("c")?;
        let tmp = b.alloc_from(&values(r, N)).ctx("alloc")?;
        b.capture_on(&stream, &mut graph, || {
            comm.all_reduce(&tmp, ReduceOp::Sum)?;
            b.copy(&out, &tmp)
        })
        .ctx("capture")?;
        // The buffer and the communicator go; the graph keeps both.
    }
    for _ in 0..2 {
        graph
            .replay()
            .ctx("replay after the buffer and communicator were dropped")?;
    }
    let got = download(b, &out)?;
    let want: Vec<f32> = sums(w, N).into_iter().map(|s| w as f32 * s).collect();
    ensure!(
        got == want,
        "replays after the drops: got {got:?}, want {want:?}"
    );
    Ok(())
}

/// How the last rank's capture differs in [`mismatched_captures`].
#[derive(Debug, Clone, Copy)]
enum Deviation {
    /// One collective more.
    Count,
    /// A broadcast instead of an all_reduce.
    Kind,
    /// One element fewer.
    Size,
    /// bf16 instead of f32.
    DType,
}

fn mismatched_capture<B: Backend>(
    ctx: &RankCtx<B>,
    comm: &Communicator<B>,
    deviation: Deviation,
) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    const N: usize = 8;
    let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
    let xb = b.alloc_from(&[bf16::ONE; N]).ctx("alloc")?;
    let deviant = r == w - 1;
    let (stream, mut graph) = graph_of(b)?;
    let started = Instant::now();
    let captured = b.capture_on(&stream, &mut graph, || {
        match (deviant, deviation) {
            (true, Deviation::Count) => {
                comm.all_reduce(&x, ReduceOp::Sum)?;
                comm.all_reduce(&x, ReduceOp::Sum)?;
            }
            (true, Deviation::Kind) => comm.broadcast(&x, 0)?,
            (true, Deviation::Size) => comm.all_reduce(x.view(1..)?, ReduceOp::Sum)?,
            (true, Deviation::DType) => comm.all_reduce(&xb, ReduceOp::Sum)?,
            (false, _) => comm.all_reduce(&x, ReduceOp::Sum)?,
        }
        Ok(())
    });
    let elapsed = started.elapsed();
    let what = format!("{deviation:?} mismatch");
    let e = expect_err!(captured, GraphError::CollectiveMismatch { .. }, what);
    ensure!(
        elapsed < FAST,
        "{what}: reported after {elapsed:?}, not within {FAST:?}: {e}"
    );
    ensure!(
        graph.state() == GraphState::Empty,
        "{what}: the graph is {:?}, not Empty",
        graph.state()
    );
    ensure!(
        !b.is_capturing(&stream).ctx("is_capturing")?,
        "{what}: the stream is left capturing"
    );
    ensure!(
        download(b, &x)? == values(r, N),
        "{what}: the discarded capture's collectives ran"
    );
    Ok(())
}

fn mismatched_captures<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let comm = ctx.comm("c")?;
    for deviation in [
        Deviation::Count,
        Deviation::Kind,
        Deviation::Size,
        Deviation::DType,
    ] {
        mismatched_capture(ctx, &comm, deviation)?;
    }
    Ok(())
}

fn usable_after_mismatch<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm("c")?;
    mismatched_capture(ctx, &comm, Deviation::Size)?;
    comm.check_usable().ctx("check_usable after a mismatch")?;
    const N: usize = 8;
    let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
    comm.all_reduce(&x, ReduceOp::Sum)
        .ctx("eager all_reduce after a mismatch")?;
    ensure!(
        download(b, &x)? == sums(w, N),
        "eager all_reduce after a mismatch"
    );
    let y = b.alloc_from(&values(r, N)).ctx("alloc")?;
    let (stream, mut graph) = graph_of(b)?;
    b.capture_on(&stream, &mut graph, || comm.all_reduce(&y, ReduceOp::Sum))
        .ctx("matching capture after a mismatch")?;
    graph.replay().ctx("replay")?;
    ensure!(download(b, &y)? == sums(w, N), "replay after a mismatch");
    Ok(())
}

fn rank_never_joins<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let w = ctx.world_size;
    let started = Instant::now();
    // A world of one rank more than there are: rank `w` never comes.
    let made = ctx.comm_with("plus-one", w + 1, SHORT);
    let elapsed = started.elapsed();
    let e = expect_err!(
        made,
        GraphError::CommTimeout { .. },
        "a world with a missing rank"
    );
    if let GraphError::CommTimeout { missing, .. } = &e {
        ensure!(
            *missing == vec![w],
            "the timeout names {missing:?}, not rank {w}: {e}"
        );
    }
    ensure!(
        elapsed >= SHORT && elapsed < FAST,
        "the timeout of {SHORT:?} came after {elapsed:?}"
    );
    Ok(())
}

fn rank_never_issues<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm_with("c", w, SHORT).ctx("communicator")?;
    const N: usize = 4;
    let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
    if r == w - 1 {
        // This rank never issues the collective the others wait for — but it lives on, its
        // communicator with it, until they have timed out: a stuck rank, not a departed one
        // (a communicator destroyed under its peers' collectives is undefined in NCCL).
        std::thread::sleep(SHORT * 2);
        return Ok(());
    }
    let started = Instant::now();
    // Where the device waits itself (the mock), the collective times out; where it queues the
    // work (a GPU), waiting for the stream does.
    let waited = comm
        .all_reduce(&x, ReduceOp::Sum)
        .and_then(|()| comm.wait(SHORT));
    let elapsed = started.elapsed();
    // Its own timeout, or — where another waiting rank timed out first and its abort cut
    // this rank's collective short — that rank's abort; never a completed all-reduce.
    let e = match waited {
        Err(e @ GraphError::CommTimeout { .. }) => e,
        Err(GraphError::CommUnusable { reason, .. }) if reason.contains("aborted") => {
            GraphError::CommUnusable {
                communicator: comm.name().to_owned(),
                rank: r,
                reason,
            }
        }
        other => {
            return Err(format!(
                "a missing peer: expected CommTimeout, got {other:?}"
            ));
        }
    };
    ensure!(elapsed < FAST, "the timeout came after {elapsed:?}: {e}");
    expect_err!(
        comm.all_reduce(&x, ReduceOp::Sum),
        GraphError::CommUnusable { .. },
        "a collective after the timeout"
    );
    expect_err!(
        comm.barrier(),
        GraphError::CommUnusable { .. },
        "a barrier after the timeout"
    );
    Ok(())
}

fn capture_discarded_on_one_rank<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm("c")?;
    const N: usize = 4;
    let x = b.alloc_from(&values(r, N)).ctx("alloc")?;
    let (stream, mut graph) = graph_of(b)?;
    let started = Instant::now();
    let captured = b.capture_on(&stream, &mut graph, || {
        comm.all_reduce(&x, ReduceOp::Sum)?;
        if r == w - 1 {
            return Err(GraphError::ArgumentMismatch(
                "the body fails on purpose".into(),
            ));
        }
        Ok(())
    });
    let elapsed = started.elapsed();
    if r == w - 1 {
        expect_err!(
            captured,
            GraphError::ArgumentMismatch(_),
            "the failing body"
        );
    } else {
        let e = expect_err!(
            captured,
            GraphError::CollectiveMismatch { .. },
            "a peer's discarded capture"
        );
        ensure!(elapsed < FAST, "reported after {elapsed:?}: {e}");
    }
    ensure!(graph.state() == GraphState::Empty, "the graph is not Empty");
    comm.all_reduce(&x, ReduceOp::Sum)
        .ctx("eager all_reduce after the discarded capture")?;
    ensure!(
        download(b, &x)? == sums(w, N),
        "eager all_reduce afterwards"
    );
    Ok(())
}

fn misuse<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = ctx.comm("c")?;
    const N: usize = 3;
    let send = b.alloc_from(&values(r, N)).ctx("alloc")?;
    let short = b.alloc::<f32>(w * N + 1).ctx("alloc")?;
    expect_err!(
        comm.all_gather(&send, &short),
        GraphError::LengthMismatch { .. },
        "all_gather into a receive buffer of the wrong length"
    );
    expect_err!(
        comm.reduce_scatter(&short, &send, ReduceOp::Sum),
        GraphError::LengthMismatch { .. },
        "reduce_scatter from a send buffer of the wrong length"
    );
    expect_err!(
        comm.broadcast(&send, w),
        GraphError::ArgumentMismatch(_),
        "broadcast from a root outside the world"
    );
    if w > 1 {
        // (With one rank, the only overlapping send buffer is the receive buffer: in place.)
        let both = b.alloc::<f32>(w * N).ctx("alloc")?;
        expect_err!(
            comm.all_gather(both.view(1..N + 1).ctx("view")?, &both),
            GraphError::ArgumentMismatch(_),
            "all_gather from an overlapping send buffer that is not in place"
        );
    }
    let other = ctx.another_instance()?;
    let foreign = other.alloc_from(&values(r, N)).ctx("alloc")?;
    expect_err!(
        comm.all_reduce(&foreign, ReduceOp::Sum),
        GraphError::ForeignObject { .. },
        "all_reduce of another instance's buffer"
    );
    drop(foreign);
    expect_err!(
        Communicator::new(&ctx.backend, Arc::clone(&ctx.store), w + 2, w),
        GraphError::ArgumentMismatch(_),
        "a rank outside the world"
    );
    // Nothing reached a device: the communicator still works on every rank.
    comm.all_reduce(&send, ReduceOp::Sum)
        .ctx("all_reduce after the refused calls")?;
    ensure!(
        download(b, &send)? == sums(w, N),
        "all_reduce after the refused calls"
    );
    Ok(())
}

fn utilities_across_ranks<B: Backend>(ctx: &RankCtx<B>) -> CaseResult {
    let (b, w, r) = (&ctx.backend, ctx.world_size, ctx.rank);
    let comm = Arc::new(ctx.comm("c")?);
    const N: usize = 6;
    // A data-parallel step: acc += the average of every rank's input.
    let step = |acc: &B::Buffer<f32>, input: &B::Buffer<f32>| -> Result<()> {
        let g = b.alloc::<f32>(N)?;
        b.copy(&g, input)?;
        comm.all_reduce(&g, ReduceOp::Sum)?;
        b.scale(&g, 1.0 / w as f32)?;
        b.axpy(acc, 1.0, &g)
    };
    let input = b.alloc_from(&values(r, N)).ctx("alloc")?;
    let eager = b.alloc_from(&[0.0; N]).ctx("alloc")?;
    for _ in 0..4 {
        step(&eager, &input).ctx("eager step")?;
    }
    let graphed = b.alloc_from(&[0.0; N]).ctx("alloc")?;
    {
        let mut wrapper =
            FullGraphWrapper::new(b, |_b: &B, _stage, batches: &[&[&B::Buffer<f32>]]| {
                step(&graphed, batches[0][0])?;
                Ok(Vec::new())
            })
            .ctx("wrapper")?
            .capture_barrier(CaptureBarrier::of(&comm));
        for _ in 0..4 {
            wrapper
                .run(Stage::Training, &[&[&input]])
                .ctx("wrapper step")?;
        }
        ensure!(
            wrapper.replays(Stage::Training) == 3,
            "the wrapper replayed {} times, not 3",
            wrapper.replays(Stage::Training)
        );
    }
    let (got, want) = (download(b, &graphed)?, download(b, &eager)?);
    ensure!(
        got == want,
        "wrapper steps {got:?} differ from eager steps {want:?}"
    );

    // Graphed callables: a layer whose partial outputs are summed across ranks.
    let layer = |b: &B, x: &[&B::Buffer<f32>]| -> Result<Vec<B::Buffer<f32>>> {
        let y = b.alloc::<f32>(x[0].len())?;
        b.copy(&y, x[0])?;
        b.add_scalar(&y, 1.0)?;
        comm.all_reduce(&y, ReduceOp::Sum)?;
        Ok(vec![y])
    };
    let options = GraphedCallableOptions::new()
        .warmup_iters(2)
        .capture_error_mode(CaptureErrorMode::ThreadLocal);
    let sample = vec![b.alloc_from(&[0.0; N]).ctx("alloc")?];
    let mut graphed = make_graphed_callables_across_ranks(
        b,
        vec![layer],
        vec![sample],
        options,
        &CaptureBarrier::of(&comm),
    )
    .ctx("make_graphed_callables_across_ranks")?;
    for k in 0..3 {
        let x = b.alloc_from(&values(r + k, N)).ctx("alloc")?;
        let y = graphed[0].call(&[&x]).ctx("graphed call")?;
        ensure!(y.is_replayed(), "the call was not replayed");
        let got = download(b, &y[0])?;
        let want: Vec<f32> = (0..N)
            .map(|i| (0..w).map(|q| value(q + k, i) + 1.0).sum())
            .collect();
        ensure!(got == want, "graphed call {k}: got {got:?}, want {want:?}");
    }
    Ok(())
}
