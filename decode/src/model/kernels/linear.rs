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
//! SwiGLU, and GEMM kernels tuned for larger products. Each block here takes two output
//! columns (two weight rows) at a time and up to [`MAX_ROWS`] rows of `x`; its four warps
//! split the reduction dimension `k` (rows of at least [`SPLIT_K`] elements; shorter rows are
//! read by one warp per pair of columns, four pairs a block), every lane reading 16-byte runs
//! of both weight rows
//! (two runs of each in flight with one row of `x`, one with more, loaded beside the runs of
//! `x` they meet), and a butterfly sum over the lanes and a sum over the warps in shared
//! memory give each output. Splitting `k` over the block keeps every multiprocessor busy when
//! a matrix has few rows and long ones (the MLP's down projection), and nothing waits before
//! the first weight load: no block stages or normalizes `x` first.
//!
//! Steps of three rows or more of `bf16` take the tensor cores where the device has them
//! ([`Variant`]): a warp multiplies 16 weight rows (8 output pairs) by up to 8 rows
//! of `x` per `mma` instruction, so the arithmetic that made four rows a pass latency-bound on
//! the CUDA cores costs next to nothing, and [`TILE_ROWS`] rows take one pass over the
//! weights.
//!
//! RMSNorm is folded into the product: each element of `x` is multiplied by the norm's weight
//! as it is read, its square summed beside the products, and the row's inverse root
//! multiplies the finished dot products — so the normalized row is never rounded to `T` on the
//! CUDA cores, where the unfused step rounds it (the tensor cores take it rounded to `bf16`). The host functions here are the unfused ones
//! composed (the normalized row rounded as [`super::rmsnorm`] stores it, each projection's
//! output rounded to `T` before SwiGLU as the GEMM stores it): on the mock the fused and
//! unfused steps are equal bit for bit; on a GPU they differ in the last bits, as the sums'
//! orders differ from the host's (and cuBLAS's).

use accel_graph::{
    FloatElement, Gemm,
    kernel::{Access, Extent, Kernel},
};

use super::{rmsnorm::rmsnorm, scalar, swiglu::swiglu_one, with_sources};
use crate::DecodeElement;

/// Threads of a block (four warps).
pub const THREADS: u32 = 128;

/// Rows of `x` one pass of a block takes, per variant of the kernels: a step of one row runs
/// the variant of one (fewest registers: more blocks per multiprocessor keep their weight loads
/// in flight), a step of two the variant of two (two runs of the weights in flight per lane,
/// as with one row: on an H100 the two-row step took 5 % off the `medium` step and 12 % off the
/// `small` one against the tensor-core tiles), larger steps the variant of [`MAX_ROWS`], whose
/// blocks take their rows that many at a time — the block's two weight rows read from memory
/// for the first rows and from the cache for the next.
///
/// ```
/// use accel_graph_decode::model::kernels::linear::{MAX_ROWS, pass_rows};
/// assert_eq!([pass_rows(1), pass_rows(2), pass_rows(3)], [1, 2, MAX_ROWS]);
/// ```
pub fn pass_rows(rows: usize) -> usize {
    match rows {
        0 | 1 => 1,
        2 => 2,
        _ => MAX_ROWS,
    }
}

/// Rows of `x` one pass of the larger variant takes (see [`pass_rows`]).
pub const MAX_ROWS: usize = 4;

/// Output pairs a block of the tensor-core form takes (the 16 weight rows of one tile).
pub const TILE_PAIRS: usize = 8;

/// Rows of `x` a pass of the tensor-core form takes (two tiles of 8).
pub const TILE_ROWS: usize = 16;

/// Threads of a block of the tensor-core form: eight warps split each tile's `k` (a block per
/// eight pairs leaves the 2,048-wide model's down projection 128 blocks, so each needs many
/// loads in flight).
pub const TILE_THREADS: u32 = 256;

/// Blocks the projections launch at most (each block walks its share of the output pairs).
pub const MAX_BLOCKS: usize = 65_535;

/// Weight rows at least this long (`k`) are split over a block's four warps, a block per
/// output pair; shorter ones are read by one warp each, four pairs a block. Measured on an
/// H200 (`decode_kernels`): the small model's 32,000 × 1,024 LM head took 25.4 µs split over
/// warps against cuBLAS's 20.9 (a warp had one run of 256 elements to read per pair).
pub const SPLIT_K: usize = 2048;

