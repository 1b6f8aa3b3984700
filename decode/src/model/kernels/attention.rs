//! Decode attention: grouped-query attention of each row's queries over its cache slot, with
//! an online softmax in `f32` over the positions `0..len` — the length read from the per-step
//! buffer on the device, so one captured graph attends to as many positions as each step has.
//!
//! Two forms, chosen by the cache's length ([`Config::attention_splits`](crate::Config)):
//!
//! * `decode_attention` (caches of at most `attention_chunk` positions): one block per
//!   (head, row).
//! * flash-decoding for longer caches: `decode_attention_split` runs one block per (head, row,
//!   chunk of `attention_chunk` positions) and writes each chunk's running maximum, sum and weighted
//!   values (`f32` partials); `decode_attention_combine` merges a row's chunks. At batch 1 a
//!   long cache then keeps `heads × chunks` blocks busy instead of `heads`. Chunks past a
//!   row's length exit at once.
//!
//! On CUDA a block is four warps: warp `w` takes positions `w, w + 4, ...` of its range (for
//! heads of 64, 128 or 256 elements `16 / (head_dim / 32)` of them per pass, all their loads in
//! flight together), its lanes
//! split the head's elements (each lane a contiguous run, read with wide loads), a score is a
//! butterfly sum over the lanes; each warp keeps its own maximum, sum and weighted values,
//! combined at the end. On wgpu a workgroup takes 128
//! positions at a time: one score per thread, the maximum and the sum by trees in workgroup
//! memory, then one thread per element accumulates the values.

use accel_graph::{
    FloatElement,
    kernel::{Access, Extent, Kernel},
};

use super::{scalar, with_sources};
use crate::{
    DecodeElement,
    config::MAX_HEAD_DIM,
    model::inputs::{LENS, SLOTS, field},
};

/// Threads of a block.
pub const THREADS: u32 = 128;

/// The sizes the kernels work with.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    /// Rows of the step.
    pub rows: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Positions per cache slot.
    pub max_len: usize,
    /// Cache slots.
    pub slots: usize,
    /// The scores' factor, `1/√head_dim`.
    pub scale: f32,
}

impl AttentionShape {
    /// Whether the kernels attend over these sizes: heads of at most [`MAX_HEAD_DIM`]
    /// elements, and query heads in equal groups over the key/value heads. For others a launch
    /// writes nothing, on every backend (a group past `kv_heads` would read past the cache).
    ///
    /// ```
    /// use accel_graph_decode::model::kernels::attention::AttentionShape;
    /// let s = AttentionShape { rows: 1, heads: 8, kv_heads: 2, head_dim: 64, max_len: 16, slots: 1, scale: 0.125 };
    /// assert!(s.is_supported());
    /// assert!(!AttentionShape { kv_heads: 3, ..s }.is_supported());
    /// assert!(!AttentionShape { kv_heads: 0, ..s }.is_supported());
    /// assert!(!AttentionShape { head_dim: 512, ..s }.is_supported());
    /// ```
    pub fn is_supported(&self) -> bool {
        self.head_dim <= MAX_HEAD_DIM
            && self.kv_heads != 0
            && self.heads.is_multiple_of(self.kv_heads)
    }
}

/// `f32`s per partial: the weighted values, then the maximum, then the sum.
pub fn partial_len(head_dim: usize) -> usize {
    head_dim + 2
}

