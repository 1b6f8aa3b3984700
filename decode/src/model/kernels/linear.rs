//! The small-batch projections: `y = x · Wᵀ` for a few rows, reading each weight once at the
//! memory's speed, with the work around a projection fused into it.
//!
//! * `decode_linear`: `out = x · Wᵀ + beta · out` (the residual projections: attention's
//!   output and the MLP's down projection, `beta` 1 on one device).
//! * `decode_norm_linear`: `out = rmsnorm(x) · w_norm · Wᵀ` (the QKV projection and the LM
//!   head): the RMSNorm kernel before it disappears.
//! * `decode_norm_gate_up`: `act = silu(h · Gᵀ) · (h · Uᵀ)` with `h = rmsnorm(x) · w_norm` (the
//!   MLP's gate and up projections and SwiGLU): two kernels before it disappear.
//!
//! At batch 1 to 8 a decode step's GEMMs are matrix-vector products: the time is reading the
//! weights, and what costs is everything else — a kernel of its own for each RMSNorm and
//! SwiGLU, and GEMM kernels tuned for larger products. Each warp here takes two output columns
//! (two weight rows) and up to two rows of `x` ([`MAX_ROWS`]), every lane reading 16-byte
//! runs of both weight rows, four runs of each in flight; a butterfly sum over the lanes gives
//! each output.
//! RMSNorm's input is normalized once per block into shared memory (rows × `k` elements of
//! at most [`STAGE_BYTES`]; past that, each element is normalized as it is read).
//!
//! Each result is rounded as the unfused kernels round it — the normalized input to `T` as
//! [`super::rmsnorm`] stores it, each projection's output to `T` before SwiGLU as the GEMM
//! stores it — so the host functions here are the unfused ones composed, and on the mock the
//! fused and unfused steps are equal bit for bit. On a GPU the dot products and the sum of
//! squares are added in other orders than the host's (as cuBLAS's are).

use accel_graph::{
    FloatElement, Gemm,
    kernel::{Access, Extent, Kernel},
};

use super::{rmsnorm::rmsnorm, scalar, swiglu::swiglu_one, with_sources};
use crate::DecodeElement;

/// Threads of a block (four warps).
pub const THREADS: u32 = 128;

/// Rows of `x` one pass of a block takes (more rows are taken two at a time, each two
/// reading the weights again).
pub const MAX_ROWS: usize = 2;

/// Bytes of shared memory a block normalizes its rows of `x` into.
pub const STAGE_BYTES: usize = 40960;

/// Blocks the projections launch at most: each block walks its share of the output columns,
/// so a block's normalization of `x` serves several columns (and 512 blocks of four warps
/// fill a GPU of 132 multiprocessors several times over).
pub const MAX_BLOCKS: usize = 512;

/// The grid of a projection with `columns` output columns (`columns` pairs for
/// `decode_norm_gate_up`, whose warps take a gate and an up column together).
pub fn grid(columns: usize, paired: bool) -> [u32; 3] {
    let pairs = if paired { columns } else { columns.div_ceil(2) };
    let warps = (THREADS / 32) as usize;
    [pairs.div_ceil(warps).clamp(1, MAX_BLOCKS) as u32, 1, 1]
}

/// The reference of `decode_linear`: `out = T(x · Wᵀ + beta · out)` for `x` of `rows × k` and
/// `w` of `n × k` (row-major), [`accel_graph::gemm_reference`]'s order; `out` is not read when
/// `beta` is 0.
#[allow(clippy::too_many_arguments)]
pub fn linear<T: FloatElement>(
    out: &mut [T],
    x: &[T],
    w: &[T],
    rows: usize,
    n: usize,
    k: usize,
    beta: f32,
) {
    let spec = Gemm::new(rows, n, k).transpose_b(true).scalars(1.0, beta);
    accel_graph::gemm_reference(&spec, &x[..rows * k], &w[..n * k], &mut out[..rows * n]);
}

