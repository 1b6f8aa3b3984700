//! The definition of each collective on host data: what the mock computes, and what tests
//! compare devices with.

use super::{Collective, CollectiveSignature, CommDType, CommElement, ReduceOp};
use crate::{GraphError, Result};

/// What rank `rank` receives from the collective `sig` when rank `r` sends `sends[r]` (the
/// bytes of its send buffer): reductions combine the ranks **in rank order**
/// (`((s0 ∘ s1) ∘ s2) ∘ …`, each step by [`CommElement::reduce`]), gathers concatenate in
/// rank order, a broadcast copies the root's buffer.
///
/// A device may reduce in another order (NCCL's rings and trees do), so its floating-point
/// sums equal these bit for bit where every partial sum is exact (integers well inside the
/// type's mantissa, as the conformance cases use), and agree within rounding otherwise.
///
/// Errors: a send of the wrong length ([`GraphError::LengthMismatch`]), a rank or root
/// outside the world ([`GraphError::ArgumentMismatch`]).
///
/// ```
/// use accel_graph_api::collective::{Collective, CollectiveSignature, CommDType, ReduceOp, collective_reference};
/// let sig = CollectiveSignature { collective: Collective::ReduceScatter(ReduceOp::Sum), dtype: CommDType::I32, count: 1 };
/// let (a, b) = ([1i32, 2], [10i32, 20]);
/// let sends = [bytemuck::cast_slice::<i32, u8>(&a), bytemuck::cast_slice(&b)];
/// let out = collective_reference(&sig, &sends, 1)?;
/// assert_eq!(bytemuck::pod_collect_to_vec::<u8, i32>(&out), vec![22]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn collective_reference(
    sig: &CollectiveSignature,
    sends: &[&[u8]],
    rank: usize,
) -> Result<Vec<u8>> {
    let world = sends.len();
    if rank >= world {
        return Err(GraphError::ArgumentMismatch(format!(
            "collective reference: rank {rank} of a world of {world} ranks"
        )));
    }
    if let Collective::Broadcast { root } = sig.collective
        && root >= world
    {
        return Err(GraphError::ArgumentMismatch(format!(
            "broadcast from root {root} in a world of {world} ranks"
        )));
    }
    let bytes = sig
        .send_len(world)
        .checked_mul(sig.dtype.size())
        .ok_or(GraphError::size_overflow("collective reference"))?;
    if let Some(bad) = sends.iter().find(|s| s.len() != bytes) {
        return Err(GraphError::LengthMismatch {
            op: "collective reference send",
            expected: bytes,
            got: bad.len(),
        });
    }
    Ok(match sig.dtype {
        CommDType::I8 => typed::<i8>(sig, sends, rank),
        CommDType::U8 => typed::<u8>(sig, sends, rank),
        CommDType::I32 => typed::<i32>(sig, sends, rank),
        CommDType::U32 => typed::<u32>(sig, sends, rank),
        CommDType::I64 => typed::<i64>(sig, sends, rank),
        CommDType::U64 => typed::<u64>(sig, sends, rank),
        CommDType::F16 => typed::<half::f16>(sig, sends, rank),
        CommDType::F32 => typed::<f32>(sig, sends, rank),
        CommDType::F64 => typed::<f64>(sig, sends, rank),
        CommDType::Bf16 => typed::<half::bf16>(sig, sends, rank),
    })
}

/// [`collective_reference`] in `T` (lengths checked).
fn typed<T: CommElement>(sig: &CollectiveSignature, sends: &[&[u8]], rank: usize) -> Vec<u8> {
    // Copied out: the sends' bytes need not be aligned for `T`.
    let sends: Vec<Vec<T>> = sends
        .iter()
        .map(|s| bytemuck::pod_collect_to_vec::<u8, T>(s))
        .collect();
    let n = sig.count;
    let out: Vec<T> = match sig.collective {
        Collective::AllReduce(op) => reduce_in_rank_order(op, &sends, 0..n),
        Collective::ReduceScatter(op) => reduce_in_rank_order(op, &sends, rank * n..(rank + 1) * n),
        Collective::AllGather => sends.concat(),
        Collective::Broadcast { root } => sends[root].clone(),
    };
    bytemuck::cast_slice(&out).to_vec()
}

