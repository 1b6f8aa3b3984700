//! `decode_argmax`: greedy sampling on the device, each row's next token the index of its
//! largest logit — one block of [`THREADS`] per row, one `u32` out per row.

use accel_graph::{
    FloatElement,
    kernel::{Access, Extent, Kernel},
};

use super::{scalar, with_sources};
use crate::DecodeElement;

/// Threads of a row's block.
pub const THREADS: u32 = 256;

/// The reference for one row: the first index of the largest value, NaNs skipped (0 when
/// every value is NaN). Every reduction order gives this index, so the device's is the same.
pub fn argmax_row<T: FloatElement>(row: &[T]) -> u32 {
    let mut best: Option<(f32, usize)> = None;
    for (i, v) in row.iter().enumerate() {
        let v = v.to_f32();
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(b, _)| v > b) {
            best = Some((v, i));
        }
    }
    best.map_or(0, |(_, i)| i as u32)
}

/// The reference for `rows` rows of `vocab` logits.
pub fn argmax<T: FloatElement>(next: &mut [u32], logits: &[T], rows: usize, vocab: usize) {
    for (r, n) in next.iter_mut().enumerate().take(rows) {
        *n = argmax_row(&logits[r * vocab..][..vocab]);
    }
}

pub(super) fn kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_argmax")
        .buffer_with_extent::<u32>(
            "next",
            Access::Write,
            Extent::AtLeastScalar {
                param: 2,
                factor: 1,
            },
        )
        .buffer_with_extent::<T>(
            "logits",
            Access::Read,
            Extent::AtLeastProduct {
                first: 2,
                second: 3,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("vocab")
        .block([THREADS, 1, 1]);
    with_sources::<T>(
        k,
        // A thread keeps the first index of its largest value (NONE: none yet); the tree keeps
        // the larger value, and the smaller index of equal ones.
        r#"#define NONE 0xffffffffu
extern "C" __global__ void decode_argmax(unsigned* next, const elem_t* logits, unsigned rows,
        unsigned vocab) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    __shared__ float s_v[256];
    __shared__ unsigned s_i[256];
    unsigned r = blockIdx.x, j = threadIdx.x;
    if (r >= rows) return;
    const elem_t* row = logits + (idx_t)r * vocab;
    float best = 0.0f;
    unsigned idx = NONE;
    // Eight independent loads in flight per thread, then compared in index order.
    for (unsigned base = j; base < vocab; base += 8u * 256u) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            unsigned i = base + 256u * k;
            v[k] = i < vocab ? ld(row[i]) : __int_as_float(0x7fc00000);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (v[k] == v[k] && (idx == NONE || v[k] > best)) { best = v[k]; idx = base + 256u * k; }
        }
    }
    s_v[j] = best;
    s_i[j] = idx;
    __syncthreads();
    for (unsigned stride = 128u; stride > 0u; stride >>= 1) {
        if (j < stride) {
            float ov = s_v[j + stride];
            unsigned oi = s_i[j + stride];
            if (oi != NONE && (s_i[j] == NONE || ov > s_v[j] || (ov == s_v[j] && oi < s_i[j]))) {
                s_v[j] = ov;
                s_i[j] = oi;
            }
        }
        __syncthreads();
    }
    if (j == 0u) next[r] = s_i[0] == NONE ? 0u : s_i[0];
}"#,
        r#"struct Scalars { rows: u32, vocab: u32 }
@group(0) @binding(0) var<storage, read_write> next: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
var<workgroup> s_v: array<f32, 256>;
var<workgroup> s_i: array<u32, 256>;
const NONE: u32 = 0xffffffffu;
@compute @workgroup_size(256)
fn decode_argmax(@builtin(workgroup_id) wg: vec3<u32>,
                 @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = wg.x;
    // A grid past the rows writes nothing (the CUDA kernel's test too).
    if (r >= s.rows) { return; }
    let j = lid.x;
    let base = r * s.vocab;
    var best = 0.0;
    var idx = NONE;
    for (var i = j; i < s.vocab; i = i + 256u) {
        let v = logits[base + i];
        if (v == v && (idx == NONE || v > best)) { best = v; idx = i; }
    }
    s_v[j] = best;
    s_i[j] = idx;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if (j < stride) {
            let ov = s_v[j + stride];
            let oi = s_i[j + stride];
            if (oi != NONE && (s_i[j] == NONE || ov > s_v[j] || (ov == s_v[j] && oi < s_i[j]))) {
                s_v[j] = ov;
                s_i[j] = oi;
            }
        }
        workgroupBarrier();
    }
    if (j == 0u) {
        var dst = s_i[0];
        if (dst == NONE) { dst = 0u; }
        next[r] = dst;
    }
}"#,
    )
    .host(|args, _| {
        let [next, logits, rows, vocab] = args else {
            unreachable!("four parameters")
        };
        argmax::<T>(
            next.slice_mut::<u32>(),
            logits.slice::<T>(),
            scalar(rows),
            scalar(vocab),
        );
    })
}
