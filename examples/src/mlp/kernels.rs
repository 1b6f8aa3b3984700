//! The MLP's element-wise and reduction kernels, each written once: CUDA C (NVRTC on CUDA,
//! hipRTC on HIP), WGSL (wgpu) and a host function (the mock).
//!
//! The reductions fix their order of summation — `mlp_sum` as 256 strided partial sums then a
//! pairwise tree, `mlp_colsum` row by row — and every backend follows it, so the loss and the
//! bias gradients are the same bits everywhere for the same inputs, and the host reference
//! ([`super::reference`]) reproduces the mock exactly.

use std::sync::LazyLock;

use accel_graph::kernel::{Access, Extent, HostArg, Kernel};

/// Threads of the one workgroup `mlp_sum` runs.
pub(crate) const SUM_THREADS: usize = 256;

fn three(args: &mut [HostArg]) -> (&mut HostArg, &mut HostArg, &mut [HostArg]) {
    let (first, rest) = args.split_at_mut(1);
    let (second, rest) = rest.split_at_mut(1);
    (&mut first[0], &mut second[0], rest)
}

/// `h[i] = max(h[i] + b[i % cols], 0)` over `rows × cols` (bias, then ReLU, in place).
pub(crate) static BIAS_RELU: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("mlp_bias_relu")
        .buffer_with_extent::<f32>(
            "h",
            Access::ReadWrite,
            Extent::AtLeastProduct {
                first: 2,
                second: 3,
            },
        )
        .buffer_with_extent::<f32>(
            "b",
            Access::Read,
            Extent::AtLeastScalar {
                param: 3,
                factor: 1,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("cols")
        .cuda(
            r#"extern "C" __global__ void mlp_bias_relu(float* h, const float* b, unsigned rows,
                                                     unsigned cols) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        float v = h[i] + b[i % cols];
        h[i] = v > 0.0f ? v : 0.0f;
    }
}"#,
        )
        .wgsl(
            r#"struct Scalars { rows: u32, cols: u32 }
@group(0) @binding(0) var<storage, read_write> h: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn mlp_bias_relu(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.rows * s.cols) {
        let v = h[id.x] + b[id.x % s.cols];
        h[id.x] = select(0.0, v, v > 0.0);
    }
}"#,
        )
        .host(|args, _| {
            let (h, b, rest) = three(args);
            let cols = rest[1].scalar::<u32>() as usize;
            let n = rest[0].scalar::<u32>() as usize * cols;
            let b = b.slice::<f32>().to_vec();
            for (i, h) in h.slice_mut::<f32>()[..n].iter_mut().enumerate() {
                let v = *h + b[i % cols];
                *h = if v > 0.0 { v } else { 0.0 };
            }
        })
});

/// `y[i] += b[i % cols]` over `rows × cols`.
pub(crate) static BIAS_ADD: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("mlp_bias_add")
        .buffer_with_extent::<f32>(
            "y",
            Access::ReadWrite,
            Extent::AtLeastProduct {
                first: 2,
                second: 3,
            },
        )
        .buffer_with_extent::<f32>(
            "b",
            Access::Read,
            Extent::AtLeastScalar {
                param: 3,
                factor: 1,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("cols")
        .cuda(
            r#"extern "C" __global__ void mlp_bias_add(float* y, const float* b, unsigned rows,
                                                    unsigned cols) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) y[i] = y[i] + b[i % cols];
}"#,
        )
        .wgsl(
            r#"struct Scalars { rows: u32, cols: u32 }
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn mlp_bias_add(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.rows * s.cols) { y[id.x] = y[id.x] + b[id.x % s.cols]; }
}"#,
        )
        .host(|args, _| {
            let (y, b, rest) = three(args);
            let cols = rest[1].scalar::<u32>() as usize;
            let n = rest[0].scalar::<u32>() as usize * cols;
            let b = b.slice::<f32>().to_vec();
            for (i, y) in y.slice_mut::<f32>()[..n].iter_mut().enumerate() {
                *y += b[i % cols];
            }
        })
});