/// The reference of the chunks: for row `r`, head `h` (key/value head `h / (heads /
/// kv_heads)`) and chunk `c` of `splits`, over positions `c·chunk .. min(len, (c+1)·chunk)`
/// (`chunk` positions per chunk), with `len` the row's length (0 for a
/// padding row or a slot past the cache) and `q` in `f32`: score
/// `s_t = (Σ_d q_d · k_{t,d}) · scale` (summed in order of `d`), then, in order of `t`,
/// `m' = max(m, s_t)`, `c = e^(m − m')`, `p = e^(s_t − m')`, `l = l·c + p`,
/// `acc_d = acc_d·c + p·v_{t,d}`, from `m = −∞`, `l = 0`, `acc = 0`. Partial
/// `(r·heads + h)·splits + c` holds `acc`, `m`, `l` ([`partial_len`] values). Sizes that are
/// not [supported](AttentionShape::is_supported) write nothing.
#[allow(clippy::too_many_arguments)]
pub fn attention_partials<T: FloatElement>(
    partials: &mut [f32],
    q: &[T],
    k_cache: &[T],
    v_cache: &[T],
    meta: &[u32],
    s: AttentionShape,
    chunk: usize,
    splits: usize,
) {
    if !s.is_supported() {
        return;
    }
    let d = s.head_dim;
    let width = partial_len(d);
    let group = s.heads / s.kv_heads;
    for r in 0..s.rows {
        let slot = field(meta, s.rows, SLOTS, r) as usize;
        let len = if slot < s.slots {
            (field(meta, s.rows, LENS, r) as usize).min(s.max_len)
        } else {
            0
        };
        for h in 0..s.heads {
            let qv: Vec<f32> = q[(r * s.heads + h) * d..][..d]
                .iter()
                .map(|x| x.to_f32())
                .collect();
            let base = (slot * s.kv_heads + h / group) * s.max_len * d;
            for c in 0..splits {
                let out = &mut partials[((r * s.heads + h) * splits + c) * width..][..width];
                let (acc, ml) = out.split_at_mut(d);
                acc.fill(0.0);
                let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
                for t in (c * chunk)..((c + 1) * chunk).min(len) {
                    let k = &k_cache[base + t * d..][..d];
                    let v = &v_cache[base + t * d..][..d];
                    let mut dot = 0.0f32;
                    for (qd, kd) in qv.iter().zip(k) {
                        dot += qd * kd.to_f32();
                    }
                    let score = dot * s.scale;
                    let m_new = m.max(score);
                    let corr = (m - m_new).exp();
                    let p = (score - m_new).exp();
                    l = l * corr + p;
                    for (a, vd) in acc.iter_mut().zip(v) {
                        *a = *a * corr + p * vd.to_f32();
                    }
                    m = m_new;
                }
                ml[0] = m;
                ml[1] = l;
            }
        }
    }
}

/// The reference of the merge: for each (row, head), over its chunks with a sum `l > 0`, in
/// order: `M = max m`, `f_c = e^(m_c − M)`, `L = Σ l_c·f_c`, `out_d = T((Σ acc_{c,d}·f_c) / L)`;
/// zeros where no chunk attended to anything (padding rows).
pub fn attention_combine<T: FloatElement>(
    out: &mut [T],
    partials: &[f32],
    rows: usize,
    heads: usize,
    head_dim: usize,
    splits: usize,
) {
    let (d, width) = (head_dim, partial_len(head_dim));
    for rh in 0..rows * heads {
        let parts: Vec<&[f32]> = (0..splits)
            .map(|c| &partials[(rh * splits + c) * width..][..width])
            .filter(|p| p[d + 1] > 0.0)
            .collect();
        let o = &mut out[rh * d..][..d];
        if parts.is_empty() {
            o.fill(T::from_f32(0.0));
            continue;
        }
        let max = parts.iter().fold(f32::NEG_INFINITY, |m, p| m.max(p[d]));
        let factors: Vec<f32> = parts.iter().map(|p| (p[d] - max).exp()).collect();
        let mut total = 0.0f32;
        for (p, f) in parts.iter().zip(&factors) {
            total += p[d + 1] * f;
        }
        for (i, o) in o.iter_mut().enumerate() {
            let mut a = 0.0f32;
            for (p, f) in parts.iter().zip(&factors) {
                a += p[i] * f;
            }
            *o = T::from_f32(a / total);
        }
    }
}

/// The reference of the one-kernel form: [`attention_partials`] with one chunk of the whole
/// cache, then [`attention_combine`] (whose factor is then exactly 1, so this is
/// `T(acc_d / l)`). Sizes that are not [supported](AttentionShape::is_supported) write
/// nothing.
pub fn attention<T: FloatElement>(
    out: &mut [T],
    q: &[T],
    k_cache: &[T],
    v_cache: &[T],
    meta: &[u32],
    s: AttentionShape,
) {
    if !s.is_supported() {
        return;
    }
    let mut partials = vec![0.0f32; s.rows * s.heads * partial_len(s.head_dim)];
    attention_partials(&mut partials, q, k_cache, v_cache, meta, s, s.max_len, 1);
    attention_combine(out, &partials, s.rows, s.heads, s.head_dim, 1);
}

