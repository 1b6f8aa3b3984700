//! What a unit of work declares it touches: each of its arguments reads, writes or both, over
//! a byte range of one memory block. The portable ops declare their two operands; a kernel
//! with arguments of its own declares one access per argument the same way.

use std::{fmt, ops::Range, sync::Arc};

use accel_graph_api::{AccessKind, PortableOp, kernel::Access};

use crate::{
    kernels::{ByteRange, MockArg},
    memory::MockBlock,
    ops::{Cells, MockCommand, op_label},
};

/// One argument's access: `kind` over `bytes` (from the block's start) of `block`.
pub(crate) struct BlockAccess<'a> {
    pub(crate) block: &'a Arc<MockBlock>,
    pub(crate) bytes: Range<usize>,
    pub(crate) kind: AccessKind,
}

impl<'a> BlockAccess<'a> {
    /// The access of an operand of a portable op: its elements.
    fn of(cells: &'a Cells, kind: AccessKind) -> Self {
        let size = std::mem::size_of::<f32>();
        let start = cells.offset.saturating_mul(size);
        BlockAccess {
            block: &cells.block,
            bytes: start..start.saturating_add(cells.len.saturating_mul(size)),
            kind,
        }
    }

    /// The access of a kernel argument or GEMM operand: its bytes.
    fn of_range(range: &'a ByteRange, kind: AccessKind) -> Self {
        BlockAccess {
            block: &range.block,
            bytes: range.offset..range.offset.saturating_add(range.len),
            kind,
        }
    }
}

/// The kind of access a kernel's parameter declares.
fn kind_of(access: Access) -> AccessKind {
    match access {
        Access::Read => AccessKind::Read,
        Access::Write => AccessKind::Write,
        Access::ReadWrite => AccessKind::ReadWrite,
    }
}

/// Accesses merged so that two on the same bytes of one block (a buffer passed twice) are one
/// access of both kinds, not a race of a command with itself.
fn merged<'a>(list: impl IntoIterator<Item = BlockAccess<'a>>) -> Vec<BlockAccess<'a>> {
    let mut out: Vec<BlockAccess<'_>> = Vec::new();
    for a in list {
        match out
            .iter_mut()
            .find(|b| Arc::ptr_eq(b.block, a.block) && b.bytes == a.bytes)
        {
            Some(b) => b.kind = b.kind.combine(a.kind),
            None => out.push(a),
        }
    }
    out
}

/// The accesses of one command: at most two for a portable op (no allocation on the hot
/// path), a list for a kernel or a product.
pub(crate) enum Accesses<'a> {
    Pair(
        std::iter::Chain<
            std::option::IntoIter<BlockAccess<'a>>,
            std::option::IntoIter<BlockAccess<'a>>,
        >,
    ),
    Many(std::vec::IntoIter<BlockAccess<'a>>),
}

impl<'a> Iterator for Accesses<'a> {
    type Item = BlockAccess<'a>;

    fn next(&mut self) -> Option<BlockAccess<'a>> {
        match self {
            Accesses::Pair(pair) => pair.next(),
            Accesses::Many(list) => list.next(),
        }
    }
}

