//! `decode_norm_qkv_rope`: RMSNorm, the QKV projection, RoPE and the key/value cache store in
//! one kernel — the small-batch projection of [`super::linear`] whose epilogue is
//! [`super::rope`]'s kernel, so a fused step's layer has no launch of its own for the rotary
//! embedding.
//!
//! A block's pair of output columns is element `i` and element `i + head_dim/2` of one head —
//! the two RoPE rotates together — so each pair is rotated (query and key heads) or stored as
//! it is (value heads) where it is computed. Each projection is rounded to `T` first, as the
//! unfused step stores the QKV projection, and rotated as `decode_rope_kv` rotates it: the host
//! function is [`super::linear::norm_linear`] then [`super::rope::rope_kv`], and on the mock
//! the fused and unfused steps are equal bit for bit.

use accel_graph::kernel::{Access, Extent, Kernel};

use super::{
    linear::{Variant, WGSL_NORM, at_least, entry, norm_linear, product},
    rope::{CUDA_STORE, RopeShape, WGSL_STORE, rope_kv},
    scalar, with_sources,
};
use crate::DecodeElement;

/// CUDA C: the projection's epilogue for [`super::linear`]'s `lin_body` — pair `p` is element
/// `i` and element `i + head_dim/2` of head `h`, each product rounded to `T` (as the unfused
/// step stores the projection) and handed to `decode_rope_kv`'s store.
const EPILOGUE: &str = r#"
struct LinQkvRope {
    const elem_t* w; RopeStore to;
    __device__ unsigned pairs() const { return (to.heads + 2u * to.kv_heads) * (to.head_dim / 2u); }
    __device__ void weights(unsigned p, unsigned k, const elem_t** w0, const elem_t** w1) const {
        const unsigned hd = to.head_dim / 2u, col = p / hd * to.head_dim + p % hd;
        *w0 = w + (idx_t)col * k;
        *w1 = w + (idx_t)(col + hd) * k;
    }
    __device__ void prefetch(unsigned, unsigned) {}
    __device__ void store(unsigned row, unsigned p, float d0, float d1) const {
        const unsigned hd = to.head_dim / 2u;
        to.store(row, p / hd, p % hd, st(d0), st(d1));
    }
};
"#;

/// The grid of `variant`'s kernel for a model of `heads` query and `kv_heads` key/value heads
/// of `head_dim` over rows `k` long: its pairs are the elements RoPE rotates together
/// ([`Variant::grid_for_pairs`]).
pub fn grid(
    variant: Variant,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    k: usize,
) -> [u32; 3] {
    variant.grid_for_pairs((heads + 2 * kv_heads) * (head_dim / 2), k)
}

/// A cache's extent: `slots × kv_heads × max_len × head_dim` (as `decode_rope_kv`'s).
const CACHE_EXTENT: Extent = Extent::AtLeastProductOf(&[15, 12, 14, 13]);