/// CUDA C both attention kernels share: the four warps' pass over positions `t0..t1` of one
/// (row, head), leaving each warp's maximum, sum and weighted values in shared memory.
const CUDA_ATTEND: &str = r#"
#define NEG_INF __int_as_float((int)0xff800000u)

// AttentionShape::is_supported: heads that fit the shared arrays, and query heads in equal
// groups over the key/value heads (a group past the cache otherwise).
__device__ __forceinline__ bool attend_supported(unsigned heads, unsigned kv_heads, unsigned D) {
    return D <= 256u && kv_heads != 0u && heads % kv_heads == 0u;
}
struct alignas(8) ag_u2 { unsigned x, y; };
struct alignas(16) ag_u4 { unsigned x, y, z, w; };
struct alignas(8) ag_f2 { float x, y; };
struct alignas(16) ag_f4 { float x, y, z, w; };

__device__ __forceinline__ void unpack_bf16x2(unsigned u, float* f) {
    f[0] = __uint_as_float(u << 16);
    f[1] = __uint_as_float(u & 0xffff0000u);
}

// V (2, 4 or 8) consecutive elements at p, which is aligned to V elements, in as few loads.
template <int V> __device__ __forceinline__ void ld_vec(const elem_t* p, float* f) {
    if (sizeof(elem_t) == 2) {
        if (V == 2) {
            unpack_bf16x2(*reinterpret_cast<const unsigned*>(p), f);
        } else if (V == 4) {
            ag_u2 a = *reinterpret_cast<const ag_u2*>(p);
            unpack_bf16x2(a.x, f);
            unpack_bf16x2(a.y, f + 2);
        } else {
            ag_u4 a = *reinterpret_cast<const ag_u4*>(p);
            unpack_bf16x2(a.x, f);
            unpack_bf16x2(a.y, f + 2);
            unpack_bf16x2(a.z, f + 4);
            unpack_bf16x2(a.w, f + 6);
        }
    } else {
        const float* fp = reinterpret_cast<const float*>(p);
        if (V == 2) {
            ag_f2 a = *reinterpret_cast<const ag_f2*>(fp);
            f[0] = a.x; f[1] = a.y;
        } else {
#pragma unroll
            for (int i = 0; i < V; i += 4) {
                ag_f4 a = *reinterpret_cast<const ag_f4*>(fp + i);
                f[i] = a.x; f[i + 1] = a.y; f[i + 2] = a.z; f[i + 3] = a.w;
            }
        }
    }
}

// attend_warps for heads of 32·V elements: lane `l` holds elements l·V .. l·V + V (wide
// loads), and each warp takes P = 16 / V of its positions per pass (t, t + 4, ...), every
// load of the pass issued before the first is used: at batch 1 a block's chunk is a few
// passes, so what a pass costs is one trip to memory, not P of them. Positions past t1 weigh
// 0 (the pass's first position is always within the range). 32 / V a pass was 1–2 % faster
// at batch 1 on an H100 and up to 9 % slower at 32 and 64 rows: 96 registers a thread against
// 56 leave fewer blocks resident.
template <int V>
__device__ __forceinline__ void attend_vec(const elem_t* qp, const elem_t* kb,
        const elem_t* vb, unsigned t0, unsigned t1, unsigned D, float scale, float* s_m,
        float* s_l, float (*s_acc)[256]) {
    constexpr int P = 16 / V;
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned e = lane * V;
    float qr[V], acc[V];
    ld_vec<V>(qp + e, qr);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    float m = NEG_INF, l = 0.0f;
    for (unsigned t = t0 + warp; t < t1; t += 4u * P) {
        // Positions past t1 load the last one (its score is dropped below): loads without
        // branches, so all of them are issued before the first is unpacked.
        float kv[P][V], vv[P][V];
#pragma unroll
        for (int j = 0; j < P; ++j) {
            const unsigned tj = min(t + 4u * j, t1 - 1u);
            ld_vec<V>(kb + (idx_t)tj * D + e, kv[j]);
            ld_vec<V>(vb + (idx_t)tj * D + e, vv[j]);
        }
        float sc[P];
#pragma unroll
        for (int j = 0; j < P; ++j) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < V; ++i) d += qr[i] * kv[j][i];
            sc[j] = d;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
            for (int j = 0; j < P; ++j) sc[j] += __shfl_xor_sync(0xffffffffu, sc[j], off);
        }
        float m_new = m;
