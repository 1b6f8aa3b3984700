//! §7 full-iteration wrapper: eager warmup steps, then the whole step captured once per stage
//! and replayed; signatures; per-stage reset; one or several pools; the static buffer loader.

use std::cell::Cell;

use accel_graph_api::{AcceleratorGraph, Backend, DeviceBuffer};
use accel_graph_utils::{
    FullGraphWrapper, SignaturePolicy, Stage, StaticBufferLoader, shared_graph_pool,
};

use super::{affine, data, ensure, expect_argument_mismatch, same_bits};
use crate::{
    Target,
    check::{CaseResult, Ctx},
};

/// A training "step" of portable ops over weights `w`, reading microbatches `[x, target]`:
/// forward `y = 0.5 x + w`, residual `r = y - target`, backward `g = 2 r / n`, optimizer
/// `w -= lr * g`. Returns `[y, r]` of the last microbatch.
fn train_step<B: Backend>(
    b: &B,
    w: &B::Buffer<f32>,
    microbatches: &[&[&B::Buffer<f32>]],
) -> accel_graph_api::Result<Vec<B::Buffer<f32>>> {
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

pub(crate) fn full_graph_warmup_then_capture_once_per_stage<B: Backend>(
    t: &Target<B>,
) -> CaseResult {
    let b = t.backend();
    let calls = [Cell::new(0u64), Cell::new(0u64)];
    let step = |b: &B, stage: Stage, mbs: &[&[&B::Buffer<f32>]]| {
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

pub(crate) fn full_graph_replay_matches_eager_100_steps<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 32;
    let init = data(99, n);
    let w_eager = b.alloc_from(&init).ctx("alloc")?;
    let w_graph = b.alloc_from(&init).ctx("alloc")?;
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer<f32>]]| train_step(b, &w_graph, mbs);
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
        let mbs: [&[&B::Buffer<f32>]; 2] = [&[&bufs[0], &bufs[1]], &[&bufs[2], &bufs[3]]];
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
fn sum_step<B: Backend>(
    b: &B,
    mbs: &[&[&B::Buffer<f32>]],
) -> accel_graph_api::Result<Vec<B::Buffer<f32>>> {
    let sum = b.alloc(mbs[0][0].len())?;
    b.fill(&sum, 0.0)?;
    for inputs in mbs {
        b.axpy(&sum, 1.0, inputs[0])?;
    }
    Ok(vec![sum])
}

pub(crate) fn full_graph_signature_recapture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer<f32>]]| sum_step(b, mbs);
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

pub(crate) fn full_graph_signature_error<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer<f32>]]| sum_step(b, mbs);
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

pub(crate) fn full_graph_reset_one_stage<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer<f32>]]| sum_step(b, mbs);
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

pub(crate) fn full_graph_single_mempool<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let step = |b: &B, _: Stage, mbs: &[&[&B::Buffer<f32>]]| sum_step(b, mbs);
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

pub(crate) fn static_buffer_loader_reuses_buffers<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
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