/// The grid of a projection with `pairs` output pairs (column pairs, or gate and up columns
/// for `decode_norm_gate_up`) of rows `k` long: a block per pair ([`SPLIT_K`] and longer) or
/// per four.
pub fn grid_for_pairs(pairs: usize, k: usize) -> [u32; 3] {
    let per_block = if k < SPLIT_K {
        (THREADS / 32) as usize
    } else {
        1
    };
    [pairs.div_ceil(per_block).clamp(1, MAX_BLOCKS) as u32, 1, 1]
}

/// The grid of a projection with `columns` output columns over rows `k` long
/// ([`grid_for_pairs`]; `paired`: `decode_norm_gate_up`, a gate and an up column a pair).
pub fn grid(columns: usize, paired: bool, k: usize) -> [u32; 3] {
    grid_for_pairs(if paired { columns } else { columns.div_ceil(2) }, k)
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

/// The CUDA C the three kernels share: the dot products of a block's two columns with up to
/// four rows, RMSNorm folded in, the epilogues.
const COMMON: &str = r#"
// Elements in 16 bytes: 8 of bf16, 4 of f32.
#define LIN_V (16u / (unsigned)sizeof(elem_t))
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

__device__ __forceinline__ bool lin_aligned(const void* p) {
    return ((unsigned long long)p & 15ull) == 0ull;
}

// One element of row r of x as the product reads it: times RMSNorm's weight `nv` with `norm`
// (the row's inverse root multiplies the whole dot product at the end), its square added to
// `sq[r]`.
template <bool NORM>
__device__ __forceinline__ float lin_in(float xv, float nv, float* sq) {
    if (NORM) { *sq = fmaf(xv, xv, *sq); return xv * nv; }
    return xv;
}

// This warp's share of the dot products of weight rows w0 and w1 with R rows of x (g real:
// rows past g repeat row g - 1 and are not stored). 16-byte loads (k % LIN_V == 0, every base
// aligned): the block's warps take the runs of 32 · LIN_V elements in turn, RUNS runs of both
// weight rows in flight per lane — and the runs of x and of the norm's weight they meet,
// loaded beside them, so no load waits for another.
template <int R, bool NORM>
__device__ __forceinline__ void lin_dot_vec(const elem_t* w0, const elem_t* w1,
        const elem_t* x, unsigned g, const elem_t* nw, unsigned k, unsigned part,
        unsigned parts, unsigned lane, float* a0, float* a1, float* sq) {
    // Two runs in flight with one or two rows, one with more (their runs of x take registers
    // too): measured on an H200, four runs of one row read the MLP's 46 MB 28 % slower than two
    // (more registers, fewer blocks per multiprocessor); on an H100 the two-row variant with
    // one run was no faster than the tensor-core tiles, with two 5–12 % faster.
    constexpr int RUNS = R <= 2 ? 2 : 1;
    const unsigned run = 32u * LIN_V, stride = parts * run;
    for (unsigned e0 = part * run + lane * LIN_V; e0 < k; e0 += RUNS * stride) {
        lin_u4 r0[RUNS], r1[RUNS], rx[RUNS][R], rn[RUNS];
#pragma unroll
        for (int u = 0; u < RUNS; ++u) {
            unsigned e = e0 + u * stride;
            if (e < k) {
                r0[u] = *reinterpret_cast<const lin_u4*>(w0 + e);
                r1[u] = *reinterpret_cast<const lin_u4*>(w1 + e);
                if (NORM) rn[u] = *reinterpret_cast<const lin_u4*>(nw + e);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    unsigned rr = (unsigned)r < g ? (unsigned)r : g - 1u;
                    rx[u][r] = *reinterpret_cast<const lin_u4*>(x + (idx_t)rr * k + e);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < RUNS; ++u) {
            if (e0 + u * stride >= k) break;
            float f0[8], f1[8], nv[8];
            lin_unpack(r0[u], f0);
            lin_unpack(r1[u], f1);
            if (NORM) lin_unpack(rn[u], nv);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float xv[8];
                lin_unpack(rx[u][r], xv);
#pragma unroll
                for (unsigned i = 0; i < LIN_V; ++i) {
                    float h = lin_in<NORM>(xv[i], nv[i], &sq[r]);
                    a0[r] = fmaf(h, f0[i], a0[r]);
                    a1[r] = fmaf(h, f1[i], a1[r]);
                }
            }
        }
    }
}

// The same one element per load (any k, any alignment): the block's threads take the
// elements in turn.
template <int R, bool NORM>
__device__ __forceinline__ void lin_dot_scalar(const elem_t* w0, const elem_t* w1,
        const elem_t* x, unsigned g, const elem_t* nw, unsigned k, unsigned part,
        unsigned parts, unsigned lane, float* a0, float* a1, float* sq) {
    for (unsigned e = part * 32u + lane; e < k; e += parts * 32u) {
        float f0 = ld(w0[e]), f1 = ld(w1[e]);
        float nv = NORM ? ld(nw[e]) : 1.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            unsigned rr = (unsigned)r < g ? (unsigned)r : g - 1u;
            float h = lin_in<NORM>(ld(x[(idx_t)rr * k + e]), nv, &sq[r]);
            a0[r] = fmaf(h, f0, a0[r]);
            a1[r] = fmaf(h, f1, a1[r]);
        }
    }
}

