//! The raw graph a capture records: nodes in capture order, each with its dependencies.

use accel_graph_api::GraphTopology;

use crate::op::Op;

/// A captured graph before instantiation.
///
/// Dependencies are stored flat (`deps[dep_start[i]..dep_start[i + 1]]` for node `i`) so that
/// recording a node allocates nothing but amortised vector growth. A node can only depend on
/// nodes that existed when it was recorded, so capture order is a topological order.
#[derive(Default)]
pub(crate) struct RawGraph {
    pub(crate) ops: Vec<Op>,
    dep_start: Vec<usize>,
    deps: Vec<usize>,
}

impl RawGraph {
    /// Appends a node after `deps` (earlier nodes); returns its id.
    pub(crate) fn push(&mut self, op: Op, deps: &[usize]) -> usize {
        debug_assert!(deps.iter().all(|&d| d < self.ops.len()));
        self.dep_start.push(self.deps.len());
        self.deps.extend_from_slice(deps);
        self.ops.push(op);
        self.ops.len() - 1
    }

    /// Number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// The nodes node `id` runs after.
    pub(crate) fn deps_of(&self, id: usize) -> &[usize] {
        let start = self.dep_start[id];
        let end = self
            .dep_start
            .get(id + 1)
            .copied()
            .unwrap_or(self.deps.len());
        &self.deps[start..end]
    }

    /// Node kinds, labels and edges (edges sorted by target, then source: deterministic).
    pub(crate) fn topology(&self) -> GraphTopology {
        let mut t = GraphTopology::default();
        for op in &self.ops {
            t.add_node(op.kind(), op.label());
        }
        for id in 0..self.len() {
            let mut deps = self.deps_of(id).to_vec();
            deps.sort_unstable();
            for d in deps {
                t.add_edge(d, id);
            }
        }
        t
    }

    /// True when some node cannot reach the origin stream's final nodes (`origin_tail`): work
    /// forked onto another stream that was never joined back. Equivalently: some leaf (a node
    /// nothing depends on) is not in `origin_tail`.
    pub(crate) fn has_unjoined_work(&self, origin_tail: &[usize]) -> bool {
        let mut joined = vec![false; self.len()];
        for &d in self.deps.iter().chain(origin_tail) {
            joined[d] = true;
        }
        joined.iter().any(|&j| !j)
    }
}
