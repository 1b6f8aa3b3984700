//! What a unit of work declares it touches: each of its arguments reads, writes or both, over
//! a byte range of one memory block. The portable ops declare their two operands; a kernel
//! with arguments of its own declares one access per argument the same way.

use std::{fmt, ops::Range, sync::Arc};

use accel_graph_api::{AccessKind, PortableOp};

use crate::{
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
    /// The access of an operand of a portable op: its first `len` elements.
    fn of(cells: &'a Cells, kind: AccessKind) -> Self {
        BlockAccess {
            block: &cells.block,
            bytes: 0..cells.len.saturating_mul(std::mem::size_of::<f32>()),
            kind,
        }
    }
}

/// The accesses of `command`, at most one per block: an op whose operands are one buffer
/// (`axpy(x, a, x)`) makes one read-write access, not a write racing with its own read.
/// Host functions touch memory the device cannot see, so they declare nothing; event records
/// and waits touch no memory.
pub(crate) fn accesses(command: &MockCommand) -> impl Iterator<Item = BlockAccess<'_>> {
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
        MockCommand::Host(_) | MockCommand::RecordEvent(_) | MockCommand::WaitEvent(_) => {
            (None, None)
        }
    };
    out.into_iter().chain(input)
}

/// An operand as a report names it: the block's address and the elements touched, printed as
/// node labels print operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    address: u64,
    len: usize,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}[{}]", self.address, self.len)
    }
}

impl Span {
    /// The first `bytes` bytes of `block`, in elements.
    pub(crate) fn of_bytes(block: &MockBlock, bytes: usize) -> Self {
        Span {
            address: block.address(),
            len: bytes / std::mem::size_of::<f32>(),
        }
    }
}

/// What did an access, kept with it (a few words, no reference to memory) so that a report
/// can name it long after.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Work {
    /// A portable op.
    Op(PortableOp<Span>),
    /// A blocking upload into the buffer.
    Upload(Span),
    /// A blocking download from the buffer.
    Download(Span),
}

impl Work {
    /// The work of `command`, if it touches memory.
    pub(crate) fn of(command: &MockCommand) -> Option<Work> {
        match command {
            MockCommand::Op(op) => Some(Work::Op(op.as_ref().map(|c| Span {
                address: c.block.address(),
                len: c.len,
            }))),
            _ => None,
        }
    }

    /// The label graph nodes and reports give it.
    pub(crate) fn label(&self) -> String {
        match self {
            Work::Op(op) => op_label(op),
            Work::Upload(x) => format!("upload x={x}"),
            Work::Download(x) => format!("download x={x}"),
        }
    }
}
