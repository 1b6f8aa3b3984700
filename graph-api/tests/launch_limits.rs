//! Launch sizes: `check_grid` against CUDA's limits, and the mock refusing at launch what a GPU
//! refuses, with the same typed error.

use accel_graph_api::{
    Backend, GraphError, LaunchLimits,
    kernel::{Access, Kernel, KernelArg, check_grid},
};
use accel_graph_mock::MockBackend;

/// A kernel that counts its launches in `x[0]` on the mock.
fn counter(block: [u32; 3]) -> Kernel {
    Kernel::new("count")
        .buffer::<u32>("x", Access::ReadWrite)
        .block(block)
        .host(|args, _| args[0].slice_mut::<u32>()[0] += 1)
}

const REFUSED_GRIDS: [[u32; 3]; 6] = [
    [1, 65_536, 1],
    [1, 1, 65_536],
    [1 << 31, 1, 1],
    [u32::MAX; 3],
    [0, 1, 1],
    [1, 1, 0],
];

const REFUSED_BLOCKS: [[u32; 3]; 7] = [
    [0, 1, 1],
    [1, 0, 1],
    [1, 1, 0],
    [4096, 1, 1],
    [1025, 1, 1],
    [1, 1, 65],
    [64, 32, 1],
];

#[test]
fn check_grid_takes_cuda_s_limits_up_to_the_last_block_and_thread() {
    let cuda = LaunchLimits::CUDA;
    for block in [
        [256, 1, 1],
        [1024, 1, 1],
        [1, 1024, 1],
        [32, 32, 1],
        [1, 1, 64],
    ] {
        let kernel = counter(block);
        for grid in [[1, 1, 1], [(1 << 31) - 1, 65_535, 65_535]] {
            check_grid(&kernel, grid, &cuda)
                .unwrap_or_else(|e| panic!("grid {grid:?}, block {block:?}: {e}"));
        }
    }
}

#[test]
fn check_grid_refuses_what_cuda_refuses() {
    let cuda = LaunchLimits::CUDA;
    let kernel = counter([256, 1, 1]);
    for grid in REFUSED_GRIDS {
        let err = check_grid(&kernel, grid, &cuda).expect_err("grid beyond CUDA's limits");
        assert!(
            matches!(&err, GraphError::KernelArguments { kernel, .. } if kernel == "count"),
            "grid {grid:?}: {err:?}"
        );
    }
    for block in REFUSED_BLOCKS {
        let err =
            check_grid(&counter(block), [1, 1, 1], &cuda).expect_err("block beyond CUDA's limits");
        assert!(
            matches!(err, GraphError::KernelArguments { .. }),
            "block {block:?}: {err:?}"
        );
    }
}

#[test]
fn check_grid_messages_name_the_limit() {
    let cuda = LaunchLimits::CUDA;
    let err = check_grid(&counter([256, 1, 1]), [1, 65_536, 1], &cuda).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel count: grid [1, 65536, 1] exceeds this device's [2147483647, 65535, 65535] \
         blocks per dimension (along y)"
    );
    let err = check_grid(&counter([64, 32, 1]), [1, 1, 1], &cuda).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel count: block [64, 32, 1] has 2048 threads; this device runs at most 1024 per \
         block"
    );
    let err = check_grid(&counter([0, 1, 1]), [1, 1, 1], &cuda).unwrap_err();
    assert!(err.to_string().contains("empty dimension"), "{err}");
}

#[test]
fn the_mock_refuses_launches_a_gpu_refuses_and_runs_none_of_them() {
    let b = MockBackend::new();
    assert_eq!(b.capabilities().launch_limits, LaunchLimits::CUDA);
    let x = b.alloc_from(&[0u32]).unwrap();
    let args = [KernelArg::buffer(&x)];
    for grid in REFUSED_GRIDS {
        let err = b
            .launch_kernel(&counter([256, 1, 1]), grid, &args)
            .expect_err("the mock launched a grid CUDA refuses");
        assert!(
            matches!(err, GraphError::KernelArguments { .. }),
            "grid {grid:?}: {err:?}"
        );
    }
    for block in REFUSED_BLOCKS {
        let err = b
            .launch_kernel(&counter(block), [1, 1, 1], &args)
            .expect_err("the mock launched a block CUDA refuses");
        assert!(
            matches!(err, GraphError::KernelArguments { .. }),
            "block {block:?}: {err:?}"
        );
    }
    assert_eq!(b.download(&x).unwrap(), [0], "a refused launch ran");
    // The largest launch CUDA takes runs (the mock calls its host function once per launch).
    b.launch_kernel(
        &counter([1024, 1, 1]),
        [(1 << 31) - 1, 65_535, 65_535],
        &args,
    )
    .unwrap();
    assert_eq!(b.download(&x).unwrap(), [1]);
}
