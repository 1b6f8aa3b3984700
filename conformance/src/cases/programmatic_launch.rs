//! 14.07: kernels marked for programmatic dependent launch see everything issued before them —
//! the kernel just before (which lets them launch early and is slow to finish), a kernel two
//! back, and a copy — eagerly and in replays. On CUDA devices of compute capability 9.0 and
//! later the launches overlap their predecessors; a kernel whose wait were missing or wrong
//! would read the slow kernel's output before it is written. Elsewhere they run in stream
//! order and the case checks the same results.
//!
//! 14.08: a kernel marked so whose CUDA C never waits is refused before it runs, on every
//! backend.

use std::sync::LazyLock;

use accel_graph_api::{
    Backend, GraphError, GraphOptions,
    kernel::{Access, CUDA_GRID_DEPENDENCY, Kernel, KernelArg},
};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_err, new_graph, replay_on},
};

/// Elements of each buffer: several blocks, so that a reader's blocks meet other blocks'
/// writes.
const N: usize = 4096;

/// Clock cycles the first block of the slow kernel spins before it writes (tens of
/// microseconds: far longer than launching the next kernel takes).
const SPIN_CYCLES: u32 = 200_000;

/// `y[i] = x[i] * 2 + seed`, its first block late by `spin` cycles on a GPU; lets the next
/// kernel launch at once.
static SLOW_FILL: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_pdl_slow_fill")
        .buffer::<f32>("y", Access::Write)
        .buffer::<f32>("x", Access::Read)
        .scalar::<f32>("seed")
        .scalar::<u32>("spin")
        .scalar::<u32>("n")
        .cuda(format!(
            "{CUDA_GRID_DEPENDENCY}{}",
            r#"
extern "C" __global__ void ag_pdl_slow_fill(float* y, const float* x, float seed, unsigned spin,
                                            unsigned n) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    if (blockIdx.x == 0u) {
        long long t0 = clock64();
        while (clock64() - t0 < (long long)spin) {}
    }
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f + seed;
}"#
        ))
        .wgsl(
            r#"struct Scalars { seed: f32, spin: u32, n: u32 }
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_pdl_slow_fill(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { y[id.x] = x[id.x] * 2.0 + s.seed; }
}"#,
        )
        .host(|args, _| {
            let [y, x, seed, _spin, n] = args else {
                unreachable!("five parameters")
            };
            let (seed, n) = (seed.scalar::<f32>(), n.scalar::<u32>() as usize);
            let x = x.slice::<f32>()[..n].to_vec();
            for (y, x) in y.slice_mut::<f32>()[..n].iter_mut().zip(x) {
                *y = x * 2.0 + seed;
            }
        })
        .programmatic_dependent_launch(true)
});

/// `z[i] = y[n - 1 - i] + w[i]`: every block reads another block's part of `y`.
static REVERSE_ADD: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_pdl_reverse_add")
        .buffer::<f32>("z", Access::Write)
        .buffer::<f32>("y", Access::Read)
        .buffer::<f32>("w", Access::Read)
        .scalar::<u32>("n")
        .cuda(format!(
            "{CUDA_GRID_DEPENDENCY}{}",
            r#"
extern "C" __global__ void ag_pdl_reverse_add(float* z, const float* y, const float* w,
                                              unsigned n) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = y[n - 1u - i] + w[i];
}"#
        ))
        .wgsl(
            r#"struct Scalars { n: u32 }
@group(0) @binding(0) var<storage, read_write> z: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn ag_pdl_reverse_add(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) { z[id.x] = y[s.n - 1u - id.x] + w[id.x]; }
}"#,
        )
        .host(|args, _| {
            let [z, y, w, n] = args else {
                unreachable!("four parameters")
            };
            let n = n.scalar::<u32>() as usize;
            let (y, w) = (
                y.slice::<f32>()[..n].to_vec(),
                w.slice::<f32>()[..n].to_vec(),
            );
            for (i, z) in z.slice_mut::<f32>()[..n].iter_mut().enumerate() {
                *z = y[n - 1 - i] + w[i];
            }
        })
        .programmatic_dependent_launch(true)
});

/// The buffers of one chain.
struct Chain<B: Backend> {
    /// Copied into `x` first (a copy node before the first marked kernel).
    input: B::Buffer<f32>,
    x: B::Buffer<f32>,
    y: B::Buffer<f32>,
    z: B::Buffer<f32>,
    out: B::Buffer<f32>,
}

impl<B: Backend> Chain<B> {
    fn new(b: &B) -> Result<Self, GraphError> {
        let poison = vec![-1.0e9f32; N];
        Ok(Chain {
            input: b.alloc_from(&vec![0.0f32; N])?,
            x: b.alloc_from(&poison)?,
            y: b.alloc_from(&poison)?,
            z: b.alloc_from(&poison)?,
            out: b.alloc_from(&poison)?,
        })
    }

    /// copy → slow fill → reverse add (reads the slow kernel's output) → reverse add (reads
    /// the slow kernel's output again, and the previous kernel's).
    fn issue(&self, b: &B, seed: f32) -> Result<(), GraphError> {
        let n = KernelArg::scalar(N as u32);
        b.copy(&self.x, &self.input)?;
        b.launch_kernel(
            &SLOW_FILL,
            SLOW_FILL.grid_for(N),
            &[
                KernelArg::buffer(&self.y),
                KernelArg::buffer(&self.x),
                KernelArg::scalar(seed),
                KernelArg::scalar(SPIN_CYCLES),
                n,
            ],
        )?;
        b.launch_kernel(
            &REVERSE_ADD,
            REVERSE_ADD.grid_for(N),
            &[
                KernelArg::buffer(&self.z),
                KernelArg::buffer(&self.y),
                KernelArg::buffer(&self.x),
                n,
            ],
        )?;
        b.launch_kernel(
            &REVERSE_ADD,
            REVERSE_ADD.grid_for(N),
            &[
                KernelArg::buffer(&self.out),
                KernelArg::buffer(&self.z),
                KernelArg::buffer(&self.y),
                n,
            ],
        )
    }
}

