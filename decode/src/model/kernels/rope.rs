//! `decode_rope_kv`: the rotary embedding of each row's queries and keys at the row's position,
//! and the store of its keys and values into the key/value cache — one kernel after the fused
//! QKV projection.
//!
//! RoPE pairs element `i` of a head with element `i + head_dim/2` (Hugging Face's
//! `rotate_half`): `out_i = a·cos − b·sin`, `out_{i+d/2} = b·cos + a·sin` with `a = x_i`,
//! `b = x_{i+d/2}`, the angle `position · θ^(−2i/d)`. The cosines and sines come from a table
//! ([`table`], computed once on the host in `f64`), so every backend rotates by the same
//! `f32` values.

use accel_graph::{
    FloatElement,
    kernel::{Access, Extent, HostArg, Kernel},
};

use super::{scalar, with_sources};
use crate::{
    Config, DecodeElement,
    model::inputs::{LENS, POSITIONS, SLOTS, field},
};

/// The RoPE table of `config`: `max_len · head_dim/2` cosines, then as many sines; entry
/// `p · head_dim/2 + i` is for position `p` and pair `i`.
///
/// ```
/// let c = accel_graph_decode::Config::tiny();
/// let t = accel_graph_decode::model::kernels::rope::table(&c);
/// assert_eq!(t.len(), c.max_len * c.head_dim);
/// assert_eq!((t[0], t[c.max_len * c.head_dim / 2]), (1.0, 0.0)); // position 0: no rotation
/// ```
pub fn table(config: &Config) -> Vec<f32> {
    let half = config.head_dim / 2;
    let n = config.max_len * half;
    let mut out = vec![0.0f32; 2 * n];
    for p in 0..config.max_len {
        for i in 0..half {
            let inv_freq =
                f64::from(config.rope_theta).powf(-2.0 * i as f64 / config.head_dim as f64);
            let angle = p as f64 * inv_freq;
            out[p * half + i] = angle.cos() as f32;
            out[n + p * half + i] = angle.sin() as f32;
        }
    }
    out
}

/// The sizes the kernel works with.
#[derive(Debug, Clone, Copy)]
pub struct RopeShape {
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
}

impl RopeShape {
    /// The sizes a kernel's host function receives as its `u32` scalars, in their order.
    pub(super) fn from_args(
        [rows, heads, kv_heads, head_dim, max_len, slots]: [&HostArg; 6],
    ) -> Self {
        RopeShape {
            rows: scalar(rows),
            heads: scalar(heads),
            kv_heads: scalar(kv_heads),
            head_dim: scalar(head_dim),
            max_len: scalar(max_len),
            slots: scalar(slots),
        }
    }
}

/// The reference: for each row, its queries rotated into `q` (`[rows, heads·head_dim]`), and,
/// unless the row is padding (length 0) or names a slot past the cache, its rotated keys and
/// its values stored at its position of its slot in `k_cache` / `v_cache`
/// (`[slots, kv_heads, max_len, head_dim]`). `qkv` is the projection's output
/// (`[rows, (heads + 2·kv_heads)·head_dim]`); positions past the table read its last row.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv<T: FloatElement>(
    q: &mut [T],
    k_cache: &mut [T],
    v_cache: &mut [T],
    qkv: &[T],
    table: &[f32],
    meta: &[u32],
    s: RopeShape,
) {
    let (d, half) = (s.head_dim, s.head_dim / 2);
    let width = (s.heads + 2 * s.kv_heads) * d;
    let sines = s.max_len * half;
    let rotate = |x: &[T], pos: usize, out: &mut [T]| {
        for i in 0..half {
            let (a, b) = (x[i].to_f32(), x[i + half].to_f32());
            let (c, sn) = (table[pos * half + i], table[sines + pos * half + i]);
            out[i] = T::from_f32(a * c - b * sn);
            out[i + half] = T::from_f32(b * c + a * sn);
        }
    };
    for r in 0..s.rows {
        let row = &qkv[r * width..][..width];
        let pos = (field(meta, s.rows, POSITIONS, r) as usize).min(s.max_len - 1);
        for h in 0..s.heads {
            rotate(
                &row[h * d..][..d],
                pos,
                &mut q[(r * s.heads + h) * d..][..d],
            );
        }
        let (len, slot) = (
            field(meta, s.rows, LENS, r),
            field(meta, s.rows, SLOTS, r) as usize,
        );
        if len == 0 || slot >= s.slots {
            continue;
        }
        for h in 0..s.kv_heads {
            let at = ((slot * s.kv_heads + h) * s.max_len + pos) * d;
            let k = &row[(s.heads + h) * d..][..d];
            rotate(k, pos, &mut k_cache[at..][..d]);
            let v = &row[(s.heads + s.kv_heads + h) * d..][..d];
            v_cache[at..][..d].copy_from_slice(v);
        }
    }
}

