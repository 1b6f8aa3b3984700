//! `decode_embed`: each row's token embedding, `x[r, :] = embed[token[r], :]`, with the token
//! ids read from the per-step buffer on the device.

use accel_graph::kernel::{Access, Extent, Kernel};

use super::{scalar, with_sources};
use crate::{
    DecodeElement,
    model::inputs::{TOKENS, field},
};

/// The reference: `x[r·hidden..][..hidden] = embed[t·hidden..][..hidden]` for each of the
/// `rows` rows, `t` the row's token id (a token id past the vocabulary reads the last row,
/// so the kernel never reads past the table; the engine refuses such tokens before a step).
pub fn embed<T: Copy>(
    x: &mut [T],
    table: &[T],
    meta: &[u32],
    rows: usize,
    hidden: usize,
    vocab: usize,
) {
    for r in 0..rows {
        let token = (field(meta, rows, TOKENS, r) as usize).min(vocab.saturating_sub(1));
        x[r * hidden..][..hidden].copy_from_slice(&table[token * hidden..][..hidden]);
    }
}

pub(super) fn kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_embed")
        .buffer_with_extent::<T>(
            "x",
            Access::Write,
            Extent::AtLeastProduct {
                first: 3,
                second: 4,
            },
        )
        .buffer_with_extent::<T>(
            "table",
            Access::Read,
            Extent::AtLeastProduct {
                first: 4,
                second: 5,
            },
        )
        .buffer_with_extent::<u32>(
            "meta",
            Access::Read,
            Extent::AtLeastScalar {
                param: 3,
                factor: 4,
            },
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("hidden")
        .scalar::<u32>("vocab");
    with_sources::<T>(
        k,
        r#"extern "C" __global__ void decode_embed(elem_t* x, const elem_t* table,
        const unsigned* meta, unsigned rows, unsigned hidden, unsigned vocab) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    idx_t gi = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= (idx_t)rows * hidden) return;
    unsigned i = (unsigned)gi, r = i / hidden, c = i % hidden;
    unsigned token = meta[r];
    if (token >= vocab) token = vocab - 1u;
    x[i] = table[(idx_t)token * hidden + c];
}"#,
        r#"struct Scalars { rows: u32, hidden: u32, vocab: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> step_in: array<u32>;
@group(0) @binding(3) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn decode_embed(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= s.rows * s.hidden) { return; }
    let r = i / s.hidden;
    let c = i % s.hidden;
    let token = min(step_in[r], s.vocab - 1u);
    x[i] = table[token * s.hidden + c];
}"#,
    )
    .host(|args, _| {
        let [x, table, meta, rows, hidden, vocab] = args else {
            unreachable!("six parameters")
        };
        embed::<T>(
            x.slice_mut::<T>(),
            table.slice::<T>(),
            meta.slice::<u32>(),
            scalar(rows),
            scalar(hidden),
            scalar(vocab),
        );
    })
}
