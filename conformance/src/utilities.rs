//! Checks of the seed utilities (`accel_graph_api::utils`) that every backend must pass: graphed
//! callables (PyTorch's `make_graphed_callables`), the full-iteration wrapper (Megatron-Core's
//! `FullCudaGraphWrapper`) and the bucketed graph cache (vLLM's capture sizes).
//!
//! Each check is generic over the backend, uses only the `Backend` API and returns `Err` with
//! what went wrong. Results of replays are compared with eager runs bit for bit.

use std::cell::Cell;

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError,
    utils::{
        BucketedCacheOptions, BucketedGraphCache, CaptureSizes, FullGraphWrapper,
        GraphedCallableOptions, Modal, Mode, SignaturePolicy, Stage, StaticBufferLoader,
        graph_pool, make_graphed_callable, make_graphed_callables, shared_capture_stream,
        shared_graph_pool,
    },
};

/// A named check of the utilities on backend `B`.
pub type UtilityCheck<B> = (&'static str, fn(&B) -> Result<(), String>);

/// Every utility check, in a stable order: `(name, check)` pairs, where a check returns
/// `Err(message)` on failure.
pub fn utility_checks<B: Backend>() -> Vec<UtilityCheck<B>> {
    let checks: Vec<UtilityCheck<B>> = vec![
        (
            "graphed_callable_warmup_count",
            graphed_callable_warmup_count::<B>,
        ),
        (
            "graphed_callable_replay_matches_eager",
            graphed_callable_replay_matches_eager::<B>,
        ),
        (
            "graphed_callable_copies_only_foreign_inputs",
            graphed_callable_copies_only_foreign_inputs::<B>,
        ),
        (
            "graphed_callable_mode_fallback",
            graphed_callable_mode_fallback::<B>,
        ),
        (
            "graphed_callable_argument_errors",
            graphed_callable_argument_errors::<B>,
        ),
        (
            "graphed_callables_share_one_pool",
            graphed_callables_share_one_pool::<B>,
        ),
        (
            "full_graph_warmup_then_capture_once_per_stage",
            full_graph_warmup_then_capture_once_per_stage::<B>,
        ),
        (
            "full_graph_replay_matches_eager_100_steps",
            full_graph_replay_matches_eager_100_steps::<B>,
        ),
        (
            "full_graph_signature_recapture",
            full_graph_signature_recapture::<B>,
        ),
        (
            "full_graph_signature_error",
            full_graph_signature_error::<B>,
        ),
        (
            "full_graph_reset_one_stage",
            full_graph_reset_one_stage::<B>,
        ),
        ("full_graph_single_mempool", full_graph_single_mempool::<B>),
        (
            "static_buffer_loader_reuses_buffers",
            static_buffer_loader_reuses_buffers::<B>,
        ),
        (
            "shared_singletons_per_instance",
            shared_singletons_per_instance::<B>,
        ),
        (
            "bucketed_cache_pads_to_nearest_bucket",
            bucketed_cache_pads_to_nearest_bucket::<B>,
        ),
        (
            "bucketed_cache_eager_beyond_largest",
            bucketed_cache_eager_beyond_largest::<B>,
        ),
        (
            "bucketed_cache_replay_matches_eager",
            bucketed_cache_replay_matches_eager::<B>,
        ),
        (
            "bucketed_cache_argument_errors",
            bucketed_cache_argument_errors::<B>,
        ),
    ];
    checks
}

// ---------------------------------------------------------------------------------------------
// helpers

/// A callable as a plain function pointer.
type PlainCallable<B> =
    fn(&B, &[&<B as Backend>::Buffer]) -> accel_graph_api::Result<Vec<<B as Backend>::Buffer>>;

/// Adds what was being done to a backend error.
trait Context<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Context<T> for Result<T, GraphError> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(message()) }
}

/// Deterministic pseudo-random data (a 64-bit LCG), exact in f32 (multiples of 1/64).
fn data(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) % 512) as f32 / 64.0 - 4.0
        })
        .collect()
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

