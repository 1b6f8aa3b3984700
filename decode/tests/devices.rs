//! The engine on real backends: graphed equals eager bit for bit, and both follow the host
//! reference within the devices' rounding (their GEMMs sum in other orders; `expf` differs in
//! the last bits). wgpu runs on any Vulkan adapter (lavapipe in CI); CUDA needs an NVIDIA GPU.
//! A backend without a device says so and checks nothing.
// Monomorphizing the engine over the wgpu backend proves `Send + Sync` through wgpu-core's
// resource types, deeper than the default limit allows in a debug build.
#![recursion_limit = "256"]

mod common;

use std::sync::{Mutex, MutexGuard};

use accel_graph::{GraphError, Result, half::bf16};
use accel_graph_decode::Config;
use common::{chunked, device_agreement, engine, long, odd, options, wide};

/// One test at a time on the devices: the engine captures in the global mode, where another
/// thread's download or synchronization on the same device (a test beside it) is unsafe and
/// ends the capture, so the step would fall back to eager.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static DEVICES: Mutex<()> = Mutex::new(());
    DEVICES.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn wgpu_f32_follows_the_reference_and_graphed_equals_eager() -> Result<()> {
    let _devices = one_at_a_time();
    let b = match accel_graph::wgpu::WgpuBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no wgpu adapter here ({e})");
            return Ok(());
        }
    };
    for batch in [1, 3, 5] {
        for fused_rows in [8, 0] {
            let a = device_agreement::<_, f32>(&b, Config::tiny(), batch, 12, fused_rows)?;
            eprintln!("wgpu f32 batch {batch} fused rows {fused_rows}: {a:?}");
            assert!(a.worst_relative < 1e-4, "batch {batch}: {a:?}");
            assert!(a.same_tokens >= a.rows - 1, "batch {batch}: {a:?}");
        }
    }
    // Attention split over chunks (of 16 positions: three chunks in 40 steps).
    let a = device_agreement::<_, f32>(&b, chunked(), 3, 40, 8)?;
    eprintln!("wgpu f32 split attention: {a:?}");
    assert!(a.worst_relative < 1e-4, "split attention: {a:?}");
    assert!(a.same_tokens >= a.rows - 2, "split attention: {a:?}");
    Ok(())
}

#[test]
fn wgpu_refuses_bf16_with_unsupported() {
    let _devices = one_at_a_time();
    let Ok(b) = accel_graph::wgpu::WgpuBackend::new(0) else {
        eprintln!("skipped: no wgpu adapter here");
        return;
    };
    match engine::<_, bf16>(&b, options()) {
        Err(GraphError::Unsupported { what }) => assert!(what.contains("WGSL"), "{what}"),
        other => panic!("expected Unsupported, got {:?}", other.map(drop)),
    }
}

#[test]
fn cuda_follows_the_reference_and_graphed_equals_eager() -> Result<()> {
    let _devices = one_at_a_time();
    let b = match accel_graph::cuda::CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device here ({e})");
            return Ok(());
        }
    };
    // Fused rows 8 and 64: the small-batch projections (16-byte loads, one row a pass at
    // batch 1, two at batch 2 (`wide` too); at larger batches four rows a pass in f32, batch 5
    // in two passes, and tiles of 16 rows on tensor cores in bf16, batch 37 in three; `odd`
    // loads one element at a time, in four rows a pass in both; `wide` at batch 13 the tiles
    // over a long `k`); 0: cuBLAS.
    for (config, batch, steps, fused_rows) in [
        (Config::tiny(), 1, 32, 8),
        (Config::tiny(), 2, 32, 8),
        (Config::tiny(), 3, 32, 8),
        (Config::tiny(), 5, 32, 8),
        (Config::tiny(), 13, 24, 64),
        (Config::tiny(), 37, 16, 64),
        (Config::tiny(), 5, 32, 0),
        (chunked(), 3, 40, 8),
        (long(), 3, 400, 8),
        (long(), 3, 400, 0),
        (wide(), 2, 8, 8),
        (wide(), 8, 12, 8),
        (wide(), 13, 6, 64),
        (odd(), 5, 16, 8),
    ] {
        let a = device_agreement::<_, f32>(&b, config, batch, steps, fused_rows)?;
        eprintln!(
            "cuda f32 hidden {} max_len {} batch {batch} fused rows {fused_rows}: {a:?}",
            config.hidden, config.max_len
        );
        assert!(a.worst_relative < 1e-4, "f32 batch {batch}: {a:?}");
        assert!(a.same_tokens + 2 >= a.rows, "f32 batch {batch}: {a:?}");
        let a = device_agreement::<_, bf16>(&b, config, batch, steps, fused_rows)?;
        eprintln!(
            "cuda bf16 hidden {} max_len {} batch {batch} fused rows {fused_rows}: {a:?}",
            config.hidden, config.max_len
        );
        assert!(a.worst_relative < 5e-2, "bf16 batch {batch}: {a:?}");
        assert!(
            a.same_tokens * 10 >= a.rows * 9,
            "bf16 batch {batch}: {a:?}"
        );
    }
    Ok(())
}

