//! Reading a raw `hipGraph_t` into the backend-agnostic [`GraphTopology`].

use std::{collections::HashMap, ffi::c_int};

use accel_graph_api::{GraphTopology, NodeKind};
use accel_graph_driver::DriverResult;

use crate::{error::check, ffi, node_kind};

fn label_of(kind: NodeKind) -> String {
    match kind {
        // HIP 5.2 has no query for a kernel node's function name.
        NodeKind::Kernel => "kernel".to_owned(),
        NodeKind::Memcpy => "memcpy".to_owned(),
        NodeKind::Memset => "memset".to_owned(),
        NodeKind::Host => "host function".to_owned(),
        NodeKind::Graph => "child graph".to_owned(),
        other => other.to_string().to_lowercase(),
    }
}

/// Nodes (in the runtime's order) and dependency edges of `graph`, node types decoded for a
/// runtime of version `runtime_version`.
pub(crate) fn read_topology(
    graph: ffi::hipGraph_t,
    runtime_version: i32,
) -> DriverResult<GraphTopology> {
    let mut count = 0usize;
    // SAFETY: counting query on a live graph.
    let err = unsafe { ffi::hipGraphGetNodes(graph, std::ptr::null_mut(), &mut count) };
    check(err, "hipGraphGetNodes")?;
    let mut topo = GraphTopology::default();
    if count == 0 {
        // Some runtimes refuse a node array for an empty graph (CUDA: invalid value).
        return Ok(topo);
    }
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` has room for `count` handles.
    let err = unsafe { ffi::hipGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) };
    check(err, "hipGraphGetNodes")?;
    nodes.truncate(count);
    let mut index = HashMap::with_capacity(nodes.len());
    for &node in &nodes {
        let mut raw: c_int = -1;
        // SAFETY: `node` belongs to the live graph; `raw` is a local out-parameter.
        let err = unsafe { ffi::hipGraphNodeGetTypeRaw(node, &mut raw) };
        check(err, "hipGraphNodeGetType")?;
        let kind = node_kind::decode(raw, runtime_version);
        let id = topo.add_node(kind, label_of(kind));
        index.insert(node as usize, id);
    }
    let mut edges = 0usize;
    // SAFETY: counting query on a live graph (edge arrays not requested).
    let err = unsafe {
        ffi::hipGraphGetEdges(
            graph,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut edges,
        )
    };
    check(err, "hipGraphGetEdges")?;
    if edges == 0 {
        // As for nodes: no edge arrays for a graph without edges.
        return Ok(topo);
    }
    let mut from = vec![std::ptr::null_mut(); edges];
    let mut to = vec![std::ptr::null_mut(); edges];
    // SAFETY: both arrays have room for `edges` handles.
    let err =
        unsafe { ffi::hipGraphGetEdges(graph, from.as_mut_ptr(), to.as_mut_ptr(), &mut edges) };
    check(err, "hipGraphGetEdges")?;
    for (f, t) in from.iter().zip(&to).take(edges) {
        if let (Some(&a), Some(&b)) = (index.get(&(*f as usize)), index.get(&(*t as usize))) {
            topo.add_edge(a, b);
        }
    }
    Ok(topo)
}