fn same_bits(what: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    ensure(bits(got) == bits(want), || {
        format!("{what}: replay differs from eager: got {got:?}, eager gave {want:?}")
    })
}

fn expect_argument_mismatch<T>(
    what: &str,
    result: Result<T, GraphError>,
) -> Result<String, String> {
    match result {
        Err(GraphError::ArgumentMismatch(message)) => Ok(message),
        Err(other) => Err(format!("{what}: expected ArgumentMismatch, got {other:?}")),
        Ok(_) => Err(format!("{what}: expected ArgumentMismatch, got success")),
    }
}

/// `y = a * x + c` into a new buffer: a small "layer" of portable ops.
fn affine<B: Backend>(b: &B, x: &B::Buffer, a: f32, c: f32) -> accel_graph_api::Result<B::Buffer> {
    let y = b.alloc(x.len())?;
    b.copy(&y, x)?;
    b.scale(&y, a)?;
    b.add_scalar(&y, c)?;
    Ok(y)
}

/// Two-input layer with a temporary: `t = x + 2w` (freed), `y = 0.5 t - 1` (returned).
fn layer<B: Backend>(b: &B, x: &B::Buffer, w: &B::Buffer) -> accel_graph_api::Result<B::Buffer> {
    let t = b.alloc(x.len())?;
    b.copy(&t, x)?;
    b.axpy(&t, 2.0, w)?;
    affine(b, &t, 0.5, -1.0)
}

// ---------------------------------------------------------------------------------------------
// graphed callables