/// The reference of `decode_norm_linear`: [`rmsnorm`] of each row of `x` with `norm`, then
/// [`linear`] with `beta` 0.
#[allow(clippy::too_many_arguments)]
pub fn norm_linear<T: FloatElement>(
    out: &mut [T],
    x: &[T],
    norm: &[T],
    w: &[T],
    rows: usize,
    n: usize,
    k: usize,
    eps: f32,
) {
    let mut h = vec![T::from_f32(0.0); rows * k];
    rmsnorm(&mut h, x, norm, rows, k, eps);
    linear(out, &h, w, rows, n, k, 0.0);
}

/// The reference of `decode_norm_gate_up`: `h` = [`rmsnorm`] of `x` with `norm`, `g = T(h ·
/// gateᵀ)`, `u = T(h · upᵀ)` (each `inter × k`), `act = swiglu(g, u)` as
/// [`super::swiglu::swiglu`] computes it.
#[allow(clippy::too_many_arguments)]
pub fn norm_gate_up<T: FloatElement>(
    act: &mut [T],
    x: &[T],
    norm: &[T],
    gate: &[T],
    up: &[T],
    rows: usize,
    inter: usize,
    k: usize,
    eps: f32,
) {
    let zero = T::from_f32(0.0);
    let mut h = vec![zero; rows * k];
    rmsnorm(&mut h, x, norm, rows, k, eps);
    let (mut g, mut u) = (vec![zero; rows * inter], vec![zero; rows * inter]);
    linear(&mut g, &h, gate, rows, inter, k, 0.0);
    linear(&mut u, &h, up, rows, inter, k, 0.0);
    for ((a, g), u) in act[..rows * inter].iter_mut().zip(&g).zip(&u) {
        *a = swiglu_one(*g, *u);
    }
}

/// The CUDA C the three kernels share: the staging of `x`, the dot products of a warp's two
/// columns with up to two rows, the epilogues.
const COMMON: &str = r#"
#define LIN_THREADS 128u
#define LIN_WARPS 4u
#define LIN_STAGE (40960u / (unsigned)sizeof(elem_t))
// Elements in 16 bytes: 8 of bf16, 4 of f32.
#define LIN_V (16u / (unsigned)sizeof(elem_t))
#define LIN_RUNS 4
struct alignas(16) lin_u4 { unsigned x, y, z, w; };

__device__ __forceinline__ void lin_unpack(lin_u4 a, float* f) {
    if (sizeof(elem_t) == 2) {
        f[0] = __uint_as_float(a.x << 16); f[1] = __uint_as_float(a.x & 0xffff0000u);
        f[2] = __uint_as_float(a.y << 16); f[3] = __uint_as_float(a.y & 0xffff0000u);
        f[4] = __uint_as_float(a.z << 16); f[5] = __uint_as_float(a.z & 0xffff0000u);
        f[6] = __uint_as_float(a.w << 16); f[7] = __uint_as_float(a.w & 0xffff0000u);
    } else {
        f[0] = __uint_as_float(a.x); f[1] = __uint_as_float(a.y);
        f[2] = __uint_as_float(a.z); f[3] = __uint_as_float(a.w);
    }
}

// The normalized element as the RMSNorm kernel stores it: T(w · T(x · inv)).
__device__ __forceinline__ float lin_norm(float x, float inv, float w) {
    return ld(st(__fmul_rn(w, ld(st(__fmul_rn(x, inv))))));
}

__device__ __forceinline__ bool lin_aligned(const void* p) {
    return ((unsigned long long)p & 15ull) == 0ull;
}