#pragma unroll
        for (int j = 0; j < P; ++j) {
            sc[j] = t + 4u * j < t1 ? sc[j] * scale : NEG_INF;
            m_new = fmaxf(m_new, sc[j]);
        }
        const float corr = expf(m - m_new);
        l *= corr;
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] *= corr;
#pragma unroll
        for (int j = 0; j < P; ++j) {
            const float pj = expf(sc[j] - m_new);
            l += pj;
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] += pj * vv[j][i];
        }
        m = m_new;
    }
    if (lane == 0u) { s_m[warp] = m; s_l[warp] = l; }
#pragma unroll
    for (int i = 0; i < V; ++i) s_acc[warp][e + i] = acc[i];
    __syncthreads();
}

__device__ __forceinline__ void attend_warps(const elem_t* qp, const elem_t* kb,
        const elem_t* vb, unsigned t0, unsigned t1, unsigned D, float scale, float* s_m,
        float* s_l, float (*s_acc)[256]) {
    // Heads of 64, 128 or 256 elements (the usual ones) take the wide path.
    if (D == 64u) { attend_vec<2>(qp, kb, vb, t0, t1, D, scale, s_m, s_l, s_acc); return; }
    if (D == 128u) { attend_vec<4>(qp, kb, vb, t0, t1, D, scale, s_m, s_l, s_acc); return; }
    if (D == 256u) { attend_vec<8>(qp, kb, vb, t0, t1, D, scale, s_m, s_l, s_acc); return; }
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    float qr[8], acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        unsigned d = lane + 32u * i;
        qr[i] = d < D ? ld(qp[d]) : 0.0f;
        acc[i] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (unsigned t = t0 + warp; t < t1; t += 4u) {
        const elem_t* kp = kb + (idx_t)t * D;
        const elem_t* vp = vb + (idx_t)t * D;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            unsigned d = lane + 32u * i;
            if (d < D) dot += qr[i] * ld(kp[d]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        float score = dot * scale;
        float m_new = fmaxf(m, score);
        float corr = expf(m - m_new);
        float p = expf(score - m_new);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            unsigned d = lane + 32u * i;
            if (d < D) acc[i] = acc[i] * corr + p * ld(vp[d]);
        }
        m = m_new;
    }
    if (lane == 0u) { s_m[warp] = m; s_l[warp] = l; }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        unsigned d = lane + 32u * i;
        if (d < D) s_acc[warp][d] = acc[i];
    }
    __syncthreads();
}

// The block's maximum, its factors per warp and its sum, from attend_warps' shared values.
__device__ __forceinline__ float merge_warps(const float* s_m, const float* s_l, float* f,
        float* total) {
    float mx = NEG_INF;
#pragma unroll
    for (int w = 0; w < 4; ++w) if (s_l[w] > 0.0f) mx = fmaxf(mx, s_m[w]);
    *total = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        f[w] = s_l[w] > 0.0f ? expf(s_m[w] - mx) : 0.0f;
        *total += s_l[w] * f[w];
    }
    return mx;
}
"#;

/// WGSL both attention kernels share: the bindings but the first, and the workgroup's pass
/// over positions `t0..t1` of one (row, head) into `m`, `l`, `acc0` (element `tid`) and `acc1`
/// (element `tid + 128`).
const WGSL_ATTEND: &str = r#"
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read> v_cache: array<f32>;
@group(0) @binding(4) var<storage, read> step_in: array<u32>;
@group(0) @binding(5) var<uniform> s: Scalars;
var<workgroup> qs: array<f32, 256>;
var<workgroup> ps: array<f32, 128>;
var<workgroup> red: array<f32, 128>;
var<private> m: f32;
var<private> l: f32;
var<private> acc0: f32;
var<private> acc1: f32;
const LOWEST: f32 = -3.4028235e38;