fn graphed_callable_warmup_count<B: Backend>(b: &B) -> Result<(), String> {
    for warmup in [3usize, 1, 0] {
        let calls = Cell::new(0usize);
        let f = |b: &B, x: &[&B::Buffer]| {
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

fn graphed_callable_replay_matches_eager<B: Backend>(b: &B) -> Result<(), String> {
    let n = 16;
    let w = b.alloc_from(&data(7, n)).ctx("alloc weights")?;
    let f = |b: &B, x: &[&B::Buffer]| {
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

fn graphed_callable_copies_only_foreign_inputs<B: Backend>(b: &B) -> Result<(), String> {
    let f = |b: &B, x: &[&B::Buffer]| Ok(vec![affine(b, x[0], -1.0, 0.0)?]);
    let sample = vec![b.alloc_from(&[1.0; 4]).ctx("alloc")?];
    let mut g = make_graphed_callable(b, f, sample, GraphedCallableOptions::new())
        .ctx("make_graphed_callable")?;
    let static_x = g.static_inputs()[0].clone();
    b.upload(&static_x, &[1.0, 2.0, 3.0, 4.0]).ctx("upload")?;
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
    let copied = b.download(&static_x).ctx("download static input")?;
    same_bits("static input after copy-in", &copied, &[5.0; 4])
}

fn graphed_callable_mode_fallback<B: Backend>(b: &B) -> Result<(), String> {
    let calls = Cell::new(0usize);
    // Dropout stand-in: training halves, evaluation passes through.
    let module = Modal::new(Mode::Train, |b: &B, mode: Mode, x: &[&B::Buffer]| {
        calls.set(calls.get() + 1);
        let a = if mode == Mode::Train { 0.5 } else { 1.0 };
        Ok(vec![affine(b, x[0], a, 0.0)?])
    });
    let sample = vec![b.alloc_from(&[2.0; 4]).ctx("alloc")?];
    let options = GraphedCallableOptions::new().warmup_iters(1);
    let mut g = make_graphed_callable(b, module, sample, options).ctx("make_graphed_callable")?;
    ensure(g.captured_mode() == Mode::Train, || {
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

fn graphed_callable_argument_errors<B: Backend>(b: &B) -> Result<(), String> {
    let f = |b: &B, x: &[&B::Buffer]| Ok(vec![affine(b, x[0], 1.0, 1.0)?]);
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

fn graphed_callables_share_one_pool<B: Backend>(b: &B) -> Result<(), String> {
    let n = 1000;
    let w = b.alloc_from(&data(3, n)).ctx("alloc weights")?;
    let make = |b: &B, pool_per_callable: bool| {
        let opts = GraphedCallableOptions::new().warmup_iters(1);
        let f = |b: &B, x: &[&B::Buffer]| Ok(vec![layer(b, x[0], &w)?]);
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

// ---------------------------------------------------------------------------------------------
// full-iteration wrapper

/// A training "step" of portable ops over weights `w`, reading microbatches `[x, target]`:
/// forward `y = 0.5 x + w`, residual `r = y - target`, backward `g = 2 r / n`, optimizer
/// `w -= lr * g`. Returns `[y, r]` of the last microbatch.
fn train_step<B: Backend>(
    b: &B,
    w: &B::Buffer,
    microbatches: &[&[&B::Buffer]],
) -> accel_graph_api::Result<Vec<B::Buffer>> {
    let mut outputs = Vec::new();
    for inputs in microbatches {
        let y = affine(b, inputs[0], 0.5, 0.0)?;
        b.axpy(&y, 1.0, w)?;
        let r = b.alloc(y.len())?;
        b.copy(&r, &y)?;
        b.axpy(&r, -1.0, inputs[1])?;
        let g = b.alloc(r.len())?;
        b.copy(&g, &r)?;
        b.scale(&g, 2.0 / r.len() as f32)?;
        b.axpy(w, -0.125, &g)?;
        outputs = vec![y, r];
    }
    Ok(outputs)
}

fn full_graph_warmup_then_capture_once_per_stage<B: Backend>(b: &B) -> Result<(), String> {
    let calls = [Cell::new(0u64), Cell::new(0u64)];
    let step = |b: &B, stage: Stage, mbs: &[&[&B::Buffer]]| {
        let i = usize::from(stage == Stage::Validation);
        calls[i].set(calls[i].get() + 1);
        Ok(vec![affine(b, mbs[0][0], 1.0, 1.0)?])
    };
    let mut wrapper = FullGraphWrapper::new(b, step)
        .ctx("wrapper")?
        .warmup_steps(2);
    let x = b.alloc_from(&[1.0; 4]).ctx("alloc")?;
    for i in 0..6u64 {
        let out = wrapper
            .run(Stage::Training, &[&[&x]])
            .ctx("training step")?;
        same_bits(
            &format!("training step {i}"),
            &b.download(&out[0]).ctx("download")?,
            &[2.0; 4],
        )?;
        ensure(wrapper.is_captured(Stage::Training) == (i >= 2), || {
            format!("step {i}: captured must be {}", i >= 2)
        })?;
    }
    ensure(calls[0].get() == 3, || {
        format!(
            "2 warmup steps + 1 capture = 3 calls of the step, got {}",
            calls[0].get()
        )
    })?;
    let t = Stage::Training;
    ensure(
        (
            wrapper.iteration(t),
            wrapper.eager_steps(t),
            wrapper.captures(t),
            wrapper.replays(t),
        ) == (6, 2, 1, 4),
        || {
            format!(
                "training counters (iteration, eager, captures, replays) = {:?}",
                (
                    wrapper.iteration(t),
                    wrapper.eager_steps(t),
                    wrapper.captures(t),
                    wrapper.replays(t)
                )
            )
        },
    )?;
    ensure(
        calls[1].get() == 0 && wrapper.iteration(Stage::Validation) == 0,
        || "validation must be untouched by training steps".into(),
    )?;
    for _ in 0..4 {
        wrapper
            .run(Stage::Validation, &[&[&x]])
            .ctx("validation step")?;
    }
    ensure(
        calls[1].get() == 3 && wrapper.captures(Stage::Validation) == 1,
        || {
            format!(
                "validation: {} calls, {} captures",
                calls[1].get(),
                wrapper.captures(Stage::Validation)
            )
        },
    )?;
    ensure(wrapper.captures(Stage::Training) == 1, || {
        "training must not capture again".into()
    })
}

fn full_graph_replay_matches_eager_100_steps<B: Backend>(b: &B) -> Result<(), String> {
    let n = 32;
    let init = data(99, n);
    let w_eager = b.alloc_from(&init).ctx("alloc")?;
    let w_graph = b.alloc_from(&init).ctx("alloc")?;
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer]]| train_step(b, &w_graph, mbs);
    let mut wrapper = FullGraphWrapper::new(b, step)
        .ctx("wrapper")?
        .warmup_steps(3);
    for s in 0..100u64 {
        let host: Vec<Vec<f32>> = (0..4).map(|k| data(1000 + 4 * s + k, n)).collect();
        let bufs = host
            .iter()
            .map(|h| b.alloc_from(h))
            .collect::<accel_graph_api::Result<Vec<_>>>()
            .ctx("alloc inputs")?;
        let mbs: [&[&B::Buffer]; 2] = [&[&bufs[0], &bufs[1]], &[&bufs[2], &bufs[3]]];
        let want = train_step(b, &w_eager, &mbs).ctx("eager step")?;
        let got = wrapper.run(Stage::Training, &mbs).ctx("wrapped step")?;
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            let (g, e) = (
                b.download(g).ctx("download")?,
                b.download(e).ctx("download")?,
            );
            same_bits(&format!("step {s}, output {i}"), &g, &e)?;
        }
    }
    let (we, wg) = (
        b.download(&w_eager).ctx("download")?,
        b.download(&w_graph).ctx("download")?,
    );
    same_bits("weights after 100 steps", &wg, &we)?;
    ensure(
        wrapper.captures(Stage::Training) == 1 && wrapper.replays(Stage::Training) == 97,
        || {
            format!(
                "captures {}, replays {}",
                wrapper.captures(Stage::Training),
                wrapper.replays(Stage::Training)
            )
        },
    )
}

/// A step summing its microbatches' first inputs.
fn sum_step<B: Backend>(b: &B, mbs: &[&[&B::Buffer]]) -> accel_graph_api::Result<Vec<B::Buffer>> {
    let sum = b.alloc(mbs[0][0].len())?;
    b.fill(&sum, 0.0)?;
    for inputs in mbs {
        b.axpy(&sum, 1.0, inputs[0])?;
    }
    Ok(vec![sum])
}

fn full_graph_signature_recapture<B: Backend>(b: &B) -> Result<(), String> {
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer]]| sum_step(b, mbs);
    let mut wrapper = FullGraphWrapper::new(b, step)
        .ctx("wrapper")?
        .warmup_steps(0)
        .signature_policy(SignaturePolicy::Recapture);
    let (a, c) = (
        b.alloc_from(&[1.0; 4]).ctx("alloc")?,
        b.alloc_from(&[2.0; 4]).ctx("alloc")?,
    );
    let out = wrapper
        .run(Stage::Training, &[&[&a], &[&c]])
        .ctx("two microbatches")?;
    same_bits(
        "two microbatches",
        &b.download(&out[0]).ctx("download")?,
        &[3.0; 4],
    )?;
    let out = wrapper
        .run(Stage::Training, &[&[&a], &[&c], &[&c]])
        .ctx("three microbatches")?;
    same_bits(
        "three microbatches",
        &b.download(&out[0]).ctx("download")?,
        &[5.0; 4],
    )?;
    ensure(wrapper.captures(Stage::Training) == 2, || {
        format!(
            "a new microbatch count must recapture: {} captures",
            wrapper.captures(Stage::Training)
        )
    })?;
    let (a6, c6) = (
        b.alloc_from(&[1.0; 6]).ctx("alloc")?,
        b.alloc_from(&[4.0; 6]).ctx("alloc")?,
    );
    let out = wrapper
        .run(Stage::Training, &[&[&a6], &[&c6], &[&c6]])
        .ctx("longer inputs")?;
    same_bits(
        "longer inputs",
        &b.download(&out[0]).ctx("download")?,
        &[9.0; 6],
    )?;
    ensure(wrapper.captures(Stage::Training) == 3, || {
        "new input lengths must recapture".into()
    })?;
    let sig = wrapper
        .signature(Stage::Training)
        .ok_or("no signature after capture")?;
    ensure(
        sig.microbatches() == 3 && sig.input_lens()[0] == [6],
        || format!("signature {sig}"),
    )
}

fn full_graph_signature_error<B: Backend>(b: &B) -> Result<(), String> {
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer]]| sum_step(b, mbs);
    let mut wrapper = FullGraphWrapper::new(b, step)
        .ctx("wrapper")?
        .warmup_steps(1)
        .signature_policy(SignaturePolicy::Error);
    let (a, c) = (
        b.alloc_from(&[1.0; 4]).ctx("alloc")?,
        b.alloc_from(&[2.0; 4]).ctx("alloc")?,
    );
    for _ in 0..2 {
        wrapper
            .run(Stage::Validation, &[&[&a], &[&c]])
            .ctx("step")?;
    }
    let message = expect_argument_mismatch(
        "three microbatches after capturing two",
        wrapper.run(Stage::Validation, &[&[&a], &[&c], &[&c]]),
    )?;
    ensure(
        message.contains("validation") && message.contains("reset"),
        || format!("the message should name the stage and the way out: {message}"),
    )?;
    let short = b.alloc_from(&[1.0; 3]).ctx("alloc")?;
    expect_argument_mismatch(
        "shorter input",
        wrapper.run(Stage::Validation, &[&[&short], &[&c]]),
    )?;
    ensure(wrapper.iteration(Stage::Validation) == 2, || {
        "failed steps must not count".into()
    })?;
    // The captured graph still serves its signature, and reset lets the new one capture.
    let out = wrapper
        .run(Stage::Validation, &[&[&c], &[&c]])
        .ctx("step after errors")?;
    same_bits(
        "after errors",
        &b.download(&out[0]).ctx("download")?,
        &[4.0; 4],
    )?;
    wrapper.reset(Stage::Validation);
    let out = wrapper
        .run(Stage::Validation, &[&[&a], &[&c], &[&c]])
        .ctx("step after reset")?;
    same_bits(
        "after reset",
        &b.download(&out[0]).ctx("download")?,
        &[5.0; 4],
    )?;
    ensure(wrapper.captures(Stage::Validation) == 2, || {
        "reset must lead to a new capture".into()
    })
}

fn full_graph_reset_one_stage<B: Backend>(b: &B) -> Result<(), String> {
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer]]| sum_step(b, mbs);
    let mut wrapper = FullGraphWrapper::new(b, step)
        .ctx("wrapper")?
        .warmup_steps(0);
    let x = b.alloc_from(&[1.0; 4]).ctx("alloc")?;
    for stage in Stage::ALL {
        wrapper.run(stage, &[&[&x]]).ctx("step")?;
    }
    wrapper.reset(Stage::Training);
    ensure(
        !wrapper.is_captured(Stage::Training) && wrapper.is_captured(Stage::Validation),
        || "reset(training) must drop only the training graph".into(),
    )?;
    ensure(wrapper.static_buffers(Stage::Training).is_empty(), || {
        "reset must drop static buffers".into()
    })?;
    wrapper
        .run(Stage::Training, &[&[&x]])
        .ctx("step after reset")?;
    ensure(
        wrapper.captures(Stage::Training) == 2 && wrapper.captures(Stage::Validation) == 1,
        || "the reset stage captures again, the other does not".into(),
    )?;
    wrapper.reset_all();
    ensure(Stage::ALL.iter().all(|s| !wrapper.is_captured(*s)), || {
        "reset_all must drop both graphs".into()
    })
}

fn full_graph_single_mempool<B: Backend>(b: &B) -> Result<(), String> {
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer]]| sum_step(b, mbs);
    let x = b.alloc_from(&[1.0; 4]).ctx("alloc")?;
    let pools =
        |single: bool| -> Result<(accel_graph_api::PoolId, accel_graph_api::PoolId), String> {
            let mut wrapper = FullGraphWrapper::new(b, step)
                .ctx("wrapper")?
                .warmup_steps(0)
                .use_single_mempool(single);
            for stage in Stage::ALL {
                wrapper.run(stage, &[&[&x]]).ctx("step")?;
            }
            let pool = |s| {
                wrapper
                    .graph(s)
                    .ok_or("no graph".to_string())?
                    .pool()
                    .ctx("pool")
            };
            Ok((pool(Stage::Training)?, pool(Stage::Validation)?))
        };
    let (t, v) = pools(true)?;
    ensure(t == v && t == shared_graph_pool(b), || {
        format!("use_single_mempool: both stages must use the shared pool, got {t} and {v}")
    })?;
    let (t, v) = pools(false)?;
    ensure(t != v, || {
        "without use_single_mempool each capture gets a pool of its own".into()
    })
}

