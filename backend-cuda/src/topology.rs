//! Reading a raw `CUgraph` into the backend-agnostic [`GraphTopology`].

use std::{collections::HashMap, ffi::CStr, mem::MaybeUninit, ptr};

use accel_graph_api::{GraphTopology, NodeKind};
use accel_graph_driver::DriverResult;
use cudarc::driver::sys;

use crate::error::check;

fn kind_of(t: sys::CUgraphNodeType) -> NodeKind {
    use sys::CUgraphNodeType as T;
    match t {
        T::CU_GRAPH_NODE_TYPE_KERNEL => NodeKind::Kernel,
        T::CU_GRAPH_NODE_TYPE_MEMCPY => NodeKind::Memcpy,
        T::CU_GRAPH_NODE_TYPE_MEMSET => NodeKind::Memset,
        T::CU_GRAPH_NODE_TYPE_HOST => NodeKind::Host,
        T::CU_GRAPH_NODE_TYPE_EMPTY => NodeKind::Empty,
        T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeKind::EventWait,
        T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeKind::EventRecord,
        T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => NodeKind::MemAlloc,
        T::CU_GRAPH_NODE_TYPE_MEM_FREE => NodeKind::MemFree,
        T::CU_GRAPH_NODE_TYPE_GRAPH => NodeKind::Graph,
        T::CU_GRAPH_NODE_TYPE_CONDITIONAL => NodeKind::Conditional,
        _ => NodeKind::Other,
    }
}

/// The kernel's name (`ag_add_scalar`, a cuBLAS kernel's mangled name...), if the driver
/// can tell.
fn kernel_name(node: sys::CUgraphNode) -> Option<String> {
    let mut params = MaybeUninit::<sys::CUDA_KERNEL_NODE_PARAMS_v2>::zeroed();
    // SAFETY: `node` is a kernel node of a live graph; `params` is a local out-parameter.
    let rc = unsafe { sys::cuGraphKernelNodeGetParams_v2(node, params.as_mut_ptr()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: initialised by the successful call above (and zeroed before).
    let params = unsafe { params.assume_init() };
    let mut name: *const std::ffi::c_char = ptr::null();
    // SAFETY: name queries on handles the driver just returned; the string is owned by
    // the driver and copied at once.
    unsafe {
        let ok = (!params.func.is_null()
            && sys::cuFuncGetName(&mut name, params.func) == sys::CUresult::CUDA_SUCCESS)
            || (!params.kern.is_null()
                && sys::cuKernelGetName(&mut name, params.kern) == sys::CUresult::CUDA_SUCCESS);
        (ok && !name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

fn label_of(node: sys::CUgraphNode, kind: NodeKind) -> String {
    match kind {
        NodeKind::Kernel => kernel_name(node).unwrap_or_else(|| "kernel".to_owned()),
        NodeKind::Memcpy => "memcpy".to_owned(),
        NodeKind::Memset => "memset".to_owned(),
        NodeKind::Host => "host function".to_owned(),
        NodeKind::Graph => "child graph".to_owned(),
        other => other.to_string().to_lowercase(),
    }
}

/// The nodes of `graph` (its top level, in the driver's order), each with its type.
pub(crate) fn graph_nodes(
    graph: sys::CUgraph,
) -> DriverResult<Vec<(sys::CUgraphNode, sys::CUgraphNodeType)>> {
    let mut count = 0usize;
    // SAFETY: counting query on a live graph.
    let rc = unsafe { sys::cuGraphGetNodes(graph, ptr::null_mut(), &mut count) };
    check(rc, "cuGraphGetNodes")?;
    if count == 0 {
        // The driver rejects a node array for an empty graph.
        return Ok(Vec::new());
    }
    let mut nodes = vec![ptr::null_mut(); count];
    // SAFETY: `nodes` has room for `count` handles.
    let rc = unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) };
    check(rc, "cuGraphGetNodes")?;
    nodes.truncate(count);
    nodes
        .into_iter()
        .map(|node| {
            let mut t = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: `node` belongs to the live graph.
            let rc = unsafe { sys::cuGraphNodeGetType(node, &mut t) };
            check(rc, "cuGraphNodeGetType").map(|()| (node, t))
        })
        .collect()
}

/// Nodes (in the driver's order) and dependency edges of `graph`.
pub(crate) fn read_topology(graph: sys::CUgraph) -> DriverResult<GraphTopology> {
    let nodes = graph_nodes(graph)?;
    let mut topo = GraphTopology::default();
    if nodes.is_empty() {
        return Ok(topo);
    }
    let mut index = HashMap::with_capacity(nodes.len());
    for &(node, t) in &nodes {
        let kind = kind_of(t);
        let id = topo.add_node(kind, label_of(node, kind));
        index.insert(node as usize, id);
    }
    let mut edges = 0usize;
    // SAFETY: counting query on a live graph (edge data not requested).
    let rc = unsafe {
        sys::cuGraphGetEdges_v2(
            graph,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut edges,
        )
    };
    check(rc, "cuGraphGetEdges")?;
    if edges == 0 {
        // As for nodes: no edge arrays for a graph without edges.
        return Ok(topo);
    }
    let mut from = vec![ptr::null_mut(); edges];
    let mut to = vec![ptr::null_mut(); edges];
    // SAFETY: both arrays have room for `edges` handles.
    let rc = unsafe {
        sys::cuGraphGetEdges_v2(
            graph,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            ptr::null_mut(),
            &mut edges,
        )
    };
    check(rc, "cuGraphGetEdges")?;
    for (f, t) in from.iter().zip(&to).take(edges) {
        if let (Some(&a), Some(&b)) = (index.get(&(*f as usize)), index.get(&(*t as usize))) {
            topo.add_edge(a, b);
        }
    }
    Ok(topo)
}
