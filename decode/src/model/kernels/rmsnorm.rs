//! `decode_rmsnorm`: RMSNorm of each row, `out = w · (x / √(mean(x²) + ε))`, one block of
//! [`THREADS`] per row, the sum of squares in `f32` in a fixed order.

use accel_graph::{
    FloatElement,
    kernel::{Access, Extent, Kernel},
};

use super::{scalar, with_sources};
use crate::DecodeElement;

/// Threads of a row's block: the strided partial sums of the reduction.
pub const THREADS: usize = 256;

/// The reference for one row: thread `j` of [`THREADS`] sums `x[i]²` for `i = j, j + 256,
/// ...` in `f32`, the partial sums are added pairwise (`p[j] += p[j + s]`, `s = 128, 64, ...,
/// 1`), then `inv = 1 / √(sum / n + eps)` and, as Hugging Face's `LlamaRMSNorm` rounds,
/// `out[i] = T(w[i] · T(x[i] · inv))`.
pub fn rmsnorm_row<T: FloatElement>(out: &mut [T], x: &[T], w: &[T], eps: f32) {
    let n = x.len();
    let mut partial = [0.0f32; THREADS];
    for (j, p) in partial.iter_mut().enumerate() {
        let mut s = 0.0f32;
        for v in x.iter().skip(j).step_by(THREADS) {
            let v = v.to_f32();
            s += v * v;
        }
        *p = s;
    }
    let mut stride = THREADS / 2;
    while stride > 0 {
        for j in 0..stride {
            partial[j] += partial[j + stride];
        }
        stride /= 2;
    }
    let inv = 1.0 / (partial[0] / n as f32 + eps).sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(w) {
        let normed = T::from_f32(x.to_f32() * inv);
        *o = T::from_f32(w.to_f32() * normed.to_f32());
    }
}

/// The reference for `rows` rows of `n`.
pub fn rmsnorm<T: FloatElement>(out: &mut [T], x: &[T], w: &[T], rows: usize, n: usize, eps: f32) {
    for r in 0..rows {
        rmsnorm_row(&mut out[r * n..][..n], &x[r * n..][..n], &w[..n], eps);
    }
}

pub(super) fn kernel<T: DecodeElement>() -> Kernel {
    let rows_n = Extent::AtLeastProduct {
        first: 3,
        second: 4,
    };
    let k = Kernel::new("decode_rmsnorm")
        .buffer_with_extent::<T>("out", Access::Write, rows_n)
        .buffer_with_extent::<T>("x", Access::Read, rows_n)
        .buffer_with_extent::<T>(
            "w",
            Access::Read,
            Extent::AtLeastScalar {
                param: 4,
                factor: 1,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("n")
        .scalar::<f32>("eps")
        .block([THREADS as u32, 1, 1]);
    with_sources::<T>(
        k,
        r#"extern "C" __global__ void decode_rmsnorm(elem_t* out, const elem_t* x, const elem_t* w,
        unsigned rows, unsigned n, float eps) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    __shared__ float partial[256];
    unsigned r = blockIdx.x, j = threadIdx.x;
    if (r >= rows) return;
    const elem_t* xr = x + (idx_t)r * n;
    elem_t* o = out + (idx_t)r * n;
    // Eight loads in flight before their sums (a row is one block: each load's latency
    // would otherwise be paid in turn); the sums keep the reference's order.
    float s = 0.0f;
    for (unsigned i = j; i < n; i += 8u * 256u) {
        float v[8];
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u) v[u] = i + u * 256u < n ? ld(xr[i + u * 256u]) : 0.0f;
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u) {
            if (i + u * 256u < n) s = __fadd_rn(s, __fmul_rn(v[u], v[u]));
        }
    }
    partial[j] = s;
    __syncthreads();
    for (unsigned stride = 128u; stride > 0u; stride >>= 1) {
        if (j < stride) partial[j] = __fadd_rn(partial[j], partial[j + stride]);
        __syncthreads();
    }
    float inv = 1.0f / sqrtf(__fadd_rn(partial[0] / (float)n, eps));
    for (unsigned i = j; i < n; i += 8u * 256u) {
        float xv[8], wv[8];
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u) {
            bool in = i + u * 256u < n;
            xv[u] = in ? ld(xr[i + u * 256u]) : 0.0f;
            wv[u] = in ? ld(w[i + u * 256u]) : 0.0f;
        }
#pragma unroll
        for (unsigned u = 0; u < 8u; ++u) {
            if (i + u * 256u < n) {
                o[i + u * 256u] = st(__fmul_rn(wv[u], ld(st(__fmul_rn(xv[u], inv)))));
            }
        }
    }
}"#,
        r#"struct Scalars { rows: u32, n: u32, eps: f32 }
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<uniform> s: Scalars;
var<workgroup> partial: array<f32, 256>;
@compute @workgroup_size(256)
fn decode_rmsnorm(@builtin(workgroup_id) wg: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = wg.x;
    // A grid past the rows writes nothing (the CUDA kernel's test too).
    if (r >= s.rows) { return; }
    let j = lid.x;
    let base = r * s.n;
    var acc = 0.0;
    for (var i = j; i < s.n; i = i + 256u) {
        let v = x[base + i];
        acc = acc + v * v;
    }
    partial[j] = acc;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if (j < stride) { partial[j] = partial[j] + partial[j + stride]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(partial[0] / f32(s.n) + s.eps);
    for (var i = j; i < s.n; i = i + 256u) {
        dst[base + i] = w[i] * (x[base + i] * inv);
    }
}"#,
    )
    .host(|args, _| {
        let [out, x, w, rows, n, eps] = args else {
            unreachable!("six parameters")
        };
        rmsnorm::<T>(
            out.slice_mut::<T>(),
            x.slice::<T>(),
            w.slice::<T>(),
            scalar(rows),
            scalar(n),
            eps.scalar::<f32>(),
        );
    })
}
