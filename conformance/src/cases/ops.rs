//! 5.02d: each portable op, one by one, against its definition ([`PortableOp::element`]).
//!
//! The table [`OPS`] lists every op of the portable set; a new op is one row here (plus its
//! variant in `graph-api/src/ops.rs` and its kernel in each backend's `ops.rs`).

use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, PortableOp, View};

use crate::{
    CaseResult,
    check::{Ctx, ensure, on_stream, read},
};

/// Every portable op, with the scalar it is checked with. Operands are filled in by the case.
const OPS: &[PortableOp<()>] = &[
    PortableOp::Fill { x: (), value: 2.5 },
    PortableOp::Copy { dst: (), src: () },
    PortableOp::AddScalar { x: (), c: 0.1 },
    PortableOp::Scale { x: (), a: -1.7 },
    PortableOp::Axpy {
        y: (),
        a: 0.3,
        x: (),
    },
    PortableOp::Mul { y: (), x: () },
];

/// The row of [`OPS`] that checks `op`. Exhaustive, so a new op does not compile until it
/// has its row.
fn row_of<T>(op: &PortableOp<T>) -> usize {
    match op {
        PortableOp::Fill { .. } => 0,
        PortableOp::Copy { .. } => 1,
        PortableOp::AddScalar { .. } => 2,
        PortableOp::Scale { .. } => 3,
        PortableOp::Axpy { .. } => 4,
        PortableOp::Mul { .. } => 5,
    }
}

/// Elements per operand: more than one workgroup or thread block, not a multiple of either.
const LEN: usize = 1000;

/// Normal (never subnormal) values of both signs whose products and sums round, so that a
/// fused multiply-add or a different rounding shows.
fn values(seed: u32) -> Vec<f32> {
    (0..LEN as u32)
        .map(|i| {
            let k = i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
            let magnitude = 0.5 + (k % 10_000) as f32 / 2_999.0;
            if k % 3 == 0 { -magnitude } else { magnitude }
        })
        .collect()
}

/// The op of row `template` over `out` and `input` (the same buffer when aliased).
fn bind<'a, T>(template: &PortableOp<()>, out: &'a T, input: &'a T) -> PortableOp<&'a T> {
    let mut operands = [out, input].into_iter();
    template.map(|()| operands.next().unwrap_or(out))
}

/// What `op` must leave in its written operand, computed on the host.
fn reference(template: &PortableOp<()>, out: &[f32], input: &[f32]) -> Vec<f32> {
    out.iter()
        .zip(input)
        .map(|(&o, &i)| template.element(o, i))
        .collect()
}

/// 5.02d: each portable op, run eagerly and replayed from a capture, with distinct operands
/// and with its operands aliased (`axpy(x, a, x)`), leaves exactly — bit for bit — what
/// [`PortableOp::element`] defines.
pub(crate) fn each_op_matches_its_definition<B: Backend>(t: &crate::Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    let (out0, in0) = (values(1), values(2));
    for (row, template) in OPS.iter().enumerate() {
        let name = template.name();
        ensure!(
            row_of(template) == row,
            "{name} is out of place in the table"
        );
        let reads_input = template.operands().1.is_some();
        for aliased in [false, true] {
            if aliased && !reads_input {
                continue;
            }
            let input0 = if aliased { &out0 } else { &in0 };
            let once = reference(template, &out0, input0);
            let twice = reference(template, &once, if aliased { &once } else { &in0 });
            let how = if aliased {
                "aliased"
            } else {
                "distinct operands"
            };

            // Eager.
            let out = b.alloc_from(&out0).ctx("alloc_from")?;
            let input = b.alloc_from(&in0).ctx("alloc_from")?;
            let input_ref = if aliased { &out } else { &input };
            b.launch(bind(template, &out, input_ref).map(View::from))
                .ctx(&format!("eager {name} ({how})"))?;
            let got = read(b, &out)?;
            ensure!(
                bits(&got) == bits(&once),
                "eager {name} ({how}): {}",
                first_difference(&got, &once)
            );

            // Captured, then replayed twice: each replay applies the op once more.
            b.upload(&out, &out0).ctx("upload")?;
            let mut g = b.graph(GraphOptions::new()).ctx("graph")?;
            b.capture_on(&stream, &mut g, || {
                b.launch(bind(template, &out, input_ref).map(View::from))
            })
            .ctx(&format!("capture of {name} ({how})"))?;
            let untouched = read(b, &out)?;
            ensure!(
                bits(&untouched) == bits(&out0),
                "{name} ({how}) ran during its capture"
            );
            for (replay, want) in [(1, &once), (2, &twice)] {
                {
                    let _current = on_stream(b, &stream)?;
                    g.replay()
                        .ctx(&format!("replay {replay} of {name} ({how})"))?;
                }
                let got = read(b, &out)?;
                ensure!(
                    bits(&got) == bits(want),
                    "{name} ({how}) after replay {replay}: {}",
                    first_difference(&got, want)
                );
            }
            let read_back = read(b, &input)?;
            ensure!(
                aliased || bits(&read_back) == bits(&in0),
                "{name} wrote its read operand"
            );
        }
    }
    println!(
        "5.02d: {} ops, eager and replayed, distinct and aliased operands",
        OPS.len()
    );
    Ok(())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn first_difference(got: &[f32], want: &[f32]) -> String {
    match got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
    {
        Some(i) => format!("element {i} is {}, expected {}", got[i], want[i]),
        None => format!("lengths {} and {}", got.len(), want.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_normal_and_of_both_signs() {
        let v = values(7);
        assert!(v.iter().all(|x| x.is_normal()));
        assert!(v.iter().any(|x| *x < 0.0) && v.iter().any(|x| *x > 0.0));
    }
}