// AttentionShape::is_supported: heads that fit the workgroup arrays, and query heads in equal
// groups over the key/value heads (a group past the cache otherwise).
fn attend_supported() -> bool {
    return s.head_dim <= 256u && s.kv_heads != 0u && s.heads % s.kv_heads == 0u;
}

// The row's attended length: 0 for padding rows and slots past the cache.
fn row_len(r: u32) -> u32 {
    var len = min(step_in[2u * s.rows + r], s.max_len);
    if (step_in[3u * s.rows + r] >= s.slots) { len = 0u; }
    return len;
}

fn attend(r: u32, h: u32, tid: u32, t0: u32, t1: u32) {
    let dim = s.head_dim;
    let o = (r * s.heads + h) * dim;
    for (var d = tid; d < dim; d = d + 128u) { qs[d] = q[o + d]; }
    workgroupBarrier();
    let slot = step_in[3u * s.rows + r];
    let kvh = h / (s.heads / s.kv_heads);
    let base = (slot * s.kv_heads + kvh) * s.max_len * dim;
    m = LOWEST;
    l = 0.0;
    acc0 = 0.0;
    acc1 = 0.0;
    for (var c = t0; c < t1; c = c + 128u) {
        let t = c + tid;
        var score = LOWEST;
        if (t < t1) {
            var dot = 0.0;
            for (var d = 0u; d < dim; d = d + 1u) { dot = dot + qs[d] * k_cache[base + t * dim + d]; }
            score = dot * s.scale;
        }
        red[tid] = score;
        workgroupBarrier();
        for (var stride = 64u; stride > 0u; stride = stride / 2u) {
            if (tid < stride) { red[tid] = max(red[tid], red[tid + stride]); }
            workgroupBarrier();
        }
        let m_new = max(m, red[0]);
        workgroupBarrier();
        let corr = exp(m - m_new);
        var p = 0.0;
        if (t < t1) { p = exp(score - m_new); }
        ps[tid] = p;
        red[tid] = p;
        workgroupBarrier();
        for (var stride = 64u; stride > 0u; stride = stride / 2u) {
            if (tid < stride) { red[tid] = red[tid] + red[tid + stride]; }
            workgroupBarrier();
        }
        l = l * corr + red[0];
        let n = min(128u, t1 - c);
        if (tid < dim) {
            var a = acc0 * corr;
            for (var j = 0u; j < n; j = j + 1u) { a = a + ps[j] * v_cache[base + (c + j) * dim + tid]; }
            acc0 = a;
        }
        if (tid + 128u < dim) {
            var a = acc1 * corr;
            for (var j = 0u; j < n; j = j + 1u) { a = a + ps[j] * v_cache[base + (c + j) * dim + tid + 128u]; }
            acc1 = a;
        }
        m = m_new;
        workgroupBarrier();
    }
}
"#;