/// Elements `range` of every rank's buffer, reduced by `op` in rank order.
fn reduce_in_rank_order<T: CommElement>(
    op: ReduceOp,
    sends: &[Vec<T>],
    range: std::ops::Range<usize>,
) -> Vec<T> {
    let mut acc = sends[0][range.clone()].to_vec();
    for send in &sends[1..] {
        for (a, b) in acc.iter_mut().zip(&send[range.clone()]) {
            *a = T::reduce(op, *a, *b);
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: bytemuck::Pod>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn each_collective_on_three_ranks() {
        let sends = [
            bytes(&[1.0f32, 2.0]),
            bytes(&[3.0f32, 4.0]),
            bytes(&[5.0f32, 6.0]),
        ];
        let refs: Vec<&[u8]> = sends.iter().map(Vec::as_slice).collect();
        let f32s = |v: Vec<u8>| bytemuck::pod_collect_to_vec::<u8, f32>(&v);
        let sig = |collective, count| CollectiveSignature {
            collective,
            dtype: CommDType::F32,
            count,
        };
        let all_reduce = sig(Collective::AllReduce(ReduceOp::Prod), 2);
        assert_eq!(
            f32s(collective_reference(&all_reduce, &refs, 2).unwrap()),
            [15.0, 48.0]
        );
        let gather = sig(Collective::AllGather, 2);
        assert_eq!(
            f32s(collective_reference(&gather, &refs, 0).unwrap()),
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        let broadcast = sig(Collective::Broadcast { root: 1 }, 2);
        assert_eq!(
            f32s(collective_reference(&broadcast, &refs, 0).unwrap()),
            [3.0, 4.0]
        );
        let scatter = sig(Collective::ReduceScatter(ReduceOp::Max), 1);
        let sends6 = [
            bytes(&[1.0f32, 9.0, 2.0]),
            bytes(&[7.0f32, 0.0, 3.0]),
            bytes(&[4.0f32, 8.0, 1.0]),
        ];
        let refs6: Vec<&[u8]> = sends6.iter().map(Vec::as_slice).collect();
        let scattered: Vec<f32> = (0..3)
            .flat_map(|r| f32s(collective_reference(&scatter, &refs6, r).unwrap()))
            .collect();
        assert_eq!(scattered, [7.0, 9.0, 3.0]);
        assert!(
            collective_reference(&scatter, &refs, 0).is_err(),
            "sends too short"
        );
        assert!(
            collective_reference(&broadcast, &refs, 3).is_err(),
            "rank outside"
        );
        let far_root = sig(Collective::Broadcast { root: 3 }, 2);
        assert!(collective_reference(&far_root, &refs, 0).is_err());
    }

    #[test]
    fn sums_run_in_rank_order_with_rounding_per_step() {
        // 1 + 2^24 + 1 in f32: (1 + 2^24) rounds to 2^24, then + 1 rounds back: rank order
        // gives 2^24, while summing the ones first would give 2^24 + 2.
        let big = 16_777_216.0f32;
        let sends = [bytes(&[1.0f32]), bytes(&[big]), bytes(&[1.0f32])];
        let refs: Vec<&[u8]> = sends.iter().map(Vec::as_slice).collect();
        let sig = CollectiveSignature {
            collective: Collective::AllReduce(ReduceOp::Sum),
            dtype: CommDType::F32,
            count: 1,
        };
        let out =
            bytemuck::pod_collect_to_vec::<u8, f32>(&collective_reference(&sig, &refs, 0).unwrap());
        assert_eq!(out, [big]);
    }
}
