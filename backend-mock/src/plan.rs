//! `ReplayPlan`: an instantiated graph — the ops in a topological order with their memory
//! resolved, plus the list of blocks the sanitizer checks before each launch.

use std::{collections::HashSet, sync::Arc};

use accel_graph_api::{GraphError, Result};

use crate::{memory::MockBlock, op::Op, raw_graph::RawGraph};

/// A block the plan touches, with the first node touching it (for the error message).
struct Watched {
    block: Arc<MockBlock>,
    node: usize,
}

/// The executable form of a graph. Replay walks a flat `Vec<Op>`: no lookup, no lock, no
/// allocation per node.
pub(crate) struct ReplayPlan {
    /// Position `i` holds raw node `i`.
    ops: Vec<Op>,
    watched: Vec<Watched>,
}

impl ReplayPlan {
    /// Compiles `raw`. Capture order is a topological order (a node only depends on earlier
    /// nodes), so the plan runs the nodes in id order; a wider device would run independent
    /// branches concurrently, which gives the same result because branches of a valid graph do
    /// not race.
    pub(crate) fn compile(raw: &RawGraph) -> ReplayPlan {
        let mut seen = HashSet::new();
        let mut watched = Vec::new();
        for (node, op) in raw.ops.iter().enumerate() {
            for region in op.regions() {
                if seen.insert(region.address()) {
                    watched.push(Watched {
                        block: Arc::clone(&region.block),
                        node,
                    });
                }
            }
        }
        ReplayPlan {
            ops: raw.ops.clone(),
            watched,
        }
    }

    /// Number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// The sanitizer: fails if a block the graph touches went back to the device since
    /// capture. One check per distinct block, not per node or element.
    pub(crate) fn check_memory(&self) -> Result<()> {
        match self.watched.iter().find(|w| w.block.is_released()) {
            None => Ok(()),
            Some(w) => Err(GraphError::DanglingBuffer {
                address: w.block.address(),
                node: w.node,
                label: self.ops.get(w.node).map(Op::label).unwrap_or_default(),
            }),
        }
    }

    /// Runs every node, in order.
    pub(crate) fn run(&self) {
        for op in &self.ops {
            op.execute();
        }
    }
}