fn static_buffer_loader_reuses_buffers<B: Backend>(b: &B) -> Result<(), String> {
    let mut loader = StaticBufferLoader::new(b).ctx("loader")?;
    let (x, y) = (
        b.alloc_from(&[1.0; 4]).ctx("alloc")?,
        b.alloc_from(&[2.0; 2]).ctx("alloc")?,
    );
    let first: Vec<u64> = loader
        .load(Stage::Training, 0, &[&x, &y])
        .ctx("first load")?
        .iter()
        .map(|s| s.device_address())
        .collect();
    ensure(!first.contains(&x.device_address()), || {
        "the first load must allocate static buffers".into()
    })?;
    let (x2, y2) = (
        b.alloc_from(&[3.0; 4]).ctx("alloc")?,
        b.alloc_from(&[4.0; 2]).ctx("alloc")?,
    );
    let statics = loader
        .load(Stage::Training, 0, &[&x2, &y2])
        .ctx("second load")?;
    let again: Vec<u64> = statics.iter().map(|s| s.device_address()).collect();
    ensure(again == first, || {
        "later loads must reuse the static buffers".into()
    })?;
    same_bits(
        "static 0",
        &b.download(&statics[0]).ctx("download")?,
        &[3.0; 4],
    )?;
    same_bits(
        "static 1",
        &b.download(&statics[1]).ctx("download")?,
        &[4.0; 2],
    )?;
    expect_argument_mismatch(
        "microbatch 2 before 1",
        loader.load(Stage::Training, 2, &[&x, &y]),
    )?;
    expect_argument_mismatch("other lengths", loader.load(Stage::Training, 0, &[&y, &x]))?;
    expect_argument_mismatch("fewer inputs", loader.load(Stage::Training, 0, &[&x]))?;
    ensure(loader.buffers(Stage::Validation).is_empty(), || {
        "stages must not share buffers".into()
    })?;
    loader.load(Stage::Training, 1, &[&x]).ctx("microbatch 1")?;
    ensure(loader.buffers(Stage::Training).len() == 2, || {
        "two microbatches expected".into()
    })?;
    loader.clear(Stage::Training);
    ensure(loader.buffers(Stage::Training).is_empty(), || {
        "clear must drop the buffers".into()
    })
}

