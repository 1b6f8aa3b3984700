//! `GraphTopology` has public fields, so any caller can build one with edges naming nodes that
//! do not exist, or with a million nodes: its methods must neither panic nor take quadratic
//! time.

use std::{sync::mpsc, thread, time::Duration};

use accel_graph_api::{GraphTopology, NodeKind};

/// The kind of node `i` of the test graphs.
fn kind_of(i: usize) -> NodeKind {
    if i.is_multiple_of(2) {
        NodeKind::Kernel
    } else {
        NodeKind::Memcpy
    }
}

/// A chain `0 -> 1 -> ... -> n-1`; with `reversed`, its edges are listed last to first (so the
/// order of the edge list does not help the sort).
fn chain(n: usize, reversed: bool) -> GraphTopology {
    let mut t = GraphTopology::default();
    for i in 0..n {
        t.add_node(kind_of(i), "");
    }
    for i in 1..n {
        t.add_edge(i - 1, i);
    }
    if reversed {
        t.edges.reverse();
    }
    t
}

#[test]
fn an_edge_to_a_missing_node_is_not_a_panic() {
    for edge in [(0, 7), (7, 0), (usize::MAX, 1), (1, usize::MAX)] {
        let mut t = chain(3, false);
        t.edges.push(edge);
        assert_eq!(t.topological_kinds(), None, "edge {edge:?}");
        assert!(!t.is_chain(), "edge {edge:?}");
        assert!(!t.is_valid(), "edge {edge:?}");
        let dot = t.to_dot("broken");
        assert!(dot.contains(&format!("n{} -> n{};", edge.0, edge.1)));
    }
    // A chain whose last edge is replaced by a dangling one: as many edges as a chain needs.
    let mut t = chain(3, false);
    t.edges[1] = (1, 3);
    assert!(!t.is_chain());
    assert_eq!(t.topological_kinds(), None);
    // No node, only an edge.
    let t = GraphTopology {
        nodes: Vec::new(),
        edges: vec![(0, 0)],
    };
    assert_eq!(t.topological_kinds(), None);
    assert!(!t.is_valid());
    assert!(t.to_dot("edges only").contains("n0 -> n0;"));
}

#[test]
fn a_cycle_has_no_topological_order() {
    let mut t = chain(4, false);
    t.add_edge(3, 1);
    assert_eq!(t.topological_kinds(), None);
    assert!(!t.is_chain());
    let mut t = chain(1, false);
    t.add_edge(0, 0);
    assert_eq!(t.topological_kinds(), None);
    assert!(!t.is_chain());
}

#[test]
fn ties_are_broken_by_the_smaller_id() {
    // 3 -> 0, and 1, 2 free: the order is 1, 2, 3, 0.
    let mut t = GraphTopology::default();
    for kind in [
        NodeKind::Memcpy,
        NodeKind::Kernel,
        NodeKind::Host,
        NodeKind::Memset,
    ] {
        t.add_node(kind, "");
    }
    t.add_edge(3, 0);
    assert_eq!(
        t.topological_kinds(),
        Some(vec![
            NodeKind::Kernel,
            NodeKind::Host,
            NodeKind::Memset,
            NodeKind::Memcpy
        ])
    );
}

/// Runs `f` on a thread of its own and waits at most `limit` for it: a way to fail, rather
/// than hang, when the work is quadratic. The limit is two orders of magnitude above what the
/// linear algorithm needs in a debug build, so this is no timing assertion: it only tells
/// "finishes" from "would take hours" (the quadratic sort scanned every edge for every node:
/// 10^12 steps for a million-node chain; it took 58 times as long for 8 times the nodes).
fn finishes_within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, result) = mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(limit)
        .expect("did not finish: the work is not linear in the nodes and edges")
}

#[test]
fn a_million_node_chain_sorts_in_linear_time() {
    const N: usize = 1 << 20;
    for reversed in [false, true] {
        let (kinds, is_chain) = finishes_within(Duration::from_secs(120), move || {
            let t = chain(N, reversed);
            (t.topological_kinds(), t.is_chain())
        });
        assert!(is_chain, "reversed edge list: {reversed}");
        let kinds = kinds.expect("a chain has no cycle");
        assert!(
            kinds.len() == N && kinds.iter().enumerate().all(|(i, &k)| k == kind_of(i)),
            "the chain's order is its node order (reversed edge list: {reversed})"
        );
    }
}

#[test]
fn a_quarter_million_node_fan_sorts_in_linear_time() {
    // One root feeding every other node, each of them feeding one sink: 2(n - 2) edges, and
    // n - 2 nodes ready at once.
    const N: usize = 1 << 18;
    let kinds = finishes_within(Duration::from_secs(120), || {
        let mut t = GraphTopology::default();
        t.add_node(NodeKind::Host, "root");
        for _ in 2..N {
            t.add_node(NodeKind::Kernel, "");
        }
        let sink = t.add_node(NodeKind::Memcpy, "sink");
        for i in 1..sink {
            t.add_edge(0, i);
            t.add_edge(i, sink);
        }
        assert!(!t.is_chain());
        t.topological_kinds()
    });
    let kinds = kinds.expect("a fan has no cycle");
    assert_eq!(kinds.len(), N);
    assert_eq!(kinds[0], NodeKind::Host);
    assert_eq!(kinds[N - 1], NodeKind::Memcpy);
    assert!(kinds[1..N - 1].iter().all(|&k| k == NodeKind::Kernel));
}