/// The parameters both attention kernels share after their output: `q`, the caches, the
/// per-step input and the sizes.
fn shared_params<T: DecodeElement>(k: Kernel) -> Kernel {
    let cache = Extent::AtLeastProductOf(&[10, 7, 9, 8]);
    k.buffer_with_extent::<T>("q", Access::Read, Extent::AtLeastProductOf(&[5, 6, 8]))
        .buffer_with_extent::<T>("k_cache", Access::Read, cache)
        .buffer_with_extent::<T>("v_cache", Access::Read, cache)
        .buffer_with_extent::<u32>(
            "meta",
            Access::Read,
            Extent::AtLeastScalar {
                param: 5,
                factor: 4,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("heads")
        .scalar::<u32>("kv_heads")
        .scalar::<u32>("head_dim")
        .scalar::<u32>("max_len")
        .scalar::<u32>("slots")
        .scalar::<f32>("scale")
        .block([THREADS, 1, 1])
}

fn cuda_source(body: &str) -> String {
    format!("{CUDA_ATTEND}\n{body}")
}

fn wgsl_source(scalars: &str, output: &str, body: &str) -> String {
    format!("{scalars}\n{output}\n{WGSL_ATTEND}\n{body}")
}

/// The sizes from a host function's scalar arguments `rows .. scale`.
fn shape(args: &[accel_graph::kernel::HostArg]) -> AttentionShape {
    AttentionShape {
        rows: scalar(&args[0]),
        heads: scalar(&args[1]),
        kv_heads: scalar(&args[2]),
        head_dim: scalar(&args[3]),
        max_len: scalar(&args[4]),
        slots: scalar(&args[5]),
        scale: args[6].scalar::<f32>(),
    }
}

const WGSL_SCALARS: &str = "struct Scalars { rows: u32, heads: u32, kv_heads: u32, head_dim: u32, \
                            max_len: u32, slots: u32, scale: f32 }";

/// `decode_attention`: one block per (head, row) over the whole length.
pub(super) fn kernel<T: DecodeElement>() -> Kernel {
    let k = shared_params::<T>(Kernel::new("decode_attention").buffer_with_extent::<T>(
        "out",
        Access::Write,
        Extent::AtLeastProductOf(&[5, 6, 8]),
    ));
    let cuda = cuda_source(
        r#"extern "C" __global__ void decode_attention(elem_t* out, const elem_t* q,
        const elem_t* k_cache, const elem_t* v_cache, const unsigned* meta, unsigned rows,
        unsigned heads, unsigned kv_heads, unsigned head_dim, unsigned max_len, unsigned slots,
        float scale) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    __shared__ float s_m[4], s_l[4];
    __shared__ float s_acc[4][256];
    const unsigned h = blockIdx.x, r = blockIdx.y, D = head_dim;
    // A grid past the sizes, or sizes the kernel does not take, write nothing.
    if (h >= heads || r >= rows || !attend_supported(heads, kv_heads, D)) return;
    elem_t* o = out + ((idx_t)r * heads + h) * D;
    unsigned len = meta[2u * rows + r], slot = meta[3u * rows + r];
    if (len > max_len) len = max_len;
    if (slot >= slots) len = 0u;
    if (len == 0u) {
        for (unsigned d = threadIdx.x; d < D; d += 128u) o[d] = st(0.0f);
        return;
    }
    const idx_t base = ((idx_t)slot * kv_heads + h / (heads / kv_heads)) * max_len * D;
    attend_warps(q + ((idx_t)r * heads + h) * D, k_cache + base, v_cache + base, 0u, len, D,
                 scale, s_m, s_l, s_acc);
    float f[4], total;
    merge_warps(s_m, s_l, f, &total);
    for (unsigned d = threadIdx.x; d < D; d += 128u) {
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) a += s_acc[w][d] * f[w];
        o[d] = st(a / total);
    }
}"#,
    );
    let wgsl = wgsl_source(
        WGSL_SCALARS,
        "@group(0) @binding(0) var<storage, read_write> dst: array<f32>;",
        r#"@compute @workgroup_size(128)
fn decode_attention(@builtin(workgroup_id) wg: vec3<u32>,
                    @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let r = wg.y;
    // A grid past the sizes, or sizes the kernel does not take, write nothing.
    if (h >= s.heads || r >= s.rows || !attend_supported()) { return; }
    let tid = lid.x;
    let len = row_len(r);
    attend(r, h, tid, 0u, len);
    var inv = 0.0;
    if (len > 0u) { inv = 1.0 / l; }
    let o = (r * s.heads + h) * s.head_dim;
    if (tid < s.head_dim) { dst[o + tid] = acc0 * inv; }
    if (tid + 128u < s.head_dim) { dst[o + tid + 128u] = acc1 * inv; }
}"#,
    );
    with_sources::<T>(k, &cuda, wgsl).host(|args, _| {
        let [out, q, k_cache, v_cache, meta, sizes @ ..] = args else {
            unreachable!("twelve parameters")
        };
        attention::<T>(
            out.slice_mut::<T>(),
            q.slice::<T>(),
            k_cache.slice::<T>(),
            v_cache.slice::<T>(),
            meta.slice::<u32>(),
            shape(sizes),
        );
    })
}