/// CUDA C: what becomes of pair `i` of head `h` of row `r` (`a`, `b`: its elements `i` and
/// `i + head_dim/2`, as `T`): a query head's rotated into `q`, a key head's rotated and a value
/// head's as it is into the cache at the row's position of its slot — nothing for a padding row
/// (length 0) or a slot past the cache. The rotation rounds as [`rope_kv`] does. Shared by
/// `decode_rope_kv` and the fused QKV projection ([`super::qkv_rope`]).
pub(super) const CUDA_STORE: &str = r#"
struct RopeStore {
    elem_t* q; elem_t* k_cache; elem_t* v_cache; const float* table; const unsigned* meta;
    unsigned rows, heads, kv_heads, head_dim, max_len, slots;
    __device__ void store(unsigned r, unsigned h, unsigned i, elem_t a16, elem_t b16) const {
        const unsigned hd = head_dim / 2u;
        unsigned pos = meta[rows + r];
        if (pos >= max_len) pos = max_len - 1u;
        const unsigned len = meta[2u * rows + r], slot = meta[3u * rows + r];
        const bool cached = len != 0u && slot < slots;
        if (h >= heads + kv_heads) {
            if (!cached) return;
            idx_t at = (((idx_t)slot * kv_heads + (h - heads - kv_heads)) * max_len + pos)
                * head_dim;
            v_cache[at + i] = a16;
            v_cache[at + i + hd] = b16;
            return;
        }
        const float a = ld(a16), b = ld(b16);
        const float c = table[(idx_t)pos * hd + i];
        const float sn = table[(idx_t)max_len * hd + (idx_t)pos * hd + i];
        const elem_t lo = st(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn)));
        const elem_t hi = st(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, sn)));
        if (h < heads) {
            elem_t* o = q + ((idx_t)r * heads + h) * head_dim;
            o[i] = lo;
            o[i + hd] = hi;
        } else if (cached) {
            idx_t at = (((idx_t)slot * kv_heads + (h - heads)) * max_len + pos) * head_dim;
            k_cache[at + i] = lo;
            k_cache[at + i + hd] = hi;
        }
    }
};
"#;

/// WGSL: the same as [`CUDA_STORE`], over the bindings `q`, `k_cache`, `v_cache`, `table`,
/// `step_in` and the scalars `s` (`rows`, `heads`, `kv_heads`, `head_dim`, `max_len`,
/// `slots`) of the kernel that includes it.
pub(super) const WGSL_STORE: &str = "fn rope_store(r: u32, h: u32, i: u32, a: f32, b: f32) {
    let hd = s.head_dim / 2u;
    let pos = min(step_in[s.rows + r], s.max_len - 1u);
    let slot = step_in[3u * s.rows + r];
    let cached = step_in[2u * s.rows + r] != 0u && slot < s.slots;
    if (h >= s.heads + s.kv_heads) {
        if (cached) {
            let at = ((slot * s.kv_heads + h - s.heads - s.kv_heads) * s.max_len + pos)
                * s.head_dim;
            v_cache[at + i] = a;
            v_cache[at + i + hd] = b;
        }
        return;
    }
    let c = table[pos * hd + i];
    let sn = table[s.max_len * hd + pos * hd + i];
    let lo = a * c - b * sn;
    let hi = b * c + a * sn;
    if (h < s.heads) {
        let at = (r * s.heads + h) * s.head_dim;
        q[at + i] = lo;
        q[at + i + hd] = hi;
    } else if (cached) {
        let at = ((slot * s.kv_heads + h - s.heads) * s.max_len + pos) * s.head_dim;
        k_cache[at + i] = lo;
        k_cache[at + i + hd] = hi;
    }
}";