fn shared_singletons_per_instance<B: Backend>(b: &B) -> Result<(), String> {
    let s1 = shared_capture_stream(b).ctx("shared stream")?;
    let s2 = shared_capture_stream(&b.clone()).ctx("shared stream of a clone")?;
    ensure(s1 == s2, || {
        "clones of a backend must share the capture stream".into()
    })?;
    ensure(s1 != b.default_stream(), || {
        "the capture stream cannot be the default stream".into()
    })?;
    let from_thread = std::thread::scope(|scope| scope.spawn(|| shared_capture_stream(b)).join());
    let s3 = from_thread
        .map_err(|_| "thread panicked".to_string())?
        .ctx("shared stream from a thread")?;
    ensure(s1 == s3, || {
        "the capture stream is process-wide, not per thread".into()
    })?;
    let p = shared_graph_pool(b);
    ensure(p.is_user() && p == shared_graph_pool(&b.clone()), || {
        "one shared pool per instance".into()
    })?;
    ensure(graph_pool(b, true) == p, || {
        "graph_pool(true) is the shared pool".into()
    })?;
    let (a, c) = (graph_pool(b, false), graph_pool(b, false));
    ensure(a != c && a != p, || {
        "graph_pool(false) is a new pool each call".into()
    })
}

// ---------------------------------------------------------------------------------------------
// bucketed cache