// What a projection does with its outputs: which two weight rows its pair p reads, and where
// the two dot products of a row go. `prefetch` runs (in threads 0 .. g) before the products,
// `store` after them, for the same row and pair, in the same thread.

// `out = x · Wᵀ + beta · out`: columns 2p and 2p + 1 (the last pair of an odd n has one).
struct LinOut {
    elem_t* out; const elem_t* w; unsigned n; float beta; float old0, old1;
    __device__ unsigned pairs() const { return (n + 1u) / 2u; }
    __device__ void weights(unsigned p, unsigned k, const elem_t** w0, const elem_t** w1) const {
        *w0 = w + (idx_t)(2u * p) * k;
        *w1 = w + (idx_t)(2u * p + 1u < n ? 2u * p + 1u : 2u * p) * k;
    }
    // The residual the sum adds, loaded now: its latency passes with the products'.
    __device__ void prefetch(unsigned row, unsigned p) {
        if (beta == 0.0f) return;
        old0 = ld(out[(idx_t)row * n + 2u * p]);
        if (2u * p + 1u < n) old1 = ld(out[(idx_t)row * n + 2u * p + 1u]);
    }
    __device__ float add(float acc, float old) const {
        return beta == 0.0f ? acc : __fadd_rn(acc, __fmul_rn(beta, old));
    }
    __device__ void store(unsigned row, unsigned p, float d0, float d1) {
        out[(idx_t)row * n + 2u * p] = st(add(d0, old0));
        if (2u * p + 1u < n) out[(idx_t)row * n + 2u * p + 1u] = st(add(d1, old1));
    }
};

// `act = silu(T(h · Gᵀ)) · T(h · Uᵀ)`: column p from gate row p and up row p.
struct LinGateUp {
    elem_t* act; const elem_t* gate; const elem_t* up; unsigned n;
    __device__ unsigned pairs() const { return n; }
    __device__ void weights(unsigned p, unsigned k, const elem_t** w0, const elem_t** w1) const {
        *w0 = gate + (idx_t)p * k;
        *w1 = up + (idx_t)p * k;
    }
    __device__ void prefetch(unsigned, unsigned) {}
    __device__ void store(unsigned row, unsigned p, float d0, float d1) {
        float gv = ld(st(d0)), uv = ld(st(d1));
        float silu = ld(st(gv / (1.0f + expf(-gv))));
        act[(idx_t)row * n + p] = st(__fmul_rn(silu, uv));
    }
};