// One output pair of R rows (g of them real: rows past g repeat row g - 1 and are not stored),
// 16-byte loads: k % LIN_V == 0 and every base aligned. `fly` (not null) is RMSNorm's weight
// when x was too large to stage: each element is normalized as it is read.
template <int R>
__device__ __forceinline__ void lin_dot_vec(const elem_t* w0, const elem_t* w1, const elem_t* xs,
        unsigned g, const elem_t* fly, const float* inv, unsigned k, unsigned lane,
        float* a0, float* a1) {
    const unsigned step = 32u * LIN_V;
    for (unsigned e0 = lane * LIN_V; e0 < k; e0 += LIN_RUNS * step) {
        lin_u4 r0[LIN_RUNS], r1[LIN_RUNS];
#pragma unroll
        for (int u = 0; u < LIN_RUNS; ++u) {
            unsigned e = e0 + u * step;
            if (e < k) {
                r0[u] = *reinterpret_cast<const lin_u4*>(w0 + e);
                r1[u] = *reinterpret_cast<const lin_u4*>(w1 + e);
            }
        }
#pragma unroll
        for (int u = 0; u < LIN_RUNS; ++u) {
            unsigned e = e0 + u * step;
            if (e >= k) break;
            float f0[8], f1[8], nw[8];
            lin_unpack(r0[u], f0);
            lin_unpack(r1[u], f1);
            if (fly) lin_unpack(*reinterpret_cast<const lin_u4*>(fly + e), nw);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                unsigned rr = (unsigned)r < g ? (unsigned)r : g - 1u;
                float xv[8];
                lin_unpack(*reinterpret_cast<const lin_u4*>(xs + (idx_t)rr * k + e), xv);
                if (fly) {
#pragma unroll
                    for (unsigned i = 0; i < LIN_V; ++i) xv[i] = lin_norm(xv[i], inv[rr], nw[i]);
                }
#pragma unroll
                for (unsigned i = 0; i < LIN_V; ++i) {
                    a0[r] = fmaf(xv[i], f0[i], a0[r]);
                    a1[r] = fmaf(xv[i], f1[i], a1[r]);
                }
            }
        }
    }
}

// The same with one element per load: any k, any alignment.
template <int R>
__device__ __forceinline__ void lin_dot_scalar(const elem_t* w0, const elem_t* w1,
        const elem_t* xs, unsigned g, const elem_t* fly, const float* inv, unsigned k,
        unsigned lane, float* a0, float* a1) {
    for (unsigned e = lane; e < k; e += 32u) {
        float f0 = ld(w0[e]), f1 = ld(w1[e]);
        float nw = fly ? ld(fly[e]) : 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            unsigned rr = (unsigned)r < g ? (unsigned)r : g - 1u;
            float xv = ld(xs[(idx_t)rr * k + e]);
            if (fly) xv = lin_norm(xv, inv[rr], nw);
            a0[r] = fmaf(xv, f0, a0[r]);
            a1[r] = fmaf(xv, f1, a1[r]);
        }
    }
}

__device__ __forceinline__ void lin_store(elem_t* out, idx_t at, float acc, float beta) {
    out[at] = st(beta == 0.0f ? acc : __fadd_rn(acc, __fmul_rn(beta, ld(out[at]))));
}

// Output pair p of rows r0 .. r0 + g: columns 2p and 2p + 1 of `out` (n wide), or with
// `gate_up` column p of `act` from gate row p and up row p.
template <int R>
__device__ __forceinline__ void lin_pair(bool vec, bool gate_up, elem_t* out,
        const elem_t* w0, const elem_t* w1, const elem_t* xs, unsigned r0, unsigned g,
        const elem_t* fly, const float* inv, unsigned n, unsigned k, unsigned p, float beta,
        unsigned lane) {
    float a0[R], a1[R];
#pragma unroll
    for (int r = 0; r < R; ++r) { a0[r] = 0.0f; a1[r] = 0.0f; }
    if (vec) lin_dot_vec<R>(w0, w1, xs, g, fly, inv, k, lane, a0, a1);
    else lin_dot_scalar<R>(w0, w1, xs, g, fly, inv, k, lane, a0, a1);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            a0[r] += __shfl_xor_sync(0xffffffffu, a0[r], off);
            a1[r] += __shfl_xor_sync(0xffffffffu, a1[r], off);
        }
    }
    if (lane != 0u) return;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if ((unsigned)r >= g) break;
        idx_t row = (idx_t)(r0 + (unsigned)r) * n;
        if (gate_up) {
            float gv = ld(st(a0[r])), uv = ld(st(a1[r]));
            float silu = ld(st(gv / (1.0f + expf(-gv))));
            out[row + p] = st(__fmul_rn(silu, uv));
        } else {
            lin_store(out, row + 2u * p, a0[r], beta);
            if (2u * p + 1u < n) lin_store(out, row + 2u * p + 1u, a1[r], beta);
        }
    }
}

