//! §14: portable user kernels — one definition (CUDA C, WGSL, host function) on every
//! backend: eager results equal the host's, capture records without running, replay equals
//! eager, the buffers of captured launches stay alive, and bad arguments are typed errors
//! before anything reaches the device; kernels marked to overlap the kernel before them
//! still see all earlier work.

use std::sync::LazyLock;

use accel_graph_api::{
    Backend, DeviceBuffer, GraphError, GraphOptions,
    kernel::{Access, Extent, Kernel, KernelArg},
};

use crate::{
    Case, Target,
    case::requirements::none,
    check::{CaseResult, Ctx, ensure, expect_err, new_graph, replay_on},
};

const KERNELS: &str = "14 user kernels";

/// The cases of §14, in running order.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "14.01 a user kernel computes what its host function defines, f32, u32 and i32",
            KERNELS,
            none,
            eager_matches_host,
        ),
        Case::new(
            "14.02 a captured kernel does not run; replays equal eager runs",
            KERNELS,
            none,
            captured_kernels,
        ),
        Case::new(
            "14.03 buffers of a captured kernel dropped before replay stay alive",
            KERNELS,
            none,
            kernel_keep_alive,
        ),
        Case::new(
            "14.04 kernels on views touch only the views' elements",
            KERNELS,
            none,
            kernels_on_views,
        ),
        Case::new(
            "14.05 wrong arguments are typed errors before launch; nothing changes",
            KERNELS,
            none,
            kernel_argument_errors,
        ),
        Case::new(
            "14.06 grids and blocks beyond the device's launch limits are typed errors before \
             launch; nothing changes",
            KERNELS,
            none,
            launch_limit_errors,
        ),
        Case::new(
            "14.07 kernels launched to overlap the kernel before them (programmatic dependent \
             launch) see all earlier work, eagerly and in replays",
            KERNELS,
            none,
            super::programmatic_launch::programmatic_launches_see_earlier_work,
        ),
        Case::new(
            "14.08 a kernel marked to overlap whose CUDA C never waits is refused before it \
             runs (KernelFailed), eagerly and inside a capture; nothing changes",
            KERNELS,
            none,
            super::programmatic_launch::a_marked_kernel_that_never_waits_is_refused,
        ),
    ])
}

/// `y[i] = a * x[i] + b` for `i < n` (f32).
pub(crate) static AFFINE: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_affine")
        .buffer_with_extent::<f32>(
            "y",
            Access::Write,
            Extent::AtLeastScalar {
                param: 4,
                factor: 1,
            },
        )
        .buffer_with_extent::<f32>(
            "x",
            Access::Read,
            Extent::AtLeastScalar {
                param: 4,
                factor: 1,
            },
        )
        .scalar::<f32>("a")
        .scalar::<f32>("b")
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void ag_affine(float* y, const float* x, float a, float b,
                                                 unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}"#,
        )
        .wgsl(
            r#"struct Scalars { a: f32, b: f32, n: u32 }
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_affine(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { y[id.x] = s.a * x[id.x] + s.b; }
}"#,
        )
        .host(|args, _| {
            let [y, x, a, b, n] = args else {
                unreachable!("five parameters")
            };
            let (a, b, n) = (
                a.scalar::<f32>(),
                b.scalar::<f32>(),
                n.scalar::<u32>() as usize,
            );
            let x = x.slice::<f32>()[..n].to_vec();
            for (y, x) in y.slice_mut::<f32>()[..n].iter_mut().zip(x) {
                *y = a * x + b;
            }
        })
});

