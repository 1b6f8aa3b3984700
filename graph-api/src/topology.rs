//! Backend-agnostic view of a captured graph: node kinds and dependency edges.

use std::fmt::{self, Write as _};

/// What a graph node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    /// A kernel launch (portable ops, user kernels, library calls).
    Kernel,
    /// A memory copy.
    Memcpy,
    /// A memory set (fill).
    Memset,
    /// A host callback.
    Host,
    /// An event record.
    EventRecord,
    /// An event wait.
    EventWait,
    /// An empty (dependency-only) node.
    Empty,
    /// A stream-ordered allocation.
    MemAlloc,
    /// A stream-ordered free.
    MemFree,
    /// A child graph: another graph embedded as one node (a graph replayed while the stream
    /// captured).
    Graph,
    /// A conditional node (`if_then`, `if_else`, `while_loop`): bodies the device runs or
    /// skips by a condition in device memory.
    Conditional,
    /// Anything else.
    Other,
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One node of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphNode {
    /// Index of the node in [`GraphTopology::nodes`].
    pub id: usize,
    /// What it does.
    pub kind: NodeKind,
    /// A human-readable label (kernel name, copy size...).
    pub label: String,
}

/// Nodes and dependency edges of a captured graph, as `nodes()` returns them.
///
/// ```
/// use accel_graph_api::{GraphTopology, NodeKind};
/// let mut t = GraphTopology::default();
/// let a = t.add_node(NodeKind::Kernel, "add_scalar");
/// let b = t.add_node(NodeKind::Memcpy, "copy");
/// t.add_edge(a, b);
/// assert_eq!(t.count(NodeKind::Kernel), 1);
/// assert!(t.is_chain());
/// assert!(t.to_dot("g").contains("add_scalar"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphTopology {
    /// The nodes, indexed by their `id`.
    pub nodes: Vec<GraphNode>,
    /// Dependency edges `(from, to)`: `to` runs after `from`.
    pub edges: Vec<(usize, usize)>,
}

impl GraphTopology {
    /// Appends a node and returns its id.
    pub fn add_node(&mut self, kind: NodeKind, label: impl Into<String>) -> usize {
        let id = self.nodes.len();
        self.nodes.push(GraphNode {
            id,
            kind,
            label: label.into(),
        });
        id
    }

    /// Adds a dependency edge.
    pub fn add_edge(&mut self, from: usize, to: usize) {
        self.edges.push((from, to));
    }

    /// Number of nodes of `kind`.
    pub fn count(&self, kind: NodeKind) -> usize {
        self.nodes.iter().filter(|n| n.kind == kind).count()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// True when the nodes form one chain: a single root, every node at most one predecessor
    /// and one successor, all nodes reached.
    pub fn is_chain(&self) -> bool {
        let n = self.nodes.len();
        if n == 0 {
            return true;
        }
        if self.edges.len() != n - 1 {
            return false;
        }
        let mut indeg = vec![0usize; n];
        let mut next = vec![None; n];
        for &(a, b) in &self.edges {
            if a >= n || b >= n || next[a].is_some() {
                return false;
            }
            next[a] = Some(b);
            indeg[b] += 1;
        }
        let Some(mut cur) = (0..n).find(|&i| indeg[i] == 0) else {
            return false;
        };
        if indeg.iter().any(|&d| d > 1) {
            return false;
        }
        let mut seen = 1;
        while let Some(nx) = next[cur] {
            cur = nx;
            seen += 1;
        }
        seen == n
    }

    /// True when every edge joins two existing nodes.
    pub fn is_valid(&self) -> bool {
        let n = self.nodes.len();
        self.edges.iter().all(|&(a, b)| a < n && b < n)
    }

    /// Kinds of the nodes in a topological order (ties broken by the smaller id); `None` if
    /// an edge names a node that does not exist or the edges form a cycle. Kahn's algorithm:
    /// linear in nodes and edges (plus a log factor for the tie-breaking heap).
    ///
    /// ```
    /// use accel_graph_api::{GraphTopology, NodeKind};
    /// let mut t = GraphTopology::default();
    /// let a = t.add_node(NodeKind::Memcpy, "copy");
    /// let b = t.add_node(NodeKind::Kernel, "k");
    /// t.add_edge(b, a);
    /// assert_eq!(t.topological_kinds(), Some(vec![NodeKind::Kernel, NodeKind::Memcpy]));
    /// t.add_edge(a, 7); // no node 7
    /// assert_eq!(t.topological_kinds(), None);
    /// ```
    pub fn topological_kinds(&self) -> Option<Vec<NodeKind>> {
        if !self.is_valid() {
            return None;
        }
        let n = self.nodes.len();
        let mut indeg = vec![0usize; n];
        let mut successors: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(a, b) in &self.edges {
            indeg[b] += 1;
            successors[a].push(b);
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
            .filter(|&i| indeg[i] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut out = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            out.push(self.nodes[i].kind);
            for &b in &successors[i] {
                indeg[b] -= 1;
                if indeg[b] == 0 {
                    ready.push(std::cmp::Reverse(b));
                }
            }
        }
        (out.len() == n).then_some(out)
    }

    /// Renders the graph as Graphviz DOT, one box per node naming its kind and label.
    /// Deterministic: the same topology gives the same bytes.
    pub fn to_dot(&self, name: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "digraph \"{}\" {{", escape(name));
        let _ = writeln!(s, "  node [shape=box, fontname=\"monospace\"];");
        for n in &self.nodes {
            let _ = writeln!(
                s,
                "  n{} [label=\"{} {}\\n{}\"];",
                n.id,
                n.id,
                n.kind,
                escape(&n.label)
            );
        }
        for &(a, b) in &self.edges {
            let _ = writeln!(s, "  n{a} -> n{b};");
        }
        s.push_str("}\n");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
