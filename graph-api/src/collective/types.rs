//! The value types of collectives: reduction operators, element types, the collectives
//! themselves and their signatures (what every rank must agree on).

use std::fmt;

use crate::Element;

/// How [`all_reduce`](super::Communicator::all_reduce) and
/// [`reduce_scatter`](super::Communicator::reduce_scatter) combine the ranks' elements.
///
/// ```
/// use accel_graph_api::collective::ReduceOp;
/// assert_eq!(ReduceOp::Sum.name(), "sum");
/// assert_eq!(ReduceOp::ALL.len(), 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `a + b` (wrapping for integers).
    Sum,
    /// `a * b` (wrapping for integers).
    Prod,
    /// The larger (floats: IEEE `maxNum`, as [`f32::max`]).
    Max,
    /// The smaller (floats: IEEE `minNum`, as [`f32::min`]).
    Min,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// The operator's name (`"sum"`, `"prod"`, `"max"`, `"min"`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        ReduceOp::ALL.into_iter().find(|op| op.code() == code)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The element types collectives move and reduce: NCCL's data types.
///
/// ```
/// use accel_graph_api::collective::{CommDType, CommElement};
/// assert_eq!(half::bf16::DTYPE, CommDType::Bf16);
/// assert_eq!(CommDType::Bf16.size(), 2);
/// assert_eq!(CommDType::F32.to_string(), "f32");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommDType {
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// [`half::f16`].
    F16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// [`half::bf16`].
    Bf16,
}

impl CommDType {
    /// Every element type.
    pub const ALL: [CommDType; 10] = [
        CommDType::I8,
        CommDType::U8,
        CommDType::I32,
        CommDType::U32,
        CommDType::I64,
        CommDType::U64,
        CommDType::F16,
        CommDType::F32,
        CommDType::F64,
        CommDType::Bf16,
    ];

    /// The type's name, as Rust spells it (`bf16` and `f16` for the `half` types).
    pub fn name(self) -> &'static str {
        match self {
            CommDType::I8 => "i8",
            CommDType::U8 => "u8",
            CommDType::I32 => "i32",
            CommDType::U32 => "u32",
            CommDType::I64 => "i64",
            CommDType::U64 => "u64",
            CommDType::F16 => "f16",
            CommDType::F32 => "f32",
            CommDType::F64 => "f64",
            CommDType::Bf16 => "bf16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            CommDType::I8 | CommDType::U8 => 1,
            CommDType::F16 | CommDType::Bf16 => 2,
            CommDType::I32 | CommDType::U32 | CommDType::F32 => 4,
            CommDType::I64 | CommDType::U64 | CommDType::F64 => 8,
        }
    }

    fn code(self) -> u8 {
        // The position in `ALL`: stable, and what signatures are exchanged with.
        CommDType::ALL
            .iter()
            .position(|d| *d == self)
            .map_or(u8::MAX, |i| i as u8)
    }

    fn from_code(code: u8) -> Option<Self> {
        CommDType::ALL.get(usize::from(code)).copied()
    }
}