/// `out[i] = inp[i] * k + i` for `i < n` (u32, wrapping).
pub(crate) static U32_MIX: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_u32_mix")
        .buffer::<u32>("out", Access::Write)
        .buffer::<u32>("inp", Access::Read)
        .scalar::<u32>("k")
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void ag_u32_mix(unsigned* out, const unsigned* inp,
                                                  unsigned k, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = inp[i] * k + i;
}"#,
        )
        .wgsl(
            r#"struct Scalars { k: u32, n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read> inp: array<u32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_u32_mix(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { out[id.x] = inp[id.x] * s.k + id.x; }
}"#,
        )
        .host(|args, _| {
            let [out, inp, k, n] = args else {
                unreachable!("four parameters")
            };
            let (k, n) = (k.scalar::<u32>(), n.scalar::<u32>() as usize);
            let inp = inp.slice::<u32>()[..n].to_vec();
            for (i, (o, x)) in out.slice_mut::<u32>()[..n].iter_mut().zip(inp).enumerate() {
                *o = x.wrapping_mul(k).wrapping_add(i as u32);
            }
        })
});

/// `acc[i] += delta * ((i % 3) - 1)` for `i < n` (i32, read-modify-write).
pub(crate) static I32_ACCUMULATE: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_i32_accumulate")
        .buffer::<i32>("acc", Access::ReadWrite)
        .scalar::<i32>("delta")
        .scalar::<u32>("n")
        .block([64, 1, 1])
        .cuda(
            r#"extern "C" __global__ void ag_i32_accumulate(int* acc, int delta, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += delta * ((int)(i % 3u) - 1);
}"#,
        )
        .wgsl(
            r#"struct Scalars { delta: i32, n: u32 }
@group(0) @binding(0) var<storage, read_write> acc: array<i32>;
@group(0) @binding(1) var<uniform> s: Scalars;
@compute @workgroup_size(64)
fn ag_i32_accumulate(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { acc[id.x] = acc[id.x] + s.delta * (i32(id.x % 3u) - 1); }
}"#,
        )
        .host(|args, _| {
            let [acc, delta, n] = args else {
                unreachable!("three parameters")
            };
            let (delta, n) = (delta.scalar::<i32>(), n.scalar::<u32>() as usize);
            for (i, a) in acc.slice_mut::<i32>()[..n].iter_mut().enumerate() {
                *a += delta * ((i % 3) as i32 - 1);
            }
        })
});

/// Integer-valued inputs: every backend's `a * x + b` is exact on them, fused or not.
fn ramp(n: usize, start: f32) -> Vec<f32> {
    (0..n).map(|i| start + (i % 97) as f32 - 48.0).collect()
}

fn affine<B: Backend>(
    b: &B,
    y: &B::Buffer<f32>,
    x: &B::Buffer<f32>,
    a: f32,
    c: f32,
) -> Result<(), GraphError> {
    let n = y.len();
    b.launch_kernel(
        &AFFINE,
        AFFINE.grid_for(n),
        &[
            KernelArg::buffer(y),
            KernelArg::buffer(x),
            KernelArg::scalar(a),
            KernelArg::scalar(c),
            KernelArg::scalar(n as u32),
        ],
    )
}