/// `decode_attention_split`: one block per (head, row, chunk), writing the chunk's partial.
/// Launched over `[heads, rows, splits]`.
pub(super) fn split_kernel<T: DecodeElement>() -> Kernel {
    let k = shared_params::<T>(
        Kernel::new("decode_attention_split").buffer_with_extent::<f32>(
            "partials",
            Access::Write,
            // rows × heads × splits × (head_dim + 2): each chunk's sums, maximum and total.
            Extent::AtLeastSumOfProducts(&[&[5, 6, 13, 8], &[5, 6, 13], &[5, 6, 13]]),
        ),
    )
    .scalar::<u32>("chunk")
    .scalar::<u32>("splits");
    let cuda = cuda_source(
        r#"extern "C" __global__ void decode_attention_split(float* partials, const elem_t* q,
        const elem_t* k_cache, const elem_t* v_cache, const unsigned* meta, unsigned rows,
        unsigned heads, unsigned kv_heads, unsigned head_dim, unsigned max_len, unsigned slots,
        float scale, unsigned chunk, unsigned splits) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    __shared__ float s_m[4], s_l[4];
    __shared__ float s_acc[4][256];
    const unsigned h = blockIdx.x, r = blockIdx.y, c = blockIdx.z, D = head_dim;
    if (h >= heads || r >= rows || c >= splits || !attend_supported(heads, kv_heads, D)) return;
    float* out = partials + (((idx_t)r * heads + h) * splits + c) * (D + 2u);
    unsigned len = meta[2u * rows + r], slot = meta[3u * rows + r];
    if (len > max_len) len = max_len;
    if (slot >= slots) len = 0u;
    const unsigned t0 = c * chunk;
    const unsigned t1 = len < t0 + chunk ? len : t0 + chunk;
    if (t0 >= t1) {
        for (unsigned d = threadIdx.x; d < D; d += 128u) out[d] = 0.0f;
        if (threadIdx.x == 0u) { out[D] = NEG_INF; out[D + 1u] = 0.0f; }
        return;
    }
    const idx_t base = ((idx_t)slot * kv_heads + h / (heads / kv_heads)) * max_len * D;
    attend_warps(q + ((idx_t)r * heads + h) * D, k_cache + base, v_cache + base, t0, t1, D,
                 scale, s_m, s_l, s_acc);
    float f[4], total;
    float mx = merge_warps(s_m, s_l, f, &total);
    for (unsigned d = threadIdx.x; d < D; d += 128u) {
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) a += s_acc[w][d] * f[w];
        out[d] = a;
    }
    if (threadIdx.x == 0u) { out[D] = mx; out[D + 1u] = total; }
}"#,
    );
    let wgsl = wgsl_source(
        "struct Scalars { rows: u32, heads: u32, kv_heads: u32, head_dim: u32, max_len: u32, \
         slots: u32, scale: f32, chunk: u32, splits: u32 }",
        "@group(0) @binding(0) var<storage, read_write> partials: array<f32>;",
        r#"@compute @workgroup_size(128)
fn decode_attention_split(@builtin(workgroup_id) wg: vec3<u32>,
                          @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let r = wg.y;
    let c = wg.z;
    if (h >= s.heads || r >= s.rows || c >= s.splits || !attend_supported()) { return; }
    let tid = lid.x;
    let dim = s.head_dim;
    let len = row_len(r);
    let t0 = c * s.chunk;
    let t1 = max(t0, min(len, t0 + s.chunk));
    attend(r, h, tid, t0, t1);
    let o = ((r * s.heads + h) * s.splits + c) * (dim + 2u);
    if (tid < dim) { partials[o + tid] = acc0; }
    if (tid + 128u < dim) { partials[o + tid + 128u] = acc1; }
    if (tid == 0u) {
        partials[o + dim] = m;
        partials[o + dim + 1u] = l;
    }
}"#,
    );
    with_sources::<T>(k, &cuda, wgsl).host(|args, _| {
        let [out, q, k_cache, v_cache, meta, sizes @ .., chunk, splits] = args else {
            unreachable!("fourteen parameters")
        };
        attention_partials::<T>(
            out.slice_mut::<f32>(),
            q.slice::<T>(),
            k_cache.slice::<T>(),
            v_cache.slice::<T>(),
            meta.slice::<u32>(),
            shape(sizes),
            scalar(chunk),
            scalar(splits),
        );
    })
}