// The whole projection: rows two at a time; for each, RMSNorm's inverse root per row (and
// the normalized rows staged in shared memory where they fit), then the block's share of the
// output pairs. `wb` is the up weights with `gate_up`, else unused.
__device__ __forceinline__ void lin_run(bool gate_up, elem_t* out, const elem_t* x,
        const elem_t* nw, const elem_t* wa, const elem_t* wb, unsigned rows, unsigned n,
        unsigned k, float beta, float eps) {
    __shared__ __align__(16) elem_t s_x[LIN_STAGE];
    __shared__ float s_red[2][LIN_WARPS];
    __shared__ float s_inv[2];
    const unsigned tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const unsigned pairs = gate_up ? n : (n + 1u) / 2u;
    const bool vec = k % LIN_V == 0u && lin_aligned(x) && lin_aligned(wa)
        && (!gate_up || lin_aligned(wb)) && (nw == 0 || lin_aligned(nw));
    for (unsigned r0 = 0; r0 < rows; r0 += 2u) {
        const unsigned g = rows - r0 < 2u ? rows - r0 : 2u;
        const elem_t* xr = x + (idx_t)r0 * k;
        const bool staged = nw != 0 && (idx_t)g * k <= (idx_t)LIN_STAGE;
        __syncthreads();
        if (nw) {
            // Eight loads in flight at a time: every block pays this before its first
            // product, so its latency is paid once, not once per load.
            for (unsigned r = 0; r < g; ++r) {
                const elem_t* row = xr + (idx_t)r * k;
                float s = 0.0f;
                for (unsigned i = tid; i < k; i += 8u * LIN_THREADS) {
                    float v[8];
#pragma unroll
                    for (unsigned u = 0; u < 8u; ++u) {
                        v[u] = i + u * LIN_THREADS < k ? ld(row[i + u * LIN_THREADS]) : 0.0f;
                    }
#pragma unroll
                    for (unsigned u = 0; u < 8u; ++u) s = fmaf(v[u], v[u], s);
                }
                for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
                if (lane == 0u) s_red[r][warp] = s;
            }
            __syncthreads();
            if (tid < g) {
                float s = 0.0f;
                for (unsigned w = 0; w < LIN_WARPS; ++w) s += s_red[tid][w];
                s_inv[tid] = 1.0f / sqrtf(__fadd_rn(s / (float)k, eps));
            }
            __syncthreads();
            if (staged) {
                for (unsigned r = 0; r < g; ++r) {
                    const elem_t* row = xr + (idx_t)r * k;
                    elem_t* dst = s_x + (idx_t)r * k;
                    const float inv = s_inv[r];
                    for (unsigned i = tid; i < k; i += 8u * LIN_THREADS) {
                        float xv[8], wv[8];
#pragma unroll
                        for (unsigned u = 0; u < 8u; ++u) {
                            bool in = i + u * LIN_THREADS < k;
                            xv[u] = in ? ld(row[i + u * LIN_THREADS]) : 0.0f;
                            wv[u] = in ? ld(nw[i + u * LIN_THREADS]) : 0.0f;
                        }
#pragma unroll
                        for (unsigned u = 0; u < 8u; ++u) {
                            if (i + u * LIN_THREADS < k) {
                                dst[i + u * LIN_THREADS] = st(lin_norm(xv[u], inv, wv[u]));
                            }
                        }
                    }
                }
                __syncthreads();
            }
        }
        const elem_t* xs = staged ? s_x : xr;
        const elem_t* fly = staged ? (const elem_t*)0 : nw;
        const unsigned R = g <= 1u ? 1u : 2u;
        for (unsigned p = blockIdx.x * LIN_WARPS + warp; p < pairs; p += gridDim.x * LIN_WARPS) {
            const elem_t* w0 = gate_up ? wa + (idx_t)p * k : wa + (idx_t)(2u * p) * k;
            const elem_t* w1 = gate_up ? wb + (idx_t)p * k
                : wa + (idx_t)(2u * p + 1u < n ? 2u * p + 1u : 2u * p) * k;
            switch (R) {
                case 1u: lin_pair<1>(vec, gate_up, out, w0, w1, xs, r0, g, fly, s_inv, n, k, p, beta, lane); break;
                default: lin_pair<2>(vec, gate_up, out, w0, w1, xs, r0, g, fly, s_inv, n, k, p, beta, lane); break;
            }
        }
    }
}
"#;