// Output pair p of rows r0 .. r0 + g (g <= R): by the whole block, its warps each summing
// a share of k that meets the others' in shared memory, added in warp order (the same order
// every replay) — or, `whole`, by one warp alone (short rows, where splitting them leaves a
// warp too little to read).
template <int R, bool NORM, class E>
__device__ __forceinline__ void lin_pair(bool vec, bool whole, E& e, const elem_t* w0,
        const elem_t* w1, const elem_t* x, unsigned r0, unsigned g, const elem_t* nw,
        unsigned k, unsigned p, float eps, float (*part)[3][R]) {
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    // The thread that finishes row r0 + r.
    const unsigned r = whole ? lane : threadIdx.x;
    if (r < g) e.prefetch(r0 + r, p);
    const elem_t* xr = x + (idx_t)r0 * k;
    const unsigned share = whole ? 0u : warp, shares = whole ? 1u : LIN_WARPS;
    float a0[R], a1[R], sq[R];
#pragma unroll
    for (int i = 0; i < R; ++i) { a0[i] = 0.0f; a1[i] = 0.0f; sq[i] = 0.0f; }
    if (vec) lin_dot_vec<R, NORM>(w0, w1, xr, g, nw, k, share, shares, lane, a0, a1, sq);
    else lin_dot_scalar<R, NORM>(w0, w1, xr, g, nw, k, share, shares, lane, a0, a1, sq);
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            a0[i] += __shfl_xor_sync(0xffffffffu, a0[i], off);
            a1[i] += __shfl_xor_sync(0xffffffffu, a1[i], off);
            if (NORM) sq[i] += __shfl_xor_sync(0xffffffffu, sq[i], off);
        }
    }
    float d0 = 0.0f, d1 = 0.0f, s = 0.0f;
    if (whole) {
        // Every lane holds the sums: lane r takes row r's (selected, not indexed, to keep the
        // sums in registers).
#pragma unroll
        for (int i = 0; i < R; ++i) {
            if ((unsigned)i == r) { d0 = a0[i]; d1 = a1[i]; s = sq[i]; }
        }
    } else {
        if (lane == 0u) {
#pragma unroll
            for (int i = 0; i < R; ++i) {
                part[warp][0][i] = a0[i]; part[warp][1][i] = a1[i]; part[warp][2][i] = sq[i];
            }
        }
        __syncthreads();
        if (r < g) {
            for (unsigned w = 0; w < LIN_WARPS; ++w) {
                d0 += part[w][0][r]; d1 += part[w][1][r]; s += part[w][2][r];
            }
        }
    }
    if (r < g) {
        // Rows of no elements have products of 0, as the host's (whose inverse root of an
        // empty row, 0 / 0, multiplies nothing): not NaN times 0.
        if (NORM && k != 0u) {
            const float inv = 1.0f / sqrtf(__fadd_rn(s / (float)k, eps));
            d0 *= inv; d1 *= inv;
        }
        e.store(r0 + r, p, d0, d1);
    }
    // The partial sums are read before the block's next pair overwrites them.
    if (!whole) __syncthreads();
}

// How every projection begins, in every thread: the wait for the kernel before it on the
// stream (whose output it reads, or whose input it may overwrite), then the next kernel let
// launch — a no-op unless the kernel was launched to overlap its predecessor
// (Kernels::overlapped). Asking the first weights into L2 before the wait was measured too, on
// an H200: it made the one-row step 5 % slower (the prefetches compete with the predecessor's
// own reads), so nothing is read before it.
__device__ __forceinline__ void lin_start() {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
}

// The whole projection after lin_start: the block's output pairs in turn (one at a time, or
// one per warp with rows shorter than LIN_SPLIT_K), each for its rows R at a time (a pair's
// weights, read from memory for the first R rows, come from the cache for the next). `nw` is
// RMSNorm's weight with NORM. R and NORM are fixed per kernel: a kernel's registers are those
// of its largest path, and fewer registers let more blocks keep their loads in flight.
template <int R, bool NORM, class E>
__device__ __forceinline__ void lin_loop(E e, const elem_t* x, const elem_t* nw, unsigned rows,
        unsigned k, float eps) {
    __shared__ float part[LIN_WARPS][3][R];
    const elem_t *w0, *w1;
    e.weights(0u, k, &w0, &w1);
    const bool vec = k % LIN_V == 0u && lin_aligned(x) && (!NORM || lin_aligned(nw))
        && lin_aligned(w0) && lin_aligned(w1);
    // The same for the whole block (k is): only the split form meets at barriers.
    const bool whole = k < LIN_SPLIT_K;
    const unsigned per_block = whole ? LIN_WARPS : 1u;
    const unsigned pairs = e.pairs();
    for (unsigned p = blockIdx.x * per_block + (whole ? threadIdx.x >> 5 : 0u); p < pairs;
            p += gridDim.x * per_block) {
        e.weights(p, k, &w0, &w1);
        for (unsigned r0 = 0; r0 < rows; r0 += R) {
            const unsigned g = rows - r0 < (unsigned)R ? rows - r0 : (unsigned)R;
            lin_pair<R, NORM>(vec, whole, e, w0, w1, x, r0, g, nw, k, p, eps, part);
        }
    }
}

"#;