/// The fused projections over rows of no elements (`k` 0) write products of 0, as the host
/// does (an RMSNorm of an empty row multiplies nothing): on the mock, and on a GPU where one
/// is present.
fn empty_rows_project_to_zero<B: accel_graph::Backend>(b: &B) -> Result<()> {
    use accel_graph_decode::model::kernels::Kernels;
    let kernels = Kernels::get::<f32>();
    let (rows, n) = (3, 5);
    for rows_a_pass in [1, rows] {
        let p = kernels.projections(rows_a_pass);
        let empty = b.alloc::<f32>(0)?;
        let out = b.alloc::<f32>(rows * n)?;
        b.upload(&out, &vec![f32::NAN; rows * n])?;
        p.issue_norm_linear(b, &out, &empty, &empty, &empty, rows, n, 0, 1e-5)?;
        assert_eq!(b.download(&out)?, vec![0.0; rows * n], "norm_linear");
        b.upload(&out, &vec![f32::NAN; rows * n])?;
        p.issue_norm_gate_up(b, &out, &empty, &empty, &empty, rows, n, 0, 1e-5)?;
        assert_eq!(b.download(&out)?, vec![0.0; rows * n], "norm_gate_up");
    }
    Ok(())
}

#[test]
fn projections_of_empty_rows_are_zero() -> Result<()> {
    let _devices = one_at_a_time();
    empty_rows_project_to_zero(&accel_graph::mock::MockBackend::new())?;
    match accel_graph::cuda::CudaBackend::new(0) {
        Ok(b) => empty_rows_project_to_zero(&b),
        Err(e) => {
            eprintln!("skipped on CUDA: no CUDA device here ({e})");
            Ok(())
        }
    }
}

/// Sizes of the attention launches below: two rows over a cache of two slots.
const ROWS: u32 = 2;
const HEADS: u32 = 4;
const HEAD_DIM: u32 = 16;
const MAX_LEN: u32 = 8;
const SLOTS: u32 = 2;
const SPLITS: u32 = 3;
/// Elements past each output's end, which no launch may write.
const TAIL: usize = 64;
const SENTINEL: f32 = 7.5;

/// A buffer of `n` elements of `seed`-dependent values in [-1, 1).
fn values<B: accel_graph::Backend>(b: &B, n: usize, seed: u32) -> Result<B::Buffer<f32>> {
    let v: Vec<f32> = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 2000) as f32 / 1000.0 - 1.0)
        .collect();
    b.alloc_from(&v)
}