/// `decode_linear(out, x, w, rows, n, k, beta)`.
pub(super) fn linear_kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_linear")
        .buffer_with_extent::<T>("out", Access::ReadWrite, product(3, 4))
        .buffer_with_extent::<T>("x", Access::Read, product(3, 5))
        .buffer_with_extent::<T>("w", Access::Read, product(4, 5))
        .scalar::<u32>("rows")
        .scalar::<u32>("n")
        .scalar::<u32>("k")
        .scalar::<f32>("beta")
        .block([THREADS, 1, 1]);
    with_sources::<T>(
        k,
        &format!(
            "{COMMON}\nextern \"C\" __global__ void __launch_bounds__(128) decode_linear(\
             elem_t* out, const elem_t* x, const elem_t* w, unsigned rows, unsigned n, \
             unsigned k, float beta) {{\n    lin_run(false, out, x, (const elem_t*)0, w, w, \
             rows, n, k, beta, 0.0f);\n}}"
        ),
        r#"struct Scalars { rows: u32, n: u32, k: u32, beta: f32 }
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<uniform> s: Scalars;
@compute @workgroup_size(128)
fn decode_linear(@builtin(global_invocation_id) id: vec3<u32>,
                 @builtin(num_workgroups) groups: vec3<u32>) {
    for (var o = id.x; o < s.rows * s.n; o = o + groups.x * 128u) {
        let r = o / s.n;
        let c = o % s.n;
        var acc = 0.0;
        for (var i = 0u; i < s.k; i = i + 1u) { acc = acc + x[r * s.k + i] * w[c * s.k + i]; }
        if (s.beta == 0.0) { dst[o] = acc; } else { dst[o] = acc + s.beta * dst[o]; }
    }
}"#,
    )
    .host(|args, _| {
        let [out, x, w, rows, n, k, beta] = args else {
            unreachable!("seven parameters")
        };
        linear::<T>(
            out.slice_mut::<T>(),
            x.slice::<T>(),
            w.slice::<T>(),
            scalar(rows),
            scalar(n),
            scalar(k),
            beta.scalar::<f32>(),
        );
    })
}

/// `decode_norm_linear(out, x, norm, w, rows, n, k, eps)`.
pub(super) fn norm_linear_kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_norm_linear")
        .buffer_with_extent::<T>("out", Access::Write, product(4, 5))
        .buffer_with_extent::<T>("x", Access::Read, product(4, 6))
        .buffer_with_extent::<T>("norm", Access::Read, at_least(6))
        .buffer_with_extent::<T>("w", Access::Read, product(5, 6))
        .scalar::<u32>("rows")
        .scalar::<u32>("n")
        .scalar::<u32>("k")
        .scalar::<f32>("eps")
        .block([THREADS, 1, 1]);
    with_sources::<T>(
        k,
        &format!(
            "{COMMON}\nextern \"C\" __global__ void __launch_bounds__(128) decode_norm_linear(\
             elem_t* out, const elem_t* x, const elem_t* norm, const elem_t* w, unsigned rows, \
             unsigned n, unsigned k, float eps) {{\n    lin_run(false, out, x, norm, w, w, \
             rows, n, k, 0.0f, eps);\n}}"
        ),
        format!(
            "struct Scalars {{ rows: u32, n: u32, k: u32, eps: f32 }}
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> norm: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<uniform> s: Scalars;
{WGSL_NORM}
@compute @workgroup_size(128)
fn decode_norm_linear(@builtin(global_invocation_id) id: vec3<u32>,
                      @builtin(num_workgroups) groups: vec3<u32>) {{
    for (var o = id.x; o < s.rows * s.n; o = o + groups.x * 128u) {{
        let r = o / s.n;
        let c = o % s.n;
        let inv = inv_rms(r);
        var acc = 0.0;
        for (var i = 0u; i < s.k; i = i + 1u) {{
            acc = acc + norm[i] * (x[r * s.k + i] * inv) * w[c * s.k + i];
        }}
        dst[o] = acc;
    }}
}}"
        ),
    )
    .host(|args, _| {
        let [out, x, norm, w, rows, n, k, eps] = args else {
            unreachable!("eight parameters")
        };
        norm_linear::<T>(
            out.slice_mut::<T>(),
            x.slice::<T>(),
            norm.slice::<T>(),
            w.slice::<T>(),
            scalar(rows),
            scalar(n),
            scalar(k),
            eps.scalar::<f32>(),
        );
    })
}