/// 14.01: the three kernels on 1000 elements (four blocks of 256, the last partial) give
/// exactly their host functions' results.
fn eager_matches_host<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 1000;
    let xs = ramp(n, 0.0);
    let x = b.alloc_from(&xs).ctx("alloc_from")?;
    let y = b.alloc_from(&vec![f32::NAN; n]).ctx("alloc_from")?;
    affine(b, &y, &x, 3.0, -2.0).ctx("launch ag_affine")?;
    b.synchronize().ctx("synchronize")?;
    let got = b.download(&y).ctx("download")?;
    let want: Vec<f32> = xs.iter().map(|x| 3.0 * x - 2.0).collect();
    ensure!(
        got == want,
        "ag_affine: {:?}..., expected {:?}...",
        &got[..4],
        &want[..4]
    );

    let inp: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let (bi, bo) = (
        b.alloc_from(&inp).ctx("alloc_from::<u32>")?,
        b.alloc::<u32>(n).ctx("alloc::<u32>")?,
    );
    b.launch_kernel(
        &U32_MIX,
        U32_MIX.grid_for(n),
        &[
            KernelArg::buffer(&bo),
            KernelArg::buffer(&bi),
            KernelArg::scalar(7u32),
            KernelArg::scalar(n as u32),
        ],
    )
    .ctx("launch ag_u32_mix")?;
    b.synchronize().ctx("synchronize")?;
    let got = b.download(&bo).ctx("download")?;
    let want: Vec<u32> = (0..n)
        .map(|i| inp[i].wrapping_mul(7).wrapping_add(i as u32))
        .collect();
    ensure!(got == want, "ag_u32_mix differs from its host function");

    let acc = b.alloc_from(&vec![100i32; n]).ctx("alloc_from::<i32>")?;
    for _ in 0..2 {
        b.launch_kernel(
            &I32_ACCUMULATE,
            I32_ACCUMULATE.grid_for(n),
            &[
                KernelArg::buffer(&acc),
                KernelArg::scalar(-5i32),
                KernelArg::scalar(n as u32),
            ],
        )
        .ctx("launch ag_i32_accumulate")?;
    }
    b.synchronize().ctx("synchronize")?;
    let got = b.download(&acc).ctx("download")?;
    let want: Vec<i32> = (0..n).map(|i| 100 - 10 * ((i % 3) as i32 - 1)).collect();
    ensure!(
        got == want,
        "ag_i32_accumulate twice differs from its host function"
    );
    Ok(())
}

/// 14.02: a capture of two dependent launches leaves the buffers as they were; three replays
/// give what three eager rounds give.
fn captured_kernels<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 777;
    let start = ramp(n, 1.0);
    let round = |x: &B::Buffer<f32>, y: &B::Buffer<f32>| -> Result<(), GraphError> {
        affine(b, y, x, 2.0, 1.0)?; // y = 2x + 1
        affine(b, x, y, 1.0, -3.0) // x = y - 3
    };
    let (ex, ey) = (
        b.alloc_from(&start).ctx("alloc_from")?,
        b.alloc::<f32>(n).ctx("alloc")?,
    );
    for _ in 0..3 {
        round(&ex, &ey).ctx("eager round")?;
    }
    let (gx, gy) = (
        b.alloc_from(&start).ctx("alloc_from")?,
        b.alloc_from(&vec![0.0f32; n]).ctx("alloc_from")?,
    );
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || round(&gx, &gy))
        .ctx("capture of two launches")?;
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&gx).ctx("download")? == start,
        "capturing the launches ran them (x changed)"
    );
    for _ in 0..3 {
        replay_on(b, &stream, &mut g)?;
    }
    b.synchronize().ctx("synchronize")?;
    let (want, got) = (
        b.download(&ex).ctx("download")?,
        b.download(&gx).ctx("download")?,
    );
    ensure!(got == want, "3 replays differ from 3 eager rounds");
    Ok(())
}

/// 14.03: both buffers of a captured launch are dropped after capture; replays still read
/// the input and write the output (seen through a copy captured after the launch into a
/// buffer that stays).
fn kernel_keep_alive<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 300;
    let out = b.alloc_from(&vec![0.0f32; n]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    {
        let x = b.alloc_from(&ramp(n, 5.0)).ctx("alloc_from")?;
        let y = b.alloc::<f32>(n).ctx("alloc")?;
        b.capture_on(&stream, &mut g, || {
            affine(b, &y, &x, -1.0, 0.5)?;
            b.copy(&out, &y)
        })
        .ctx("capture")?;
    }
    for _ in 0..2 {
        replay_on(b, &stream, &mut g)?;
    }
    b.synchronize().ctx("synchronize")?;
    let got = b.download(&out).ctx("download")?;
    let want: Vec<f32> = ramp(n, 5.0).iter().map(|x| -x + 0.5).collect();
    ensure!(
        got == want,
        "replays after the kernel's buffers were dropped: {:?}..., expected {:?}...",
        &got[..4],
        &want[..4]
    );
    Ok(())
}