/// `decode_norm_qkv_rope_r{pass}(q, k_cache, v_cache, x, norm, w, table, meta, rows, n, k,
/// heads, kv_heads, head_dim, max_len, slots, eps)`: [`super::linear::pass_rows`] rows of `x`
/// a pass ([`Variant`]). `n` is the projection's width, `(heads + 2·kv_heads)·head_dim` (the kernel computes
/// nothing otherwise, nor for an odd `head_dim`): `w` is checked against `n × k`.
pub(super) fn kernel<T: DecodeElement>(variant: Variant) -> Kernel {
    let (pass, threads) = (variant.pass, variant.threads());
    let name = format!("decode_norm_qkv_rope_r{pass}");
    let k = Kernel::new(name.clone())
        .buffer_with_extent::<T>("q", Access::Write, Extent::AtLeastProductOf(&[8, 11, 13]))
        .buffer_with_extent::<T>("k_cache", Access::Write, CACHE_EXTENT)
        .buffer_with_extent::<T>("v_cache", Access::Write, CACHE_EXTENT)
        .buffer_with_extent::<T>("x", Access::Read, product(8, 10))
        .buffer_with_extent::<T>("norm", Access::Read, at_least(10))
        .buffer_with_extent::<T>("w", Access::Read, product(9, 10))
        .buffer_with_extent::<f32>("table", Access::Read, Extent::AtLeastProductOf(&[14, 13]))
        .buffer_with_extent::<u32>(
            "meta",
            Access::Read,
            Extent::AtLeastScalar {
                param: 8,
                factor: 4,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("n")
        .scalar::<u32>("k")
        .scalar::<u32>("heads")
        .scalar::<u32>("kv_heads")
        .scalar::<u32>("head_dim")
        .scalar::<u32>("max_len")
        .scalar::<u32>("slots")
        .scalar::<f32>("eps")
        .block([threads, 1, 1]);
    let common = variant.common_source();
    with_sources::<T>(
        k,
        &format!(
            "{common}\n{CUDA_STORE}\n{EPILOGUE}\nextern \"C\" __global__ void __launch_bounds__({threads}) {name}(\
             elem_t* q, elem_t* k_cache, elem_t* v_cache, const elem_t* x, const elem_t* norm, \
             const elem_t* w, const float* table, const unsigned* meta, unsigned rows, \
             unsigned n, unsigned k, unsigned heads, unsigned kv_heads, unsigned head_dim, \
             unsigned max_len, unsigned slots, float eps) {{\n    \
             lin_start();\n    \
             if (head_dim % 2u != 0u || max_len == 0u \
             || (idx_t)n != ((idx_t)heads + 2u * (idx_t)kv_heads) * head_dim) return;\n    \
             LinQkvRope e = {{w, {{q, k_cache, v_cache, table, meta, rows, heads, kv_heads, \
             head_dim, max_len, slots}}}};\n    \
             lin_body<{pass}, true>(e, x, norm, rows, k, eps);\n}}"
        ),
        entry(
            &name,
            "decode_norm_qkv_rope",
            format!(
                "struct Scalars {{ rows: u32, n: u32, k: u32, heads: u32, kv_heads: u32, \
                 head_dim: u32, max_len: u32, slots: u32, eps: f32 }}
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read> norm: array<f32>;
@group(0) @binding(5) var<storage, read> w: array<f32>;
@group(0) @binding(6) var<storage, read> table: array<f32>;
@group(0) @binding(7) var<storage, read> step_in: array<u32>;
@group(0) @binding(8) var<uniform> s: Scalars;
{WGSL_NORM}
{WGSL_STORE}
fn dot(r: u32, c: u32, inv: f32) -> f32 {{
    var acc = 0.0;
    for (var i = 0u; i < s.k; i = i + 1u) {{
        acc = acc + norm[i] * (x[r * s.k + i] * inv) * w[c * s.k + i];
    }}
    return acc;
}}
@compute @workgroup_size(128)
fn decode_norm_qkv_rope(@builtin(global_invocation_id) id: vec3<u32>,
                        @builtin(num_workgroups) groups: vec3<u32>) {{
    let hd = s.head_dim / 2u;
    if (s.head_dim % 2u != 0u || s.max_len == 0u
        || s.n != (s.heads + 2u * s.kv_heads) * s.head_dim) {{ return; }}
    let units = (s.heads + 2u * s.kv_heads) * hd;
    for (var o = id.x; o < s.rows * units; o = o + groups.x * 128u) {{
        let r = o / units;
        let h = (o % units) / hd;
        let i = (o % units) % hd;
        let inv = inv_rms(r);
        rope_store(r, h, i, dot(r, h * s.head_dim + i, inv), dot(r, h * s.head_dim + i + hd, inv));
    }}
}}"
            ),
        ),
    )
    .host(|args, _| {
        let [
            q,
            k_cache,
            v_cache,
            x,
            norm,
            w,
            table,
            meta,
            rows,
            n,
            k,
            heads,
            kv_heads,
            head_dim,
            max_len,
            slots,
            eps,
        ] = args
        else {
            unreachable!("seventeen parameters")
        };
        let shape = RopeShape::from_args([rows, heads, kv_heads, head_dim, max_len, slots]);
        let (n, k) = (scalar(n), scalar(k));
        // What the CUDA kernel refuses, the host does not compute either.
        if !shape.head_dim.is_multiple_of(2)
            || shape.max_len == 0
            || n != (shape.heads + 2 * shape.kv_heads) * shape.head_dim
        {
            return;
        }
        let mut qkv = vec![T::from_f32(0.0); shape.rows * n];
        norm_linear::<T>(
            &mut qkv,
            x.slice::<T>(),
            norm.slice::<T>(),
            w.slice::<T>(),
            shape.rows,
            n,
            k,
            eps.scalar::<f32>(),
        );
        rope_kv::<T>(
            q.slice_mut::<T>(),
            k_cache.slice_mut::<T>(),
            v_cache.slice_mut::<T>(),
            &qkv,
            table.slice::<f32>(),
            meta.slice::<u32>(),
            shape,
        );
    })
}