/// A cache's extent in `decode_rope_kv`: `slots × kv_heads × max_len × head_dim`, so a forged
/// size cannot send a store past the buffer (the kernel skips rows whose slot or position is
/// outside `slots` or `max_len`).
const CACHE_EXTENT: Extent = Extent::AtLeastProductOf(&[11, 8, 10, 9]);

/// The projection's output in `decode_rope_kv`: each row's queries, keys and values side by
/// side, `rows × (heads + 2 × kv_heads) × head_dim`.
const QKV_EXTENT: Extent = Extent::AtLeastSumOfProducts(&[&[6, 7, 9], &[6, 8, 9], &[6, 8, 9]]);

pub(super) fn kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_rope_kv")
        .buffer_with_extent::<T>("q", Access::Write, Extent::AtLeastProductOf(&[6, 7, 9]))
        .buffer_with_extent::<T>("k_cache", Access::Write, CACHE_EXTENT)
        .buffer_with_extent::<T>("v_cache", Access::Write, CACHE_EXTENT)
        .buffer_with_extent::<T>("qkv", Access::Read, QKV_EXTENT)
        .buffer_with_extent::<f32>("table", Access::Read, Extent::AtLeastProductOf(&[10, 9]))
        .buffer_with_extent::<u32>(
            "meta",
            Access::Read,
            Extent::AtLeastScalar {
                param: 6,
                factor: 4,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("heads")
        .scalar::<u32>("kv_heads")
        .scalar::<u32>("head_dim")
        .scalar::<u32>("max_len")
        .scalar::<u32>("slots");
    with_sources::<T>(
        k,
        // One thread per pair of a head: query heads, then key heads, then value heads.
        &format!(
            "{CUDA_STORE}
extern \"C\" __global__ void decode_rope_kv(elem_t* q, elem_t* k_cache, elem_t* v_cache,
        const elem_t* qkv, const float* table, const unsigned* meta, unsigned rows,
        unsigned heads, unsigned kv_heads, unsigned head_dim, unsigned max_len, unsigned slots) {{
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    unsigned hd = head_dim / 2u;
    unsigned units = (heads + 2u * kv_heads) * hd;
    idx_t gi = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= (idx_t)rows * units) return;
    unsigned i = (unsigned)gi, r = i / units, u = i % units;
    unsigned h = u / hd, p = u % hd;
    const elem_t* x = qkv + (idx_t)r * (heads + 2u * kv_heads) * head_dim + (idx_t)h * head_dim;
    RopeStore to = {{q, k_cache, v_cache, table, meta, rows, heads, kv_heads, head_dim, max_len,
        slots}};
    to.store(r, h, p, x[p], x[p + hd]);
}}"
        ),
        format!(
            "struct Scalars {{ rows: u32, heads: u32, kv_heads: u32, head_dim: u32, max_len: u32, slots: u32 }}
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read> qkv: array<f32>;
@group(0) @binding(4) var<storage, read> table: array<f32>;
@group(0) @binding(5) var<storage, read> step_in: array<u32>;
@group(0) @binding(6) var<uniform> s: Scalars;
{WGSL_STORE}
@compute @workgroup_size(256)
fn decode_rope_kv(@builtin(global_invocation_id) id: vec3<u32>) {{
    let hd = s.head_dim / 2u;
    let units = (s.heads + 2u * s.kv_heads) * hd;
    let i = id.x;
    if (i >= s.rows * units) {{ return; }}
    let r = i / units;
    let h = (i % units) / hd;
    let p = (i % units) % hd;
    let x = r * (s.heads + 2u * s.kv_heads) * s.head_dim + h * s.head_dim;
    rope_store(r, h, p, qkv[x + p], qkv[x + p + hd]);
}}"
        ),
    )
    .host(|args, _| {
        let [
            q,
            k_cache,
            v_cache,
            qkv,
            table,
            meta,
            rows,
            heads,
            kv_heads,
            head_dim,
            max_len,
            slots,
        ] = args
        else {
            unreachable!("twelve parameters")
        };
        rope_kv::<T>(
            q.slice_mut::<T>(),
            k_cache.slice_mut::<T>(),
            v_cache.slice_mut::<T>(),
            qkv.slice::<T>(),
            table.slice::<f32>(),
            meta.slice::<u32>(),
            RopeShape::from_args([rows, heads, kv_heads, head_dim, max_len, slots]),
        );
    })
}