/// The attention kernels launched over `grid_extra` more blocks in each direction than their
/// sizes need, with `kv_heads` key/value heads: their outputs (with a tail past the end,
/// sentinel-filled first). The one-pass output, the partials and the merged output.
fn attention_outputs<B: accel_graph::Backend>(
    b: &B,
    grid_extra: u32,
    kv_heads: u32,
) -> Result<[Vec<f32>; 3]> {
    use accel_graph::kernel::KernelArg;
    use accel_graph_decode::model::kernels::{Kernels, attention::partial_len};
    let kernels = Kernels::get::<f32>();
    // Room for three key/value heads, so that every launch below passes the extent checks.
    let cache = (SLOTS * 3 * MAX_LEN * HEAD_DIM) as usize;
    let q = values(b, (ROWS * HEADS * HEAD_DIM) as usize, 1)?;
    let (k_cache, v_cache) = (values(b, cache, 2)?, values(b, cache, 3)?);
    // Token, position, length and slot of each row.
    let meta = b.alloc_from(&[0u32, 0, 4, 6, 5, 7, 0, 1])?;
    let sentinel = |n: usize| b.alloc_from(&vec![SENTINEL; n + TAIL]);
    let out_len = (ROWS * HEADS * HEAD_DIM) as usize;
    let partials_len = (ROWS * HEADS * SPLITS) as usize * partial_len(HEAD_DIM as usize);
    let (one_pass, partials, merged) = (
        sentinel(out_len)?,
        sentinel(partials_len)?,
        sentinel(out_len)?,
    );
    let u = |v: u32| KernelArg::scalar(v);
    let shared = |out| {
        vec![
            KernelArg::buffer(out),
            KernelArg::buffer(&q),
            KernelArg::buffer(&k_cache),
            KernelArg::buffer(&v_cache),
            KernelArg::buffer(&meta),
            u(ROWS),
            u(HEADS),
            u(kv_heads),
            u(HEAD_DIM),
            u(MAX_LEN),
            u(SLOTS),
            KernelArg::scalar(0.25f32),
        ]
    };
    let e = grid_extra;
    b.launch_kernel(
        &kernels.attention,
        [HEADS + e, ROWS + e, 1 + e],
        &shared(&one_pass),
    )?;
    let mut split_args = shared(&partials);
    split_args.extend([u(3), u(SPLITS)]);
    b.launch_kernel(
        &kernels.attention_split,
        [HEADS + e, ROWS + e, SPLITS + e],
        &split_args,
    )?;
    b.launch_kernel(
        &kernels.attention_combine,
        [HEADS + e, ROWS + e, 1 + e],
        &[
            KernelArg::buffer(&merged),
            KernelArg::buffer(&partials),
            u(ROWS),
            u(HEADS),
            u(HEAD_DIM),
            u(SPLITS),
        ],
    )?;
    Ok([
        b.download(&one_pass)?,
        b.download(&partials)?,
        b.download(&merged)?,
    ])
}

/// A grid larger than the sizes changes nothing and writes nothing past the outputs; query
/// heads that are not groups of the key/value heads write nothing at all.
fn attention_stays_in_its_sizes<B: accel_graph::Backend>(b: &B) -> Result<()> {
    let exact = attention_outputs(b, 0, 2)?;
    for (name, out) in ["one-pass", "partials", "merged"].iter().zip(&exact) {
        let (written, tail) = out.split_at(out.len() - TAIL);
        assert!(
            written.iter().all(|v| *v != SENTINEL),
            "{name}: every element written"
        );
        assert!(
            tail.iter().all(|v| *v == SENTINEL),
            "{name}: nothing past the end"
        );
    }
    let wider = attention_outputs(b, 2, 2)?;
    for (name, (a, b)) in ["one-pass", "partials", "merged"]
        .iter()
        .zip(exact.iter().zip(&wider))
    {
        let differs = a
            .iter()
            .zip(b)
            .position(|(x, y)| x.to_bits() != y.to_bits());
        assert_eq!(
            differs, None,
            "{name}: a grid past the sizes changed this element"
        );
    }
    let ungrouped = attention_outputs(b, 0, 3)?;
    assert!(
        ungrouped[0]
            .iter()
            .chain(&ungrouped[1])
            .all(|v| *v == SENTINEL),
        "4 query heads over 3 key/value heads: nothing written"
    );
    Ok(())
}

#[test]
fn attention_writes_only_within_its_sizes() -> Result<()> {
    let _devices = one_at_a_time();
    attention_stays_in_its_sizes(&accel_graph::mock::MockBackend::new())?;
    match accel_graph::wgpu::WgpuBackend::new(0) {
        Ok(b) => attention_stays_in_its_sizes(&b)?,
        Err(e) => eprintln!("skipped on wgpu: no wgpu adapter here ({e})"),
    }
    match accel_graph::cuda::CudaBackend::new(0) {
        Ok(b) => attention_stays_in_its_sizes(&b),
        Err(e) => {
            eprintln!("skipped on CUDA: no CUDA device here ({e})");
            Ok(())
        }
    }
}