/// The mean squared error's gradient and squares: `d = y[i] - t[i]`, `dy[i] = scale · d`,
/// `sq[i] = d · d` (`scale = 2 / n`).
pub(crate) static MSE_GRAD: LazyLock<Kernel> = LazyLock::new(|| {
    let n = Extent::AtLeastScalar {
        param: 5,
        factor: 1,
    };
    Kernel::new("mlp_mse_grad")
        .buffer_with_extent::<f32>("dy", Access::Write, n)
        .buffer_with_extent::<f32>("sq", Access::Write, n)
        .buffer_with_extent::<f32>("y", Access::Read, n)
        .buffer_with_extent::<f32>("t", Access::Read, n)
        .scalar::<f32>("scale")
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void mlp_mse_grad(float* dy, float* sq, const float* y,
                                                    const float* t, float scale, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float d = y[i] - t[i];
        dy[i] = scale * d;
        sq[i] = d * d;
    }
}"#,
        )
        .wgsl(
            r#"struct Scalars { scale: f32, n: u32 }
@group(0) @binding(0) var<storage, read_write> dy: array<f32>;
@group(0) @binding(1) var<storage, read_write> sq: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> t: array<f32>;
@group(0) @binding(4) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn mlp_mse_grad(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n) {
        let d = y[id.x] - t[id.x];
        dy[id.x] = s.scale * d;
        sq[id.x] = d * d;
    }
}"#,
        )
        .host(|args, _| {
            let [dy, sq, y, t, scale, n] = args else {
                unreachable!("six parameters")
            };
            let (scale, n) = (scale.scalar::<f32>(), n.scalar::<u32>() as usize);
            let (y, t) = (y.slice::<f32>().to_vec(), t.slice::<f32>().to_vec());
            let d: Vec<f32> = (0..n).map(|i| y[i] - t[i]).collect();
            for (out, d) in dy.slice_mut::<f32>()[..n].iter_mut().zip(&d) {
                *out = scale * d;
            }
            for (out, d) in sq.slice_mut::<f32>()[..n].iter_mut().zip(&d) {
                *out = d * d;
            }
        })
});

/// The sum of `x[0..n]` into `out[0]`, by one workgroup of [`SUM_THREADS`]: thread `j` sums
/// `x[j], x[j + 256], ...` in order, then partial sums are added pairwise (`p[j] += p[j + s]`
/// for `s = 128, 64, ..., 1`).
pub(crate) static SUM: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("mlp_sum")
        .buffer_with_extent::<f32>("out", Access::Write, Extent::AtLeast(1))
        .buffer_with_extent::<f32>(
            "x",
            Access::Read,
            Extent::AtLeastScalar {
                param: 2,
                factor: 1,
            },
        )
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void mlp_sum(float* out, const float* x, unsigned n) {
    __shared__ float partial[256];
    unsigned j = threadIdx.x;
    float s = 0.0f;
    for (unsigned i = j; i < n; i += 256u) s += x[i];
    partial[j] = s;
    __syncthreads();
    for (unsigned stride = 128u; stride > 0u; stride >>= 1) {
        if (j < stride) partial[j] = partial[j] + partial[j + stride];
        __syncthreads();
    }
    if (j == 0u) out[0] = partial[0];
}"#,
        )
        .wgsl(
            r#"struct Scalars { n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
var<workgroup> partial: array<f32, 256>;
@compute @workgroup_size(256)
fn mlp_sum(@builtin(local_invocation_id) lid: vec3<u32>) {
    let j = lid.x;
    var acc = 0.0;
    for (var i = j; i < s.n; i = i + 256u) { acc = acc + x[i]; }
    partial[j] = acc;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if (j < stride) { partial[j] = partial[j] + partial[j + stride]; }
        workgroupBarrier();
    }
    if (j == 0u) { out[0] = partial[0]; }
}"#,
        )
        .host(|args, _| {
            let [out, x, n] = args else {
                unreachable!("three parameters")
            };
            let n = n.scalar::<u32>() as usize;
            out.slice_mut::<f32>()[0] = ordered_sum(&x.slice::<f32>()[..n]);
        })
});