/// The CUDA C of the tensor-core form ([`TILE_PAIRS`] pairs a block, [`TILE_ROWS`] rows a
/// pass), after [`COMMON`]: `lin_loop_tiles`, which takes the tensor-core form where the
/// kernel was built for it (`LIN_TILES`: bf16), the device has it (compute capability 8.0 or
/// later, NVIDIA) and the matrices allow it (`k` a multiple of 32, every base 16-byte
/// aligned), and [`MAX_ROWS`] rows a pass on the CUDA cores otherwise.
///
/// Each warp multiplies one 16 × 16 tile of weights by a 16 × 8 tile of `x` per
/// `mma.m16n8k16` (bf16 in, f32 accumulated), twice per 32 elements of `k`: the tile's 16
/// weight rows are the block's 8 output pairs (row `g` the first weight row of pair `g`, row
/// `g + 8` its second), its 8 columns rows of `x`. A dot product's order of terms is free, so
/// each lane loads 16 contiguous bytes of its two weight rows and of its row of `x` and hands
/// them to the two products as the fragments' `k` slots (slots `2t, 2t+1, 2t+8, 2t+9` of lane
/// `t` of its group are elements `8t .. 8t+4` of the run for the first product, `8t+4 ..
/// 8t+8` for the second): no shared memory and no shuffles before the products, and each
/// row's 64 bytes of a run come from four lanes. The block's warps split `k` in runs of 32
/// elements taken in turn, and meet in shared memory, added in warp order.
const TILES: &str = r#"
#if defined(LIN_TILES) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 \
    && !defined(__HIP_PLATFORM_AMD__)
#define LIN_MMA 1
// Runs of 32 elements of k a warp has in flight (both weight rows, every row of x).
#define LIN_UNROLL 4
// Tiles of 8 rows of x a pass takes.
#define LIN_NT 2

