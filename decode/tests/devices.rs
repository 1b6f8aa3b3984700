//! The engine on real backends: graphed equals eager bit for bit, and both follow the host
//! reference within the devices' rounding (their GEMMs sum in other orders; `expf` differs in
//! the last bits). wgpu runs on any Vulkan adapter (lavapipe in CI); CUDA needs an NVIDIA GPU.
//! A backend without a device says so and checks nothing.
// Monomorphizing the engine over the wgpu backend proves `Send + Sync` through wgpu-core's
// resource types, deeper than the default limit allows in a debug build.
#![recursion_limit = "256"]

mod common;

use accel_graph::{GraphError, Result, half::bf16};
use accel_graph_decode::Config;
use common::{chunked, device_agreement, engine, long, odd, options, wide};

#[test]
fn wgpu_f32_follows_the_reference_and_graphed_equals_eager() -> Result<()> {
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
    let b = match accel_graph::cuda::CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: no CUDA device here ({e})");
            return Ok(());
        }
    };
    // Fused rows 8: the small-batch projections (16-byte loads, one row a pass at batch 1 and
    // four at larger batches, batch 5 in two passes; `odd` loads one element at a time); 0:
    // cuBLAS.
    for (config, batch, steps, fused_rows) in [
        (Config::tiny(), 1, 32, 8),
        (Config::tiny(), 3, 32, 8),
        (Config::tiny(), 5, 32, 8),
        (Config::tiny(), 5, 32, 0),
        (chunked(), 3, 40, 8),
        (long(), 3, 400, 8),
        (long(), 3, 400, 0),
        (wide(), 8, 12, 8),
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
    empty_rows_project_to_zero(&accel_graph::mock::MockBackend::new())?;
    match accel_graph::cuda::CudaBackend::new(0) {
        Ok(b) => empty_rows_project_to_zero(&b),
        Err(e) => {
            eprintln!("skipped on CUDA: no CUDA device here ({e})");
            Ok(())
        }
    }
}
