//! §7 graphed callables: warmup, capture in order on one pool, static inputs copied only when
//! foreign, eager fallback in the other module mode, argument errors.

use std::cell::Cell;

use accel_graph_api::{Backend, PortableOps};
use accel_graph_utils::{
    GraphedCallableOptions, Modal, ModuleMode, make_graphed_callable, make_graphed_callables,
};

use super::{affine, data, ensure, expect_argument_mismatch, layer, same_bits};
use crate::{
    Target,
    check::{CaseResult, Ctx},
};

/// A callable as a plain function pointer.
type PlainCallable<B> = fn(
    &B,
    &[&<B as PortableOps>::Buffer<f32>],
) -> accel_graph_api::Result<Vec<<B as PortableOps>::Buffer<f32>>>;

pub(crate) fn graphed_callable_warmup_count<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    for warmup in [3usize, 1, 0] {
        let calls = Cell::new(0usize);
        let f = |b: &B, x: &[&B::Buffer<f32>]| {
            calls.set(calls.get() + 1);
            Ok(vec![affine(b, x[0], 2.0, 1.0)?])
        };
        let sample = vec![b.alloc_from(&[1.0; 8]).ctx("alloc sample")?];
        let options = GraphedCallableOptions::new().warmup_iters(warmup);
        let mut g = make_graphed_callable(b, f, sample, options).ctx("make_graphed_callable")?;
        ensure(calls.get() == warmup + 1, || {
            format!(
                "warmup {warmup}: expected {} calls (warmup + capture), got {}",
                warmup + 1,
                calls.get()
            )
        })?;
        let x = b.alloc_from(&[2.0; 8]).ctx("alloc input")?;
        for _ in 0..5 {
            let out = g.call(&[&x]).ctx("graphed call")?;
            ensure(out.is_replayed(), || "graphed call did not replay".into())?;
            let got = b.download(&out[0]).ctx("download")?;
            same_bits("graphed call", &got, &[5.0; 8])?;
        }
        ensure(calls.get() == warmup + 1, || {
            format!(
                "replays must not call the callable: {} calls after 5 replays",
                calls.get()
            )
        })?;
        ensure(g.stats().replays == 5, || format!("stats: {:?}", g.stats()))?;
    }
    Ok(())
}

pub(crate) fn graphed_callable_replay_matches_eager<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 16;
    let w = b.alloc_from(&data(7, n)).ctx("alloc weights")?;
    let f = |b: &B, x: &[&B::Buffer<f32>]| {
        let h = layer(b, x[0], &w)?;
        b.axpy(&h, -0.25, x[1])?;
        Ok(vec![affine(b, &h, 3.0, 0.5)?, h])
    };
    let eager = f;
    let sample = vec![b.alloc(n).ctx("alloc")?, b.alloc(n).ctx("alloc")?];
    let mut g = make_graphed_callable(b, f, sample, GraphedCallableOptions::new())
        .ctx("make_graphed_callable")?;
    for step in 0..100u64 {
        let x0 = b.alloc_from(&data(2 * step, n)).ctx("alloc x0")?;
        let x1 = b.alloc_from(&data(2 * step + 1, n)).ctx("alloc x1")?;
        let want = eager(b, &[&x0, &x1]).ctx("eager call")?;
        let out = g.call(&[&x0, &x1]).ctx("graphed call")?;
        for (i, (o, e)) in out.iter().zip(&want).enumerate() {
            let got = b.download(o).ctx("download")?;
            let exp = b.download(e).ctx("download")?;
            same_bits(&format!("step {step}, output {i}"), &got, &exp)?;
        }
    }
    Ok(())
}