/// 14.04: a launch on views at element 64 (256 bytes in, where every adapter may bind) of
/// two buffers writes only the view's elements, eager and replayed.
fn kernels_on_views<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (len, at, n) = (512usize, 64usize, 128usize);
    let launch = |y: &B::Buffer<f32>, x: &B::Buffer<f32>| -> Result<(), GraphError> {
        b.launch_kernel(
            &AFFINE,
            AFFINE.grid_for(n),
            &[
                KernelArg::buffer(y.view(at..at + n)?),
                KernelArg::buffer(x.view(at..at + n)?),
                KernelArg::scalar(10.0f32),
                KernelArg::scalar(1.0f32),
                KernelArg::scalar(n as u32),
            ],
        )
    };
    let xs = ramp(len, 0.0);
    let mut want = vec![-7.0f32; len];
    for i in at..at + n {
        want[i] = 10.0 * xs[i] + 1.0;
    }
    let (x, y) = (
        b.alloc_from(&xs).ctx("alloc_from")?,
        b.alloc_from(&vec![-7.0f32; len]).ctx("alloc_from")?,
    );
    launch(&y, &x).ctx("launch on views")?;
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&y).ctx("download")? == want,
        "an eager launch on views wrote outside them or missed elements"
    );
    let z = b.alloc_from(&vec![-7.0f32; len]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || launch(&z, &x))
        .ctx("capture of a launch on views")?;
    replay_on(b, &stream, &mut g)?;
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&z).ctx("download")? == want,
        "a replayed launch on views wrote outside them or missed elements"
    );
    Ok(())
}

/// 14.05: the wrong number of arguments, a buffer of another element type, a scalar of
/// another type, a buffer where a scalar goes, a buffer shorter than its extent, an empty grid
/// and a kernel without any source are refused with typed errors; the output is untouched.
fn kernel_argument_errors<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 64usize;
    let x = b.alloc_from(&vec![1.0f32; n]).ctx("alloc_from")?;
    let y = b.alloc_from(&vec![0.0f32; n]).ctx("alloc_from")?;
    let short = b.alloc_from(&vec![0.0f32; n - 1]).ctx("alloc_from")?;
    let words = b.alloc_from(&vec![0u32; n]).ctx("alloc_from::<u32>")?;
    let grid = AFFINE.grid_for(n);
    let xa = KernelArg::buffer(&x);
    let args = |y, a| {
        [
            y,
            xa,
            a,
            KernelArg::scalar(0.0f32),
            KernelArg::scalar(n as u32),
        ]
    };
    expect_err!(
        b.launch_kernel(
            &AFFINE,
            grid,
            &args(KernelArg::buffer(&y), KernelArg::scalar(1.0f32))[..4]
        ),
        GraphError::KernelArguments { .. },
        "four arguments for five parameters"
    );
    expect_err!(
        b.launch_kernel(
            &AFFINE,
            grid,
            &args(KernelArg::buffer(&words), KernelArg::scalar(1.0f32))
        ),
        GraphError::KernelArguments { .. },
        "a u32 buffer for an f32 parameter"
    );
    expect_err!(
        b.launch_kernel(
            &AFFINE,
            grid,
            &args(KernelArg::buffer(&y), KernelArg::scalar(1u32))
        ),
        GraphError::KernelArguments { .. },
        "a u32 scalar for an f32 parameter"
    );
    expect_err!(
        b.launch_kernel(
            &AFFINE,
            grid,
            &args(KernelArg::buffer(&y), KernelArg::buffer(&x))
        ),
        GraphError::KernelArguments { .. },
        "a buffer for a scalar parameter"
    );
    expect_err!(
        b.launch_kernel(
            &AFFINE,
            grid,
            &args(KernelArg::buffer(&short), KernelArg::scalar(1.0f32))
        ),
        GraphError::KernelArguments { .. },
        "a buffer shorter than n"
    );
    expect_err!(
        b.launch_kernel(
            &AFFINE,
            [0, 1, 1],
            &args(KernelArg::buffer(&y), KernelArg::scalar(1.0f32))
        ),
        GraphError::KernelArguments { .. },
        "an empty grid"
    );
    let sourceless = Kernel::new("ag_nothing").scalar::<u32>("n");
    expect_err!(
        b.launch_kernel(&sourceless, [1, 1, 1], &[KernelArg::scalar(1u32)]),
        GraphError::Unsupported { .. },
        "a kernel without this backend's source"
    );
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&y).ctx("download")? == vec![0.0; n],
        "a refused launch wrote its output"
    );
    Ok(())
}

