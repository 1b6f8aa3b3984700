//! `decode_swiglu`: the MLP's activation, `act = silu(gate) · up`, from the fused gate/up
//! projection's output (each row: `intermediate` gate values, then as many up values).

use accel_graph::{
    FloatElement,
    kernel::{Access, Extent, Kernel},
};

use super::{scalar, with_sources};
use crate::DecodeElement;

/// The reference: `act[r, i] = T(T(silu(g)) · u)` with `g = gate_up[r, i]`,
/// `u = gate_up[r, inter + i]`, `silu(g) = g / (1 + e^(−g))` in `f32` — rounded after the
/// activation and after the product, as PyTorch's `act_fn(gate) * up` rounds in 16 bits.
pub fn swiglu<T: FloatElement>(act: &mut [T], gate_up: &[T], rows: usize, inter: usize) {
    for r in 0..rows {
        let row = &gate_up[r * 2 * inter..][..2 * inter];
        let (gate, up) = row.split_at(inter);
        for ((a, g), u) in act[r * inter..][..inter].iter_mut().zip(gate).zip(up) {
            *a = swiglu_one(*g, *u);
        }
    }
}

/// One element of [`swiglu`]: `T(T(silu(g)) · u)`.
pub fn swiglu_one<T: FloatElement>(g: T, u: T) -> T {
    let g = g.to_f32();
    let silu = T::from_f32(g / (1.0 + (-g).exp()));
    T::from_f32(silu.to_f32() * u.to_f32())
}

pub(super) fn kernel<T: DecodeElement>() -> Kernel {
    let k = Kernel::new("decode_swiglu")
        .buffer_with_extent::<T>(
            "act",
            Access::Write,
            Extent::AtLeastProduct {
                first: 2,
                second: 3,
            },
        )
        .buffer_with_extent::<T>(
            "gate_up",
            Access::Read,
            // rows × 2 × inter: each row's gate, then its up projection.
            Extent::AtLeastSumOfProducts(&[&[2, 3], &[2, 3]]),
        )
        .scalar::<u32>("rows")
        .scalar::<u32>("inter");
    with_sources::<T>(
        k,
        r#"extern "C" __global__ void decode_swiglu(elem_t* act, const elem_t* gate_up,
        unsigned rows, unsigned inter) {
    accel_graph_grid_wait();
    accel_graph_launch_dependents();
    idx_t gi = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= (idx_t)rows * inter) return;
    unsigned i = (unsigned)gi, r = i / inter, c = i % inter;
    idx_t at = (idx_t)r * 2u * inter + c;
    float g = ld(gate_up[at]);
    float u = ld(gate_up[at + inter]);
    float silu = ld(st(g / (1.0f + expf(-g))));
    act[i] = st(__fmul_rn(silu, u));
}"#,
        r#"struct Scalars { rows: u32, inter: u32 }
@group(0) @binding(0) var<storage, read_write> act: array<f32>;
@group(0) @binding(1) var<storage, read> gate_up: array<f32>;
@group(0) @binding(2) var<uniform> s: Scalars;
@compute @workgroup_size(256)
fn decode_swiglu(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= s.rows * s.inter) { return; }
    let r = i / s.inter;
    let c = i % s.inter;
    let g = gate_up[r * 2u * s.inter + c];
    let u = gate_up[r * 2u * s.inter + s.inter + c];
    act[i] = g / (1.0 + exp(-g)) * u;
}"#,
    )
    .host(|args, _| {
        let [act, gate_up, rows, inter] = args else {
            unreachable!("four parameters")
        };
        swiglu::<T>(
            act.slice_mut::<T>(),
            gate_up.slice::<T>(),
            scalar(rows),
            scalar(inter),
        );
    })
}