pub(crate) fn graphed_callable_copies_only_foreign_inputs<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let f = |b: &B, x: &[&B::Buffer<f32>]| Ok(vec![affine(b, x[0], -1.0, 0.0)?]);
    let sample = vec![b.alloc_from(&[1.0; 4]).ctx("alloc")?];
    let mut g = make_graphed_callable(b, f, sample, GraphedCallableOptions::new())
        .ctx("make_graphed_callable")?;
    let static_x = g.static_inputs()[0].clone();
    b.upload(&*static_x, &[1.0, 2.0, 3.0, 4.0]).ctx("upload")?;
    let got = b
        .download(&g.call(&[&static_x]).ctx("call with static input")?[0])
        .ctx("download")?;
    same_bits("static input", &got, &[-1.0, -2.0, -3.0, -4.0])?;
    ensure(g.stats().input_copies == 0, || {
        format!("passing the static input must not copy: {:?}", g.stats())
    })?;
    let other = b.alloc_from(&[5.0; 4]).ctx("alloc")?;
    let got = b
        .download(&g.call(&[&other]).ctx("call with other input")?[0])
        .ctx("download")?;
    same_bits("foreign input", &got, &[-5.0; 4])?;
    ensure(g.stats().input_copies == 1, || {
        format!("expected one copy: {:?}", g.stats())
    })?;
    let copied = b.download(&*static_x).ctx("download static input")?;
    same_bits("static input after copy-in", &copied, &[5.0; 4])
}

pub(crate) fn graphed_callable_mode_fallback<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let calls = Cell::new(0usize);
    // Dropout stand-in: training halves, evaluation passes through.
    let module = Modal::new(
        ModuleMode::Train,
        |b: &B, mode: ModuleMode, x: &[&B::Buffer<f32>]| {
            calls.set(calls.get() + 1);
            let a = if mode == ModuleMode::Train { 0.5 } else { 1.0 };
            Ok(vec![affine(b, x[0], a, 0.0)?])
        },
    );
    let sample = vec![b.alloc_from(&[2.0; 4]).ctx("alloc")?];
    let options = GraphedCallableOptions::new().warmup_iters(1);
    let mut g = make_graphed_callable(b, module, sample, options).ctx("make_graphed_callable")?;
    ensure(g.captured_mode() == ModuleMode::Train, || {
        "captured mode must be train".into()
    })?;
    let x = b.alloc_from(&[8.0; 4]).ctx("alloc")?;
    let before = calls.get();
    let out = g.call(&[&x]).ctx("train call")?;
    ensure(out.is_replayed(), || {
        "a call in the captured mode must replay".into()
    })?;
    same_bits("train", &b.download(&out[0]).ctx("download")?, &[4.0; 4])?;
    drop(out);
    g.callable_mut().eval();
    let out = g.call(&[&x]).ctx("eval call")?;
    ensure(!out.is_replayed(), || {
        "a call in the other mode must run eagerly".into()
    })?;
    same_bits("eval", &b.download(&out[0]).ctx("download")?, &[8.0; 4])?;
    drop(out);
    ensure(calls.get() == before + 1, || {
        "the eager fallback must call the callable once".into()
    })?;
    g.callable_mut().train();
    let out = g.call(&[&x]).ctx("train call again")?;
    ensure(out.is_replayed(), || {
        "back in the captured mode, the call must replay".into()
    })?;
    same_bits(
        "train again",
        &b.download(&out[0]).ctx("download")?,
        &[4.0; 4],
    )?;
    drop(out);
    ensure(g.stats().eager_calls == 1 && g.stats().replays == 2, || {
        format!("{:?}", g.stats())
    })
}