/// `decode_norm_gate_up(act, x, norm, gate, up, rows, inter, k, eps)`.
pub(super) fn norm_gate_up_kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_norm_gate_up")
        .buffer_with_extent::<T>("act", Access::Write, product(5, 6))
        .buffer_with_extent::<T>("x", Access::Read, product(5, 7))
        .buffer_with_extent::<T>("norm", Access::Read, at_least(7))
        .buffer_with_extent::<T>("gate", Access::Read, product(6, 7))
        .buffer_with_extent::<T>("up", Access::Read, product(6, 7))
        .scalar::<u32>("rows")
        .scalar::<u32>("inter")
        .scalar::<u32>("k")
        .scalar::<f32>("eps")
        .block([THREADS, 1, 1]);
    with_sources::<T>(
        k,
        &format!(
            "{COMMON}\nextern \"C\" __global__ void __launch_bounds__(128) decode_norm_gate_up(\
             elem_t* act, const elem_t* x, const elem_t* norm, const elem_t* gate, \
             const elem_t* up, unsigned rows, unsigned inter, unsigned k, float eps) {{\n    \
             lin_run(true, act, x, norm, gate, up, rows, inter, k, 0.0f, eps);\n}}"
        ),
        format!(
            "struct Scalars {{ rows: u32, n: u32, k: u32, eps: f32 }}
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> norm: array<f32>;
@group(0) @binding(3) var<storage, read> gate: array<f32>;
@group(0) @binding(4) var<storage, read> up: array<f32>;
@group(0) @binding(5) var<uniform> s: Scalars;
{WGSL_NORM}
@compute @workgroup_size(128)
fn decode_norm_gate_up(@builtin(global_invocation_id) id: vec3<u32>,
                       @builtin(num_workgroups) groups: vec3<u32>) {{
    for (var o = id.x; o < s.rows * s.n; o = o + groups.x * 128u) {{
        let r = o / s.n;
        let c = o % s.n;
        let inv = inv_rms(r);
        var g = 0.0;
        var u = 0.0;
        for (var i = 0u; i < s.k; i = i + 1u) {{
            let h = norm[i] * (x[r * s.k + i] * inv);
            g = g + h * gate[c * s.k + i];
            u = u + h * up[c * s.k + i];
        }}
        dst[o] = g / (1.0 + exp(-g)) * u;
    }}
}}"
        ),
    )
    .host(|args, _| {
        let [act, x, norm, gate, up, rows, inter, k, eps] = args else {
            unreachable!("nine parameters")
        };
        norm_gate_up::<T>(
            act.slice_mut::<T>(),
            x.slice::<T>(),
            norm.slice::<T>(),
            gate.slice::<T>(),
            up.slice::<T>(),
            scalar(rows),
            scalar(inter),
            scalar(k),
            eps.scalar::<f32>(),
        );
    })
}

/// WGSL: the inverse root mean square of row `r` of `x` (`s.k` wide, `s.eps`).
const WGSL_NORM: &str = "fn inv_rms(r: u32) -> f32 {
    var acc = 0.0;
    for (var i = 0u; i < s.k; i = i + 1u) { let v = x[r * s.k + i]; acc = acc + v * v; }
    return 1.0 / sqrt(acc / f32(s.k) + s.eps);
}";

fn product(first: usize, second: usize) -> Extent {
    Extent::AtLeastProduct { first, second }
}

fn at_least(param: usize) -> Extent {
    Extent::AtLeastScalar { param, factor: 1 }
}