/// The accesses of `command`, at most one per block: an op whose operands are one buffer
/// (`axpy(x, a, x)`) makes one read-write access, not a write racing with its own read.
/// Host functions touch memory the device cannot see, so they declare nothing; event records
/// and waits touch no memory.
pub(crate) fn accesses(command: &MockCommand) -> Accesses<'_> {
    let (out, input) = match command {
        MockCommand::Op(op) => {
            let kind = if op.reads_output() {
                AccessKind::ReadWrite
            } else {
                AccessKind::Write
            };
            let (out, input) = op.as_ref().operands();
            let mut out = BlockAccess::of(out, kind);
            let input = input.map(|i| BlockAccess::of(i, AccessKind::Read));
            match input {
                Some(i) if Arc::ptr_eq(i.block, out.block) && i.bytes == out.bytes => {
                    out.kind = out.kind.combine(AccessKind::Read);
                    (Some(out), None)
                }
                input => (Some(out), input),
            }
        }
        MockCommand::Kernel(k) => {
            let list = k.args.iter().filter_map(|a| match a {
                MockArg::Buffer { range, access, .. } => {
                    Some(BlockAccess::of_range(range, kind_of(*access)))
                }
                MockArg::Scalar(_) => None,
            });
            return Accesses::Many(merged(list).into_iter());
        }
        MockCommand::Gemm(g) => {
            // `beta = 0`: C is only written; otherwise its old value is read too.
            let c = if g.spec.beta == 0.0 {
                AccessKind::Write
            } else {
                AccessKind::ReadWrite
            };
            let list = [
                BlockAccess::of_range(&g.a, AccessKind::Read),
                BlockAccess::of_range(&g.b, AccessKind::Read),
                BlockAccess::of_range(&g.c, c),
            ];
            return Accesses::Many(merged(list).into_iter());
        }
        MockCommand::Host(_) | MockCommand::RecordEvent(_) | MockCommand::WaitEvent(_) => {
            (None, None)
        }
        // A child graph or a conditional node touches what its commands touch (a condition
        // is read): as one unit of work, what any of its nodes or branches might.
        MockCommand::Child(nodes) => {
            let list: Vec<BlockAccess<'_>> =
                nodes.iter().flat_map(|n| accesses(&n.command)).collect();
            return Accesses::Many(merged(list).into_iter());
        }
        MockCommand::Conditional(c) => {
            let list: Vec<BlockAccess<'_>> =
                std::iter::once(BlockAccess::of(&c.cond, AccessKind::Read))
                    .chain(c.bodies.iter().flatten().flat_map(accesses))
                    .collect();
            return Accesses::Many(merged(list).into_iter());
        }
    };
    Accesses::Pair(out.into_iter().chain(input))
}

/// An operand as a report names it: the block's address and the elements touched, printed as
/// node labels print operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    address: u64,
    offset: usize,
    len: usize,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.offset == 0 {
            write!(f, "{:#x}[{}]", self.address, self.len)
        } else {
            write!(
                f,
                "{:#x}[{}..{}]",
                self.address,
                self.offset,
                self.offset + self.len
            )
        }
    }
}

/// Bytes of a block, as a report names a copy's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ByteSpan {
    address: u64,
    bytes: Range<usize>,
}

impl ByteSpan {
    /// Bytes `bytes` of `block`.
    pub(crate) fn of(block: &MockBlock, bytes: Range<usize>) -> Self {
        ByteSpan {
            address: block.address(),
            bytes,
        }
    }
}

impl fmt::Display for ByteSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#x} bytes {}..{}",
            self.address, self.bytes.start, self.bytes.end
        )
    }
}

/// What did an access, kept with it (a few words, no reference to memory) so that a report
/// can name it long after.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// A portable op.
    Op(PortableOp<Span>),
    /// A kernel launch or matrix product, by its node label.
    Labeled(Arc<str>),
    /// A blocking upload into the buffer.
    Upload(ByteSpan),
    /// A blocking download from the buffer.
    Download(ByteSpan),
}

impl Work {
    /// The work of `command`, if it touches memory.
    pub(crate) fn of(command: &MockCommand) -> Option<Work> {
        match command {
            MockCommand::Op(op) => Some(Work::Op(op.as_ref().map(|c| Span {
                address: c.block.address(),
                offset: c.offset,
                len: c.len,
            }))),
            MockCommand::Kernel(_)
            | MockCommand::Gemm(_)
            | MockCommand::Child(_)
            | MockCommand::Conditional(_) => Some(Work::Labeled(Arc::from(command.label()))),
            _ => None,
        }
    }

    /// The label graph nodes and reports give it.
    pub(crate) fn label(&self) -> String {
        match self {
            Work::Op(op) => op_label(op),
            Work::Labeled(label) => label.to_string(),
            Work::Upload(x) => format!("upload x={x}"),
            Work::Download(x) => format!("download x={x}"),
        }
    }
}