pub(crate) fn graphed_callable_argument_errors<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let f = |b: &B, x: &[&B::Buffer<f32>]| Ok(vec![affine(b, x[0], 1.0, 1.0)?]);
    let opts = GraphedCallableOptions::new().warmup_iters(0);

    let samples = vec![
        vec![b.alloc(4).ctx("alloc")?],
        vec![b.alloc(4).ctx("alloc")?],
    ];
    let message = expect_argument_mismatch(
        "two sample lists for one callable",
        make_graphed_callables(b, vec![f], samples, opts),
    )?;
    ensure(message.contains("sample_args"), || {
        format!("message should name sample_args: {message}")
    })?;
    let none: Vec<PlainCallable<B>> = Vec::new();
    expect_argument_mismatch(
        "no callables",
        make_graphed_callables(b, none, Vec::new(), opts),
    )?;

    let sample = vec![b.alloc_from(&[0.0; 4]).ctx("alloc")?];
    let mut g = make_graphed_callable(b, f, sample, opts).ctx("make_graphed_callable")?;
    let (x, y, short) = (
        b.alloc_from(&[1.0; 4]).ctx("alloc")?,
        b.alloc_from(&[1.0; 4]).ctx("alloc")?,
        b.alloc_from(&[1.0; 3]).ctx("alloc")?,
    );
    let message = expect_argument_mismatch("two inputs for one", g.call(&[&x, &y]))?;
    ensure(
        message.contains("takes 1") && message.contains("got 2"),
        || format!("arity message should give both counts: {message}"),
    )?;
    let message = expect_argument_mismatch("short input", g.call(&[&short]))?;
    ensure(
        message.contains("3 elements") && message.contains('4'),
        || format!("length message should give both lengths: {message}"),
    )?;
    expect_argument_mismatch("no input", g.call(&[]))?;
    // Still usable after the errors.
    let out = g.call(&[&x]).ctx("call after errors")?;
    same_bits(
        "after errors",
        &b.download(&out[0]).ctx("download")?,
        &[2.0; 4],
    )
}

pub(crate) fn graphed_callables_share_one_pool<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 1000;
    let w = b.alloc_from(&data(3, n)).ctx("alloc weights")?;
    let make = |b: &B, pool_per_callable: bool| {
        let opts = GraphedCallableOptions::new().warmup_iters(1);
        let f = |b: &B, x: &[&B::Buffer<f32>]| Ok(vec![layer(b, x[0], &w)?]);
        let sample = || b.alloc_from(&data(5, n)).map(|x| vec![x]);
        if pool_per_callable {
            let first = make_graphed_callables(b, vec![f], vec![sample()?], opts)?;
            let second = make_graphed_callables(b, vec![f], vec![sample()?], opts)?;
            Ok(first.into_iter().chain(second).collect::<Vec<_>>())
        } else {
            make_graphed_callables(b, vec![f, f], vec![sample()?, sample()?], opts)
        }
    };
    let base = b.memory_stats().pool_reserved_bytes;
    let shared = make(b, false).ctx("graph two callables together")?;
    let shared_bytes = b.memory_stats().pool_reserved_bytes.saturating_sub(base);
    let p0 = shared[0].pool().ctx("pool")?;
    let p1 = shared[1].pool().ctx("pool")?;
    ensure(p0 == p1, || {
        format!("callables graphed together must share a pool: {p0} vs {p1}")
    })?;
    drop(shared);

    let base = b.memory_stats().pool_reserved_bytes;
    let separate = make(b, true).ctx("graph two callables apart")?;
    let separate_bytes = b.memory_stats().pool_reserved_bytes.saturating_sub(base);
    let p0 = separate[0].pool().ctx("pool")?;
    let p1 = separate[1].pool().ctx("pool")?;
    ensure(p0 != p1, || {
        "callables graphed apart must have their own pools".into()
    })?;
    ensure(shared_bytes > 0, || {
        "the graphs reserved no pool memory".into()
    })?;
    ensure(shared_bytes < separate_bytes, || {
        format!(
            "two graphs on one pool must reserve less than on two pools (the second reuses the \
             first's freed temporary): {shared_bytes} bytes vs {separate_bytes}"
        )
    })?;
    // Replays in capture order give the eager results.
    let x = b.alloc_from(&data(11, n)).ctx("alloc")?;
    let want = b
        .download(&layer(b, &x, &w).ctx("eager")?)
        .ctx("download")?;
    let mut separate = separate;
    for g in separate.iter_mut() {
        let got = b.download(&g.call(&[&x]).ctx("call")?[0]).ctx("download")?;
        same_bits("pooled graph", &got, &want)?;
    }
    Ok(())
}