/// `decode_attention_combine`: one block per (head, row), merging its chunks' partials.
pub(super) fn combine_kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_attention_combine")
        .buffer_with_extent::<T>("out", Access::Write, Extent::AtLeastProductOf(&[2, 3, 4]))
        .buffer_with_extent::<f32>(
            "partials",
            Access::Read,
            // rows × heads × splits × (head_dim + 2), as the split kernel writes them.
            Extent::AtLeastSumOfProducts(&[&[2, 3, 5, 4], &[2, 3, 5], &[2, 3, 5]]),
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("heads")
        .scalar::<u32>("head_dim")
        .scalar::<u32>("splits")
        .block([THREADS, 1, 1]);
    let cuda = cuda_source(
        r#"extern "C" __global__ void decode_attention_combine(elem_t* out, const float* partials,
        unsigned rows, unsigned heads, unsigned head_dim, unsigned splits) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    const unsigned h = blockIdx.x, r = blockIdx.y, D = head_dim, W = head_dim + 2u;
    if (h >= heads || r >= rows) return;
    const float* p = partials + ((idx_t)r * heads + h) * splits * W;
    elem_t* o = out + ((idx_t)r * heads + h) * D;
    float mx = NEG_INF, total = 0.0f;
    for (unsigned c = 0u; c < splits; ++c)
        if (p[c * W + D + 1u] > 0.0f) mx = fmaxf(mx, p[c * W + D]);
    for (unsigned c = 0u; c < splits; ++c) {
        float l = p[c * W + D + 1u];
        if (l > 0.0f) total += l * expf(p[c * W + D] - mx);
    }
    for (unsigned d = threadIdx.x; d < D; d += 128u) {
        float a = 0.0f;
        for (unsigned c = 0u; c < splits; ++c)
            if (p[c * W + D + 1u] > 0.0f) a += p[c * W + d] * expf(p[c * W + D] - mx);
        o[d] = st(total > 0.0f ? a / total : 0.0f);
    }
}"#,
    );
    let wgsl = r#"struct Scalars { rows: u32, heads: u32, head_dim: u32, splits: u32 }
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(128)
fn decode_attention_combine(@builtin(workgroup_id) wg: vec3<u32>,
                            @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wg.x;
    let r = wg.y;
    if (h >= s.heads || r >= s.rows) { return; }
    let dim = s.head_dim;
    let w = dim + 2u;
    let p = (r * s.heads + h) * s.splits * w;
    var mx = -3.4028235e38;
    var total = 0.0;
    for (var c = 0u; c < s.splits; c = c + 1u) {
        if (partials[p + c * w + dim + 1u] > 0.0) { mx = max(mx, partials[p + c * w + dim]); }
    }
    for (var c = 0u; c < s.splits; c = c + 1u) {
        let l = partials[p + c * w + dim + 1u];
        if (l > 0.0) { total = total + l * exp(partials[p + c * w + dim] - mx); }
    }
    for (var d = lid.x; d < dim; d = d + 128u) {
        var a = 0.0;
        for (var c = 0u; c < s.splits; c = c + 1u) {
            if (partials[p + c * w + dim + 1u] > 0.0) {
                a = a + partials[p + c * w + d] * exp(partials[p + c * w + dim] - mx);
            }
        }
        var v = 0.0;
        if (total > 0.0) { v = a / total; }
        dst[(r * s.heads + h) * dim + d] = v;
    }
}"#;
    with_sources::<T>(k, &cuda, wgsl).host(|args, _| {
        let [out, partials, rows, heads, head_dim, splits] = args else {
            unreachable!("six parameters")
        };
        attention_combine::<T>(
            out.slice_mut::<T>(),
            partials.slice::<f32>(),
            scalar(rows),
            scalar(heads),
            scalar(head_dim),
            scalar(splits),
        );
    })
}