impl fmt::Display for CommDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An element type a communicator moves and reduces: `i8`, `u8`, `i32`, `u32`, `i64`, `u64`,
/// [`half::f16`], `f32`, `f64` and [`half::bf16`].
///
/// [`CommElement::reduce`] is the arithmetic of one reduction step as the reference (and the
/// mock) computes it: wrapping for integers, IEEE for `f32` and `f64`, and for the 16-bit
/// floats the `f32` result rounded to the type (what a GPU's `__hadd` of two `bf16` values
/// gives).
///
/// ```
/// use accel_graph_api::collective::{CommElement, ReduceOp};
/// use half::bf16;
/// assert_eq!(<i32 as CommElement>::reduce(ReduceOp::Sum, i32::MAX, 1), i32::MIN);
/// assert_eq!(<f32 as CommElement>::reduce(ReduceOp::Max, 1.0, f32::NAN), 1.0);
/// let sum = <bf16 as CommElement>::reduce(ReduceOp::Sum, bf16::from_f32(256.0), bf16::from_f32(1.0));
/// assert_eq!(sum.to_f32(), 256.0); // 257 rounds to 256 in bf16
/// ```
pub trait CommElement: Element + sealed::Sealed {
    /// The element type's tag.
    const DTYPE: CommDType;
    /// One reduction step: `op` applied to `a` (the partial result so far) and `b`.
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! comm_int {
    ($($t:ty => $tag:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl CommElement for $t {
            const DTYPE: CommDType = CommDType::$tag;
            fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
comm_int!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

macro_rules! comm_float {
    ($($t:ty => $tag:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl CommElement for $t {
            const DTYPE: CommDType = CommDType::$tag;
            fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
comm_float!(f32 => F32, f64 => F64);

macro_rules! comm_half {
    ($($t:ty => $tag:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl CommElement for $t {
            const DTYPE: CommDType = CommDType::$tag;
            fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
                <$t>::from_f32(<f32 as CommElement>::reduce(op, a.to_f32(), b.to_f32()))
            }
        }
    )*};
}
comm_half!(half::f16 => F16, half::bf16 => Bf16);

/// One collective, with its operator or root.
///
/// ```
/// use accel_graph_api::collective::{Collective, ReduceOp};
/// assert_eq!(Collective::AllReduce(ReduceOp::Sum).to_string(), "all_reduce(sum)");
/// assert_eq!(Collective::Broadcast { root: 1 }.to_string(), "broadcast(root 1)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank gets the reduction of every rank's buffer.
    AllReduce(ReduceOp),
    /// Every rank gets every rank's buffer, concatenated in rank order.
    AllGather,
    /// Rank `r` gets part `r` of the reduction of every rank's buffer.
    ReduceScatter(ReduceOp),
    /// Every rank gets rank `root`'s buffer.
    Broadcast {
        /// The rank whose buffer is sent.
        root: usize,
    },
}

impl Collective {
    /// The collective's name (`"all_reduce"`, `"all_gather"`, `"reduce_scatter"`,
    /// `"broadcast"`).
    pub fn name(&self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter(_) => "reduce_scatter",
            Collective::Broadcast { .. } => "broadcast",
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Collective::AllReduce(op) | Collective::ReduceScatter(op) => {
                write!(f, "{}({op})", self.name())
            }
            Collective::AllGather => f.write_str(self.name()),
            Collective::Broadcast { root } => write!(f, "broadcast(root {root})"),
        }
    }
}

/// What every rank must agree on for one collective: which one, the element type, and
/// `count`, the elements each rank contributes or receives as its share — the buffer's
/// length for `all_reduce` and `broadcast`, the send buffer's for `all_gather`, the receive
/// buffer's for `reduce_scatter`.
///
/// Captures exchange their sequences of signatures before they end: ranks that recorded
/// different sequences get [`GraphError::CollectiveMismatch`](crate::GraphError).
///
/// ```
/// use accel_graph_api::collective::{Collective, CollectiveSignature, CommDType};
/// let sig = CollectiveSignature { collective: Collective::AllGather, dtype: CommDType::F32, count: 4 };
/// assert_eq!((sig.send_len(3), sig.recv_len(3)), (4, 12));
/// assert_eq!(sig.to_string(), "all_gather of 4 x f32");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CollectiveSignature {
    /// The collective.
    pub collective: Collective,
    /// The element type.
    pub dtype: CommDType,
    /// Elements per rank (see the type's documentation).
    pub count: usize,
}

/// Bytes of one encoded signature: kind, operator, element type, root (u32), count (u64).
const ENCODED: usize = 3 + 4 + 8;

impl CollectiveSignature {
    /// Elements of each rank's send buffer in a world of `world` ranks.
    pub fn send_len(&self, world: usize) -> usize {
        match self.collective {
            Collective::ReduceScatter(_) => self.count.saturating_mul(world),
            _ => self.count,
        }
    }

    /// Elements of each rank's receive buffer in a world of `world` ranks.
    pub fn recv_len(&self, world: usize) -> usize {
        match self.collective {
            Collective::AllGather => self.count.saturating_mul(world),
            _ => self.count,
        }
    }

    /// Appends the signature's bytes (what ranks exchange).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let (kind, op, root) = match self.collective {
            Collective::AllReduce(op) => (0u8, op.code(), 0u32),
            Collective::AllGather => (1, 0, 0),
            Collective::ReduceScatter(op) => (2, op.code(), 0),
            Collective::Broadcast { root } => (3, 0, u32::try_from(root).unwrap_or(u32::MAX)),
        };
        out.extend_from_slice(&[kind, op, self.dtype.code()]);
        out.extend_from_slice(&root.to_le_bytes());
        out.extend_from_slice(&(self.count as u64).to_le_bytes());
    }

    /// Reads one signature from the front of `bytes`; `None` when they are not one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let (head, rest) = bytes.split_at_checked(ENCODED)?;
        let root = u32::from_le_bytes(head[3..7].try_into().ok()?) as usize;
        let count = usize::try_from(u64::from_le_bytes(head[7..15].try_into().ok()?)).ok()?;
        let collective = match head[0] {
            0 => Collective::AllReduce(ReduceOp::from_code(head[1])?),
            1 => Collective::AllGather,
            2 => Collective::ReduceScatter(ReduceOp::from_code(head[1])?),
            3 => Collective::Broadcast { root },
            _ => return None,
        };
        let dtype = CommDType::from_code(head[2])?;
        Some((
            CollectiveSignature {
                collective,
                dtype,
                count,
            },
            rest,
        ))
    }
}

impl fmt::Display for CollectiveSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} x {}", self.collective, self.count, self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip() {
        let sigs = [
            CollectiveSignature {
                collective: Collective::AllReduce(ReduceOp::Min),
                dtype: CommDType::Bf16,
                count: 1 << 40,
            },
            CollectiveSignature {
                collective: Collective::Broadcast { root: 7 },
                dtype: CommDType::U8,
                count: 0,
            },
            CollectiveSignature {
                collective: Collective::ReduceScatter(ReduceOp::Prod),
                dtype: CommDType::F64,
                count: 3,
            },
        ];
        let mut bytes = Vec::new();
        for s in &sigs {
            s.encode(&mut bytes);
        }
        let mut rest = bytes.as_slice();
        for s in &sigs {
            let (got, tail) = CollectiveSignature::decode(rest).expect("decodes");
            assert_eq!(got, *s);
            rest = tail;
        }
        assert!(rest.is_empty());
        assert!(CollectiveSignature::decode(&[9; ENCODED]).is_none());
        assert!(CollectiveSignature::decode(&[0; 3]).is_none());
    }

    #[test]
    fn dtype_codes_are_positions() {
        for (i, d) in CommDType::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(d.code()), i);
            assert_eq!(CommDType::from_code(d.code()), Some(d));
        }
    }
}