/// 14.06: grids and blocks the device does not accept (`capabilities().launch_limits`: one
/// more than a dimension's limit, `[u32::MAX; 3]`, a block with an empty dimension or more
/// threads than a block may have) are [`GraphError::KernelArguments`], eager and in a capture
/// (which goes on and replays without them); the output is untouched.
fn launch_limit_errors<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let limits = b.capabilities().launch_limits;
    let n = 64usize;
    let x = b.alloc_from(&vec![1.0f32; n]).ctx("alloc_from")?;
    let y = b.alloc_from(&vec![0.0f32; n]).ctx("alloc_from")?;
    let args = [
        KernelArg::buffer(&y),
        KernelArg::buffer(&x),
        KernelArg::scalar(2.0f32),
        KernelArg::scalar(1.0f32),
        KernelArg::scalar(n as u32),
    ];
    let one_more = |max: [u32; 3], axis: usize| {
        max[axis].checked_add(1).map(|d| {
            let mut dims = [1; 3];
            dims[axis] = d;
            dims
        })
    };
    // Grids, each with the kernel's own (valid) block.
    let mut grids: Vec<[u32; 3]> = (0..3)
        .filter_map(|a| one_more(limits.max_grid, a))
        .collect();
    if limits.max_grid != [u32::MAX; 3] {
        grids.push([u32::MAX; 3]);
    }
    // Blocks, each with a one-block grid.
    let mut blocks: Vec<[u32; 3]> = vec![[0, 1, 1], [1, 0, 1], [1, 1, 0]];
    blocks.extend((0..3).filter_map(|a| one_more(limits.max_block, a)));
    let [bx, by, _] = limits.max_block;
    if u64::from(bx) * u64::from(by) > u64::from(limits.max_threads_per_block) {
        blocks.push([bx, by, 1]);
    }
    let refused = |kernel: &Kernel, grid: [u32; 3], what: &str| -> CaseResult {
        expect_err!(
            b.launch_kernel(kernel, grid, &args),
            GraphError::KernelArguments { .. },
            format!("{what} (limits {limits:?})")
        );
        Ok(())
    };
    let launch_all = || -> CaseResult {
        for &grid in &grids {
            refused(&AFFINE, grid, &format!("grid {grid:?}"))?;
        }
        for &block in &blocks {
            let kernel = AFFINE.clone().block(block);
            refused(&kernel, [1, 1, 1], &format!("block {block:?}"))?;
        }
        Ok(())
    };
    launch_all()?;
    // In a capture: refused before anything is recorded, and the capture goes on.
    let stream = b.new_stream().ctx("new_stream")?;
    let mut graph = new_graph(b, GraphOptions::new())?;
    let mut inside = Ok(());
    b.capture_on(&stream, &mut graph, || {
        inside = launch_all();
        b.add_scalar(&x, 1.0)
    })
    .ctx("capture of refused launches and x += 1")?;
    inside.map_err(|e| format!("in a capture: {e}"))?;
    replay_on(b, &stream, &mut graph)?;
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&x).ctx("download")? == vec![2.0; n],
        "the capture around refused launches did not replay x += 1"
    );
    ensure!(
        b.download(&y).ctx("download")? == vec![0.0; n],
        "a refused launch wrote its output"
    );
    Ok(())
}