/// What the chain leaves in `out` for `input` and `seed`.
fn expected(input: &[f32], seed: f32) -> Vec<f32> {
    let y: Vec<f32> = input.iter().map(|x| x * 2.0 + seed).collect();
    let z: Vec<f32> = (0..N).map(|i| y[N - 1 - i] + input[i]).collect();
    (0..N).map(|i| z[N - 1 - i] + y[i]).collect()
}

fn input(round: usize) -> Vec<f32> {
    (0..N)
        .map(|i| ((i * 7 + round * 13) % 101) as f32)
        .collect()
}

/// 14.07: eager rounds, then a captured chain replayed with new inputs; every result equals
/// the host's.
pub(crate) fn programmatic_launches_see_earlier_work<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let chain = Chain::new(b).ctx("alloc")?;
    for round in 0..3 {
        let seed = round as f32 + 0.5;
        b.upload(&chain.input, &input(round)).ctx("upload")?;
        chain.issue(b, seed).ctx("eager chain")?;
        let got = b.download(&chain.out).ctx("download")?;
        ensure!(
            got == expected(&input(round), seed),
            "eager round {round}: the chain read unfinished work (out[0..4] = {:?})",
            &got[..4]
        );
    }
    let captured = Chain::new(b).ctx("alloc")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || captured.issue(b, 7.0))
        .ctx("capture of the chain")?;
    for round in 3..6 {
        b.upload(&captured.input, &input(round)).ctx("upload")?;
        replay_on(b, &stream, &mut g)?;
        b.synchronize().ctx("synchronize")?;
        let got = b.download(&captured.out).ctx("download")?;
        ensure!(
            got == expected(&input(round), 7.0),
            "replay {round}: the chain read unfinished work (out[0..4] = {:?})",
            &got[..4]
        );
    }
    Ok(())
}

/// [`REVERSE_ADD`] without the wait, marked all the same; unmarked, the same source is fine.
fn never_waits(marked: bool) -> Kernel {
    Kernel::new("ag_pdl_never_waits")
        .buffer::<f32>("z", Access::Write)
        .buffer::<f32>("y", Access::Read)
        .buffer::<f32>("w", Access::Read)
        .scalar::<u32>("n")
        .cuda(format!(
            "{CUDA_GRID_DEPENDENCY}{}",
            r#"
extern "C" __global__ void ag_pdl_never_waits(float* z, const float* y, const float* w,
                                              unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = y[n - 1u - i] + w[i];
}"#
        ))
        .wgsl(
            REVERSE_ADD
                .wgsl_source()
                .unwrap_or_default()
                .replace("ag_pdl_reverse_add", "ag_pdl_never_waits"),
        )
        .host(|args, launch| {
            if let Some(f) = REVERSE_ADD.host_fn() {
                f(args, launch)
            }
        })
        .programmatic_dependent_launch(marked)
}

/// 14.08: the marked kernel that never waits is refused by `prepare_kernel` and by
/// `launch_kernel` (eagerly and inside a capture, which goes on) with `KernelFailed`, its
/// output untouched; the same kernel unmarked runs.
pub(crate) fn a_marked_kernel_that_never_waits_is_refused<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let chain = Chain::new(b).ctx("alloc")?;
    // out = reversed input + input: zeros where it runs, the poison where it does not.
    let args = |z| {
        [
            KernelArg::buffer(z),
            KernelArg::buffer(&chain.input),
            KernelArg::buffer(&chain.input),
            KernelArg::scalar(N as u32),
        ]
    };
    let bad = never_waits(true);
    expect_err!(
        b.prepare_kernel(&bad),
        GraphError::KernelFailed { .. },
        "prepare_kernel"
    );
    expect_err!(
        b.launch_kernel(&bad, bad.grid_for(N), &args(&chain.out)),
        GraphError::KernelFailed { .. },
        "eager launch"
    );
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || {
        let refused = b.launch_kernel(&bad, bad.grid_for(N), &args(&chain.out));
        ensure_refused(refused)?;
        b.copy(&chain.z, &chain.x)
    })
    .ctx("capture around the refused launch")?;
    replay_on(b, &stream, &mut g)?;
    b.synchronize().ctx("synchronize")?;
    ensure!(
        b.download(&chain.out).ctx("download")? == vec![-1.0e9f32; N],
        "a refused launch changed its output"
    );
    let good = never_waits(false);
    b.launch_kernel(&good, good.grid_for(N), &args(&chain.out))
        .ctx("the same kernel unmarked")?;
    ensure!(
        b.download(&chain.out).ctx("download")? == vec![0.0f32; N],
        "the same kernel unmarked did not run"
    );
    Ok(())
}

/// Inside a capture the refusal is an `Ok` of the body carrying on: `KernelFailed` expected.
fn ensure_refused(refused: Result<(), GraphError>) -> Result<(), GraphError> {
    match refused {
        Err(GraphError::KernelFailed { .. }) => Ok(()),
        Err(other) => Err(other),
        Ok(()) => Err(GraphError::ArgumentMismatch(
            "a marked kernel that never waits was launched inside a capture".to_owned(),
        )),
    }
}