/// Inputs of 2 and 1 elements per row, outputs `[x0 + 1, x1]` of the same widths.
fn rows_model<B: Backend>(b: &B, x: &[&B::Buffer]) -> accel_graph_api::Result<Vec<B::Buffer>> {
    let y = affine(b, x[0], 2.0, 1.0)?;
    b.axpy(&y, -1.0, x[0])?;
    Ok(vec![y, affine(b, x[1], 1.0, 0.0)?])
}

fn bucketed_cache_pads_to_nearest_bucket<B: Backend>(b: &B) -> Result<(), String> {
    let sizes = CaptureSizes::new([2, 4, 8]).ctx("sizes")?;
    let f = |b: &B, x: &[&B::Buffer]| rows_model(b, x);
    let opts = BucketedCacheOptions::new().pad_value(7.0);
    let mut cache = BucketedGraphCache::new(b, f, sizes, vec![2, 1], opts).ctx("cache")?;
    let x0: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let run = cache.run(&[&x0, &[1.0, 2.0, 3.0]]).ctx("batch of 3")?;
    ensure(run.bucket() == Some(4) && run.batch() == 3, || {
        format!("bucket {:?}", run.bucket())
    })?;
    ensure(run.outputs().is_replayed(), || {
        "a bucketed run must replay".into()
    })?;
    ensure(run.outputs()[0].len() == 8, || {
        "the static output holds the whole bucket".into()
    })?;
    let y = run.download(0).ctx("download")?;
    same_bits("padded output 0", &y, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    same_bits(
        "padded output 1",
        &run.download(1).ctx("download")?,
        &[1.0, 2.0, 3.0],
    )?;
    // The padding rows ran on the pad value.
    let full = b.download(&run.outputs()[1]).ctx("download")?;
    same_bits("padding row", &full[3..], &[7.0])?;
    drop(run);
    let s = cache.stats();
    ensure(
        (s.runs, s.captures, s.hits, s.pads, s.padded_elements) == (1, 1, 0, 1, 3),
        || format!("after one padded run: {s:?} (padding: 1 row of 2 + 1 row of 1 elements)"),
    )?;
    cache.run(&[&[1.0; 8], &[1.0; 4]]).ctx("batch of 4")?;
    cache.run(&[&[1.0; 2], &[1.0; 1]]).ctx("batch of 1")?;
    let s = cache.stats();
    ensure((s.runs, s.captures, s.hits, s.pads) == (3, 2, 1, 2), || {
        format!("{s:?}")
    })?;
    ensure(cache.captured_buckets() == [2, 4], || {
        format!("{:?}", cache.captured_buckets())
    })?;
    for bucket in cache.captured_buckets() {
        let pool = cache.graph(bucket).ok_or("graph")?.pool().ctx("pool")?;
        ensure(pool == cache.pool(), || {
            format!("bucket {bucket} is not on the shared pool")
        })?;
    }
    ensure(cache.capture_all().ctx("capture_all")? == 1, || {
        "capture_all captures only 8".into()
    })
}

fn bucketed_cache_eager_beyond_largest<B: Backend>(b: &B) -> Result<(), String> {
    let calls = Cell::new(0usize);
    let f = |b: &B, x: &[&B::Buffer]| {
        calls.set(calls.get() + 1);
        rows_model(b, x)
    };
    let sizes = CaptureSizes::new([1, 2]).ctx("sizes")?;
    let opts = BucketedCacheOptions::new().warmup_iters(0);
    let mut cache = BucketedGraphCache::new(b, f, sizes, vec![2, 1], opts).ctx("cache")?;
    let run = cache.run(&[&[1.0; 6], &[2.0; 3]]).ctx("batch of 3")?;
    ensure(
        run.bucket().is_none() && !run.outputs().is_replayed(),
        || "3 > 2 must run eagerly".into(),
    )?;
    same_bits("eager", &run.download(0).ctx("download")?, &[2.0; 6])?;
    same_bits("eager", &run.download(1).ctx("download")?, &[2.0; 3])?;
    drop(run);
    let device_x = (
        b.alloc_from(&[1.0; 8]).ctx("alloc")?,
        b.alloc_from(&[1.0; 4]).ctx("alloc")?,
    );
    let run = cache
        .run_device(&[&device_x.0, &device_x.1])
        .ctx("device batch of 4")?;
    ensure(run.bucket().is_none(), || "4 > 2 must run eagerly".into())?;
    drop(run);
    let s = cache.stats();
    ensure(
        s.eager_fallbacks == 2 && s.captures == 0 && calls.get() == 2,
        || format!("{s:?}, {} calls", calls.get()),
    )
}

fn bucketed_cache_replay_matches_eager<B: Backend>(b: &B) -> Result<(), String> {
    let sizes = CaptureSizes::new([1, 2, 4, 8]).ctx("sizes")?;
    let f = |b: &B, x: &[&B::Buffer]| rows_model(b, x);
    let mut cache = BucketedGraphCache::new(b, f, sizes, vec![2, 1], BucketedCacheOptions::new())
        .ctx("cache")?;
    ensure(cache.capture_all().ctx("capture_all")? == 4, || {
        "4 buckets to capture".into()
    })?;
    for step in 0..60u64 {
        let batch = 1 + (step as usize * 7) % 10; // 1..=10: padded, exact and eager batches
        let x0 = data(step, 2 * batch);
        let x1 = data(step + 500, batch);
        let dx0 = b.alloc_from(&x0).ctx("alloc")?;
        let dx1 = b.alloc_from(&x1).ctx("alloc")?;
        let want = rows_model(b, &[&dx0, &dx1]).ctx("eager")?;
        for device in [false, true] {
            let run = if device {
                cache.run_device(&[&dx0, &dx1]).ctx("run_device")?
            } else {
                cache.run(&[&x0, &x1]).ctx("run")?
            };
            for (i, e) in want.iter().enumerate() {
                let exp = b.download(e).ctx("download")?;
                same_bits(
                    &format!("batch {batch}, output {i}"),
                    &run.download(i).ctx("download")?,
                    &exp,
                )?;
            }
        }
    }
    let s = cache.stats();
    ensure(
        s.captures == 4 && s.hits + s.eager_fallbacks == s.runs && s.eager_fallbacks > 0,
        || format!("{s:?}"),
    )
}

fn bucketed_cache_argument_errors<B: Backend>(b: &B) -> Result<(), String> {
    let f = |b: &B, x: &[&B::Buffer]| rows_model(b, x);
    let sizes = CaptureSizes::new([4]).ctx("sizes")?;
    expect_argument_mismatch(
        "zero width",
        BucketedGraphCache::new(b, f, sizes.clone(), vec![2, 0], BucketedCacheOptions::new()),
    )?;
    expect_argument_mismatch("no sizes", CaptureSizes::new(Vec::<usize>::new()))?;
    let mut cache = BucketedGraphCache::new(b, f, sizes, vec![2, 1], BucketedCacheOptions::new())
        .ctx("cache")?;
    expect_argument_mismatch("one input of two", cache.run(&[&[1.0; 4]]))?;
    expect_argument_mismatch("half a row", cache.run(&[&[1.0; 3], &[1.0; 2]]))?;
    expect_argument_mismatch("rows disagree", cache.run(&[&[1.0; 4], &[1.0; 3]]))?;
    expect_argument_mismatch("empty batch", cache.run(&[&[], &[]]))?;
    let odd = |b: &B, x: &[&B::Buffer]| Ok(vec![b.alloc(x[0].len() + 1)?]);
    let mut odd_cache = BucketedGraphCache::new(
        b,
        odd,
        CaptureSizes::new([2]).ctx("sizes")?,
        vec![1],
        BucketedCacheOptions::new().warmup_iters(0),
    )
    .ctx("cache")?;
    expect_argument_mismatch("output not whole rows", odd_cache.run(&[&[1.0; 2]]))?;
    let run = cache
        .run(&[&[1.0; 4], &[1.0; 2]])
        .ctx("valid run after errors")?;
    same_bits("after errors", &run.download(1).ctx("download")?, &[1.0; 2])
}
