//! What a replay touches, worked out once per executable: a replay is one unit of work on its
//! stream (races between its nodes were checked when the graph was captured), so it is
//! checked as the accesses of its nodes merged per block and byte range — at most one check
//! per range, however many nodes touch it.

use std::{ops::Range, sync::Arc};

use accel_graph_api::AccessKind;

use super::{
    access::{Work, accesses},
    hash::WordMap,
};
use crate::{event::MockEventState, memory::MockBlock, ops::MockCommand};

/// One merged access of a replay, named after a node that does it (the first that writes, if
/// any does).
pub(crate) struct ReplayAccess {
    pub(crate) block: Arc<MockBlock>,
    pub(crate) bytes: Range<usize>,
    pub(crate) kind: AccessKind,
    pub(crate) node: usize,
    pub(crate) work: Work,
}

/// Everything a replay touches and the external events it records and waits on.
#[derive(Default)]
pub(crate) struct ReplayAccesses {
    pub(crate) accesses: Vec<ReplayAccess>,
    /// External events the graph records: each replay marks them at its end.
    pub(crate) records: Vec<Arc<MockEventState>>,
    /// External events the graph waits on: the replay runs after what they mark.
    pub(crate) waits: Vec<Arc<MockEventState>>,
}

impl ReplayAccesses {
    /// The accesses of a graph of `commands`.
    pub(crate) fn of(commands: &[MockCommand]) -> Self {
        let mut summary = ReplayAccesses::default();
        let mut index: WordMap<(u64, usize, usize), usize> = WordMap::default();
        for (node, command) in commands.iter().enumerate() {
            match command {
                MockCommand::RecordEvent(event) => summary.records.push(Arc::clone(event)),
                MockCommand::WaitEvent(event) => summary.waits.push(Arc::clone(event)),
                MockCommand::Op(_)
                | MockCommand::Host(_)
                | MockCommand::Kernel(_)
                | MockCommand::Gemm(_)
                | MockCommand::Child(_)
                | MockCommand::Conditional(_) => {}
            }
            let Some(work) = Work::of(command) else {
                continue;
            };
            for a in accesses(command) {
                let key = (a.block.address(), a.bytes.start, a.bytes.end);
                match index.get(&key) {
                    Some(&i) => {
                        let merged = &mut summary.accesses[i];
                        if a.kind.writes() && !merged.kind.writes() {
                            (merged.node, merged.work) = (node, work.clone());
                        }
                        merged.kind = merged.kind.combine(a.kind);
                    }
                    None => {
                        index.insert(key, summary.accesses.len());
                        summary.accesses.push(ReplayAccess {
                            block: Arc::clone(a.block),
                            bytes: a.bytes,
                            kind: a.kind,
                            node,
                            work: work.clone(),
                        });
                    }
                }
            }
        }
        summary
    }
}