__device__ __forceinline__ void lin_mma(float* c, unsigned a0, unsigned a1, unsigned a2,
        unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as bf16x2, rounded to nearest even (`lo` in the low half: the lower k slot).
__device__ __forceinline__ unsigned lin_pack(float lo, float hi) {
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// A run of x as the product's B fragment: times RMSNorm's weight with NORM (rounded to bf16,
// as the unfused step stores the normalized row before its GEMM; the row's inverse root
// multiplies the finished products), its squares added to sq.
template <bool NORM>
__device__ __forceinline__ lin_u4 lin_fragment(lin_u4 xv, lin_u4 nv, float* sq) {
    if (!NORM) return xv;
    float f[8], n[8];
    lin_unpack(xv, f);
    lin_unpack(nv, n);
#pragma unroll
    for (int i = 0; i < 8; ++i) *sq = fmaf(f[i], f[i], *sq);
    lin_u4 o;
    o.x = lin_pack(f[0] * n[0], f[1] * n[1]);
    o.y = lin_pack(f[2] * n[2], f[3] * n[3]);
    o.z = lin_pack(f[4] * n[4], f[5] * n[5]);
    o.w = lin_pack(f[6] * n[6], f[7] * n[7]);
    return o;
}

// The block's output pairs 8 at a time, each for its rows 8 · LIN_NT at a time.
template <bool NORM, class E>
__device__ __forceinline__ void lin_loop_mma(E e, const elem_t* x, const elem_t* nw,
        unsigned rows, unsigned k, float eps) {
    __shared__ float part[LIN_WARPS][LIN_NT][8][8][2];
    __shared__ float sqp[LIN_WARPS][LIN_NT][8];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned g = lane >> 2, t = lane & 3u;
    const unsigned pairs = e.pairs();
    // The output this thread finishes (threads 0 .. 64 · LIN_NT): row fc of tile fnt, pair fp.
    const unsigned fnt = threadIdx.x / 64u, fp = threadIdx.x / 8u % 8u, fc = threadIdx.x % 8u;
    const bool finisher = threadIdx.x < 64u * LIN_NT;
    const unsigned stride = LIN_WARPS * 32u;
    for (unsigned p0 = blockIdx.x * 8u; p0 < pairs; p0 += gridDim.x * 8u) {
        const elem_t *wa, *wb;
        // Pairs past the last read the last one's rows and are not stored.
        e.weights(p0 + g < pairs ? p0 + g : pairs - 1u, k, &wa, &wb);
        for (unsigned r0 = 0; r0 < rows; r0 += 8u * LIN_NT) {
            const unsigned frow = r0 + fnt * 8u + fc, fpair = p0 + fp;
            const bool mine = finisher && frow < rows && fpair < pairs;
            if (mine) e.prefetch(frow, fpair);
            float c[LIN_NT][4], sq[LIN_NT];
            const elem_t* xr[LIN_NT];
            bool live[LIN_NT];
#pragma unroll
            for (int nt = 0; nt < LIN_NT; ++nt) {
                c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
                sq[nt] = 0.0f;
                const unsigned row = r0 + nt * 8u + g;
                live[nt] = row < rows;
                xr[nt] = x + (idx_t)(live[nt] ? row : 0u) * k;
            }
            // Whether a run is in k is the same in every lane (k is a multiple of 32): the
            // products below are the warp's together.
            for (unsigned e0 = warp * 32u + t * 8u; e0 < k; e0 += LIN_UNROLL * stride) {
                lin_u4 ra[LIN_UNROLL], rb[LIN_UNROLL], rn[LIN_UNROLL], rx[LIN_UNROLL][LIN_NT];
#pragma unroll
                for (int u = 0; u < LIN_UNROLL; ++u) {
                    const unsigned el = e0 + u * stride;
                    if (el < k) {
                        ra[u] = *reinterpret_cast<const lin_u4*>(wa + el);
                        rb[u] = *reinterpret_cast<const lin_u4*>(wb + el);
                        if (NORM) rn[u] = *reinterpret_cast<const lin_u4*>(nw + el);
#pragma unroll
                        for (int nt = 0; nt < LIN_NT; ++nt) {
                            if (live[nt]) rx[u][nt] = *reinterpret_cast<const lin_u4*>(xr[nt] + el);
                            else rx[u][nt] = lin_u4{0u, 0u, 0u, 0u};
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < LIN_UNROLL; ++u) {
                    if (e0 + u * stride >= k) break;
#pragma unroll
                    for (int nt = 0; nt < LIN_NT; ++nt) {
                        const lin_u4 b = lin_fragment<NORM>(rx[u][nt], rn[u], &sq[nt]);
                        lin_mma(c[nt], ra[u].x, rb[u].x, ra[u].y, rb[u].y, b.x, b.y);
                        lin_mma(c[nt], ra[u].z, rb[u].z, ra[u].w, rb[u].w, b.z, b.w);
                    }
                }
            }
            // Lane (g, t) holds pair g's products with rows 2t and 2t + 1 of each tile: c[0],
            // c[1] of its first weight row, c[2], c[3] of its second.
#pragma unroll
            for (int nt = 0; nt < LIN_NT; ++nt) {
                if (NORM) {
                    sq[nt] += __shfl_xor_sync(0xffffffffu, sq[nt], 1);
                    sq[nt] += __shfl_xor_sync(0xffffffffu, sq[nt], 2);
                    if (t == 0u) sqp[warp][nt][g] = sq[nt];
                }
                part[warp][nt][g][2u * t][0] = c[nt][0];
                part[warp][nt][g][2u * t + 1u][0] = c[nt][1];
                part[warp][nt][g][2u * t][1] = c[nt][2];
                part[warp][nt][g][2u * t + 1u][1] = c[nt][3];
            }
            __syncthreads();
            if (mine) {
                float d0 = 0.0f, d1 = 0.0f, s = 0.0f;
                for (unsigned w = 0; w < LIN_WARPS; ++w) {
                    d0 += part[w][fnt][fp][fc][0];
                    d1 += part[w][fnt][fp][fc][1];
                    if (NORM) s += sqp[w][fnt][fc];
                }
                if (NORM && k != 0u) {
                    const float inv = 1.0f / sqrtf(__fadd_rn(s / (float)k, eps));
                    d0 *= inv; d1 *= inv;
                }
                e.store(frow, fpair, d0, d1);
            }
            // The partial sums are read before the next pass overwrites them.
            __syncthreads();
        }
    }
}
#endif

// The projection of several rows after lin_start: the tensor-core form where it runs (see
// above), else MAX_ROWS rows a pass on the CUDA cores.
template <bool NORM, class E>
__device__ __forceinline__ void lin_loop_tiles(E e, const elem_t* x, const elem_t* nw,
        unsigned rows, unsigned k, float eps) {
#ifdef LIN_MMA
    const elem_t *w0, *w1;
    e.weights(0u, k, &w0, &w1);
    if (k % 32u == 0u && lin_aligned(x) && (!NORM || lin_aligned(nw)) && lin_aligned(w0)
            && lin_aligned(w1)) {
        lin_loop_mma<NORM>(e, x, nw, rows, k, eps);
        return;
    }
#endif
    lin_loop<LIN_MAX_ROWS, NORM>(e, x, nw, rows, k, eps);
}

// The projection after lin_start: one or two rows a pass (R 1 or 2), or several
// (lin_loop_tiles).
template <int R, bool NORM, class E>
__device__ __forceinline__ void lin_body(E e, const elem_t* x, const elem_t* nw, unsigned rows,
        unsigned k, float eps) {
    if (R <= 2) lin_loop<R, NORM>(e, x, nw, rows, k, eps);
    else lin_loop_tiles<NORM>(e, x, nw, rows, k, eps);
}

// A projection: lin_start, then lin_body.
template <int R, bool NORM, class E>
__device__ __forceinline__ void lin_run(E e, const elem_t* x, const elem_t* nw, unsigned rows,
        unsigned k, float eps) {
    lin_start();
    lin_body<R, NORM>(e, x, nw, rows, k, eps);
}
"#;

/// How a set of projections runs: one or two rows of `x` a pass, or several — on a device
/// with tensor cores, for `bf16`, [`TILE_ROWS`] rows a pass in tiles of [`TILE_PAIRS`] output
/// pairs a block, else [`MAX_ROWS`] rows a pass on the CUDA cores.
///
/// ```
/// use accel_graph_decode::model::kernels::linear::Variant;
/// use half::bf16;
/// assert_eq!(Variant::for_rows::<bf16>(1), Variant { pass: 1, tiles: false });
/// assert_eq!(Variant::for_rows::<bf16>(2), Variant { pass: 2, tiles: false });
/// assert_eq!(Variant::for_rows::<bf16>(3), Variant { pass: 4, tiles: true });
/// assert_eq!(Variant::for_rows::<f32>(3), Variant { pass: 4, tiles: false });
/// // A block of eight warps takes eight output pairs in the tiled form.
/// assert_eq!(Variant::for_rows::<bf16>(9).grid_for_pairs(1024, 2048), [128, 1, 1]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Rows of `x` a pass of the CUDA-core form takes ([`pass_rows`]).
    pub pass: usize,
    /// Whether the kernels are built for the tensor-core form (`mma.m16n8k16`), which they
    /// take on a device that has it.
    pub tiles: bool,
}

impl Variant {
    /// The variant a step of `rows` rows runs with elements `T`.
    pub fn for_rows<T: DecodeElement>(rows: usize) -> Variant {
        let pass = pass_rows(rows);
        Variant {
            pass,
            tiles: pass == MAX_ROWS && T::TENSOR_CORE_TILES,
        }
    }

    /// Threads of a block: [`THREADS`], or [`TILE_THREADS`] for the tensor-core form.
    pub fn threads(self) -> u32 {
        if self.tiles { TILE_THREADS } else { THREADS }
    }

    /// The grid of a projection with `pairs` output pairs of rows `k` long: a block per
    /// [`TILE_PAIRS`] pairs in the tensor-core form, else [`grid_for_pairs`].
    pub fn grid_for_pairs(self, pairs: usize, k: usize) -> [u32; 3] {
        if self.tiles {
            [pairs.div_ceil(TILE_PAIRS).clamp(1, MAX_BLOCKS) as u32, 1, 1]
        } else {
            grid_for_pairs(pairs, k)
        }
    }

    /// The grid of a projection with `columns` output columns ([`Variant::grid_for_pairs`];
    /// `paired`: `decode_norm_gate_up`, a gate and an up column a pair).
    pub fn grid(self, columns: usize, paired: bool, k: usize) -> [u32; 3] {
        self.grid_for_pairs(if paired { columns } else { columns.div_ceil(2) }, k)
    }

    /// The CUDA C the kernels of this variant share: [`COMMON`] and [`TILES`] after the sizes
    /// they are built for.
    pub(super) fn common_source(self) -> String {
        let (threads, tiles) = (
            self.threads(),
            if self.tiles {
                "#define LIN_TILES 1\n"
            } else {
                ""
            },
        );
        format!(
            "#define LIN_SPLIT_K {SPLIT_K}u\n#define LIN_MAX_ROWS {MAX_ROWS}\n\
             #define LIN_THREADS {threads}u\n#define LIN_WARPS {}u\n{tiles}{COMMON}{TILES}",
            threads / 32
        )
    }
}

/// `decode_linear_r{pass}(out, x, w, rows, n, k, beta)`: [`pass_rows`] rows of `x` a pass.
pub(super) fn linear_kernel<T: DecodeElement>(variant: Variant) -> Kernel {
    let (pass, threads) = (variant.pass, variant.threads());
    let name = format!("decode_linear_r{pass}");
    let k = Kernel::new(name.clone())
        .buffer_with_extent::<T>("out", Access::ReadWrite, product(3, 4))
        .buffer_with_extent::<T>("x", Access::Read, product(3, 5))
        .buffer_with_extent::<T>("w", Access::Read, product(4, 5))
        .scalar::<u32>("rows")
        .scalar::<u32>("n")
        .scalar::<u32>("k")
        .scalar::<f32>("beta")
        .block([threads, 1, 1]);
    let common = variant.common_source();
    with_sources::<T>(
        k,
        &format!(
            "{common}\nextern \"C\" __global__ void __launch_bounds__({threads}) {name}(\
             elem_t* out, const elem_t* x, const elem_t* w, unsigned rows, unsigned n, \
             unsigned k, float beta) {{\n    LinOut e = {{out, w, n, beta, 0.0f, \
             0.0f}};\n    lin_run<{pass}, false>(e, x, (const elem_t*)0, rows, k, 0.0f);\n}}"
        ),
        entry(
            &name,
            "decode_linear",
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
        ),
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

/// `decode_norm_linear_r{pass}(out, x, norm, w, rows, n, k, eps)`: [`pass_rows`] rows of `x`
/// a pass.
pub(super) fn norm_linear_kernel<T: DecodeElement>(variant: Variant) -> Kernel {
    let (pass, threads) = (variant.pass, variant.threads());
    let name = format!("decode_norm_linear_r{pass}");
    let k = Kernel::new(name.clone())
        .buffer_with_extent::<T>("out", Access::Write, product(4, 5))
        .buffer_with_extent::<T>("x", Access::Read, product(4, 6))
        .buffer_with_extent::<T>("norm", Access::Read, at_least(6))
        .buffer_with_extent::<T>("w", Access::Read, product(5, 6))
        .scalar::<u32>("rows")
        .scalar::<u32>("n")
        .scalar::<u32>("k")
        .scalar::<f32>("eps")
        .block([threads, 1, 1]);
    let common = variant.common_source();
    with_sources::<T>(
        k,
        &format!(
            "{common}\nextern \"C\" __global__ void __launch_bounds__({threads}) {name}(\
             elem_t* out, const elem_t* x, const elem_t* norm, const elem_t* w, unsigned rows, \
             unsigned n, unsigned k, float eps) {{\n    LinOut e = {{out, w, n, 0.0f, 0.0f, \
             0.0f}};\n    lin_run<{pass}, true>(e, x, norm, rows, k, eps);\n}}"
        ),
        entry(
            &name,
            "decode_norm_linear",
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

/// `decode_norm_gate_up_r{pass}(act, x, norm, gate, up, rows, inter, k, eps)`: [`pass_rows`]
/// rows of `x` a pass.
pub(super) fn norm_gate_up_kernel<T: DecodeElement>(variant: Variant) -> Kernel {
    let (pass, threads) = (variant.pass, variant.threads());
    let name = format!("decode_norm_gate_up_r{pass}");
    let k = Kernel::new(name.clone())
        .buffer_with_extent::<T>("act", Access::Write, product(5, 6))
        .buffer_with_extent::<T>("x", Access::Read, product(5, 7))
        .buffer_with_extent::<T>("norm", Access::Read, at_least(7))
        .buffer_with_extent::<T>("gate", Access::Read, product(6, 7))
        .buffer_with_extent::<T>("up", Access::Read, product(6, 7))
        .scalar::<u32>("rows")
        .scalar::<u32>("inter")
        .scalar::<u32>("k")
        .scalar::<f32>("eps")
        .block([threads, 1, 1]);
    let common = variant.common_source();
    with_sources::<T>(
        k,
        &format!(
            "{common}\nextern \"C\" __global__ void __launch_bounds__({threads}) {name}(\
             elem_t* act, const elem_t* x, const elem_t* norm, const elem_t* gate, \
             const elem_t* up, unsigned rows, unsigned inter, unsigned k, float eps) {{\n    \
             LinGateUp e = {{act, gate, up, inter}};\n    \
             lin_run<{pass}, true>(e, x, norm, rows, k, eps);\n}}"
        ),
        entry(
            &name,
            "decode_norm_gate_up",
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

/// The WGSL `wgsl` with its entry point `base` renamed `name` (the kernel's name, which says
/// how many rows a pass takes; WGSL's loop takes any number of rows).
pub(super) fn entry(name: &str, base: &str, wgsl: impl Into<String>) -> String {
    wgsl.into()
        .replacen(&format!("fn {base}("), &format!("fn {name}("), 1)
}

/// WGSL: the inverse root mean square of row `r` of `x` (`s.k` wide, `s.eps`).
pub(super) const WGSL_NORM: &str = "fn inv_rms(r: u32) -> f32 {
    var acc = 0.0;
    for (var i = 0u; i < s.k; i = i + 1u) { let v = x[r * s.k + i]; acc = acc + v * v; }
    return 1.0 / sqrt(acc / f32(s.k) + s.eps);
}";

pub(super) fn product(first: usize, second: usize) -> Extent {
    Extent::AtLeastProduct { first, second }
}

pub(super) fn at_least(param: usize) -> Extent {
    Extent::AtLeastScalar { param, factor: 1 }
}