/// The sum [`SUM`] computes, in its order.
pub(crate) fn ordered_sum(x: &[f32]) -> f32 {
    let mut partial = [0.0f32; SUM_THREADS];
    for (j, p) in partial.iter_mut().enumerate() {
        let mut s = 0.0f32;
        for v in x.iter().skip(j).step_by(SUM_THREADS) {
            s += v;
        }
        *p = s;
    }
    let mut stride = SUM_THREADS / 2;
    while stride > 0 {
        for j in 0..stride {
            partial[j] += partial[j + stride];
        }
        stride /= 2;
    }
    partial[0]
}

/// Column sums: `out[j] = Σ_r m[r · cols + j]`, rows in order (a bias's gradient over a
/// batch).
pub(crate) static COLSUM: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("mlp_colsum")
        .buffer_with_extent::<f32>(
            "out",
            Access::Write,
            Extent::AtLeastScalar {
                param: 3,
                factor: 1,
            },
        )
        .buffer_with_extent::<f32>(
            "m",
            Access::Read,
            Extent::AtLeastProduct {
                first: 2,
                second: 3,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("cols")
        .cuda(
            r#"extern "C" __global__ void mlp_colsum(float* out, const float* m, unsigned rows,
                                                  unsigned cols) {
    unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < cols) {
        float s = 0.0f;
        for (unsigned r = 0; r < rows; ++r) s += m[r * cols + j];
        out[j] = s;
    }
}"#,
        )
        .wgsl(
            r#"struct Scalars { rows: u32, cols: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> m: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn mlp_colsum(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.cols) {
        var acc = 0.0;
        for (var r = 0u; r < s.rows; r = r + 1u) { acc = acc + m[r * s.cols + id.x]; }
        out[id.x] = acc;
    }
}"#,
        )
        .host(|args, _| {
            let (out, m, rest) = three(args);
            let (rows, cols) = (
                rest[0].scalar::<u32>() as usize,
                rest[1].scalar::<u32>() as usize,
            );
            let m = m.slice::<f32>().to_vec();
            for (j, o) in out.slice_mut::<f32>()[..cols].iter_mut().enumerate() {
                let mut s = 0.0f32;
                for r in 0..rows {
                    s += m[r * cols + j];
                }
                *o = s;
            }
        })
});

/// ReLU's gradient through its output: `da[i] = a[i] > 0 ? da[i] : 0` (`a` is a ReLU's
/// output, never NaN).
pub(crate) static RELU_BACKWARD: LazyLock<Kernel> = LazyLock::new(|| {
    let n = Extent::AtLeastScalar {
        param: 2,
        factor: 1,
    };
    Kernel::new("mlp_relu_backward")
        .buffer_with_extent::<f32>("da", Access::ReadWrite, n)
        .buffer_with_extent::<f32>("a", Access::Read, n)
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void mlp_relu_backward(float* da, const float* a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && a[i] <= 0.0f) da[i] = 0.0f;
}"#,
        )
        .wgsl(
            r#"struct Scalars { n: u32 }
@group(0) @binding(0) var<storage, read_write> da: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn mlp_relu_backward(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.n && a[id.x] <= 0.0) { da[id.x] = 0.0; }
}"#,
        )
        .host(|args, _| {
            let [da, a, n] = args else {
                unreachable!("three parameters")
            };
            let n = n.scalar::<u32>() as usize;
            let a = a.slice::<f32>().to_vec();
            for (d, a) in da.slice_mut::<f32>()[..n].iter_mut().zip(a) {
                if a <= 0.0 {
                    *d = 0.0;
                }
            }
        })
});

/// Every kernel of the model, for compiling them ahead of a capture.
pub(crate) fn all() -> [&'static Kernel; 6] {
    [
        &BIAS_RELU,
        &BIAS_ADD,
        &MSE_GRAD,
        &SUM,
        &COLSUM,
        &RELU_BACKWARD,
    ]
}
