//! §7 bucketed graph cache: one graph per batch-size bucket, inputs padded up to the nearest
//! captured size, eager beyond the largest, argument errors.

use std::cell::Cell;

use accel_graph_api::{AcceleratorGraph, Backend, DeviceBuffer};
use accel_graph_utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes};

use super::{affine, data, ensure, expect_argument_mismatch, same_bits};
use crate::{
    Target,
    check::{CaseResult, Ctx},
};

/// Inputs of 2 and 1 elements per row, outputs `[x0 + 1, x1]` of the same widths.
fn rows_model<B: Backend>(
    b: &B,
    x: &[&B::Buffer<f32>],
) -> accel_graph_api::Result<Vec<B::Buffer<f32>>> {
    let y = affine(b, x[0], 2.0, 1.0)?;
    b.axpy(&y, -1.0, x[0])?;
    Ok(vec![y, affine(b, x[1], 1.0, 0.0)?])
}

pub(crate) fn bucketed_cache_pads_to_nearest_bucket<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let sizes = CaptureSizes::new([2, 4, 8]).ctx("sizes")?;
    let f = |b: &B, x: &[&B::Buffer<f32>]| rows_model(b, x);
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

pub(crate) fn bucketed_cache_eager_beyond_largest<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let calls = Cell::new(0usize);
    let f = |b: &B, x: &[&B::Buffer<f32>]| {
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

pub(crate) fn bucketed_cache_replay_matches_eager<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let sizes = CaptureSizes::new([1, 2, 4, 8]).ctx("sizes")?;
    let f = |b: &B, x: &[&B::Buffer<f32>]| rows_model(b, x);
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

pub(crate) fn bucketed_cache_argument_errors<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let f = |b: &B, x: &[&B::Buffer<f32>]| rows_model(b, x);
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
    let odd = |b: &B, x: &[&B::Buffer<f32>]| Ok(vec![b.alloc(x[0].len() + 1)?]);
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

/// §16.21: with shared executables, buckets of one topology run on one executable switched by
/// updates, and every run equals the run of a cache with an executable per bucket, bit for
/// bit; `precapture` captures every bucket when the cache is made.
pub(crate) fn bucketed_cache_shares_executables<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let sizes = CaptureSizes::new([1, 2, 3, 4, 6, 8]).ctx("sizes")?;
    let f = |b: &B, x: &[&B::Buffer<f32>]| rows_model(b, x);
    let opts = BucketedCacheOptions::new().pad_value(0.5).warmup_iters(0);
    let mut separate =
        BucketedGraphCache::new(b, f, sizes.clone(), vec![2, 1], opts).ctx("separate cache")?;
    let mut shared = BucketedGraphCache::new(
        b,
        f,
        sizes.clone(),
        vec![2, 1],
        opts.share_executables(true),
    )
    .ctx("shared cache")?;
    ensure(shared.captured_buckets().is_empty(), || {
        "a lazy cache captures nothing before its first run".into()
    })?;
    let batches = [3, 1, 8, 2, 3, 5, 6, 1, 4, 8, 8];
    for (i, &batch) in batches.iter().enumerate() {
        let x0 = data(i as u64, batch * 2);
        let x1 = data(100 + i as u64, batch);
        let want = {
            let run = separate.run(&[&x0, &x1]).ctx("separate run")?;
            (
                run.download(0).ctx("download")?,
                run.download(1).ctx("download")?,
            )
        };
        let run = shared.run(&[&x0, &x1]).ctx("shared run")?;
        ensure(run.outputs().is_replayed(), || {
            format!("batch {batch}: a bucketed run must replay")
        })?;
        same_bits(
            &format!("batch {batch}, output 0"),
            &run.download(0).ctx("download")?,
            &want.0,
        )?;
        same_bits(
            &format!("batch {batch}, output 1"),
            &run.download(1).ctx("download")?,
            &want.1,
        )?;
    }
    let (s, r) = (shared.stats(), separate.stats());
    let buckets = shared.captured_buckets().len();
    ensure(
        buckets == 6 && shared.executables() == 1 && s.instantiations == 1,
        || {
            format!(
                "{buckets} buckets of one topology: one executable expected, got {} ({s})",
                shared.executables()
            )
        },
    )?;
    ensure(r.instantiations == 6 && separate.executables() == 6, || {
        format!("the separate cache instantiates every bucket: {r}")
    })?;
    // Consecutive runs of one bucket switch nothing: batches 8, 8 at the end.
    ensure(s.updates < batches.len() as u64, || {
        format!("a run of the bucket already loaded must not update: {s}")
    })?;
    let eager = BucketedGraphCache::new(
        b,
        f,
        sizes,
        vec![2, 1],
        opts.share_executables(true).precapture(true),
    )
    .ctx("precaptured cache")?;
    ensure(
        eager.captured_buckets() == vec![1, 2, 3, 4, 6, 8] && eager.stats().instantiations == 1,
        || {
            format!(
                "precapture: {:?}, {}",
                eager.captured_buckets(),
                eager.stats()
            )
        },
    )
}
