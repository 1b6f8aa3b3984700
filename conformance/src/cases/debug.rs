//! §5.9 debug dumps and §5.13 introspection through `nodes()`.

use accel_graph_api::{
    AcceleratorGraph, Backend, GraphError, GraphOptions, GraphTopology, NodeKind,
};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, expect_err, new_graph, replay_on},
};

/// Captures three kernels and a copy.
fn capture_small_program<B: Backend>(
    b: &B,
    stream: &B::Stream,
    g: &mut B::Graph,
    x: &B::Buffer<f32>,
    y: &B::Buffer<f32>,
) -> CaseResult {
    b.capture_on(stream, g, || {
        b.add_scalar(x, 1.0)?;
        b.scale(x, 2.0)?;
        b.axpy(y, 0.5, x)?;
        b.copy(x, y)
    })
    .ctx("capture of 3 kernels and a copy")
}

/// Node statements of a DOT text: lines that declare something with a label and are not
/// edges. Backends word their DOT differently (CUDA's driver writes its own), so only this
/// much is common.
fn labelled_statements(dot: &str) -> usize {
    dot.lines()
        .filter(|l| l.contains("label") && !l.contains("->"))
        .count()
}

/// 5.09a (debug mode) and 5.09b (`keep_graph`): `debug_dump` writes a non-empty DOT digraph
/// with a labelled statement per node, and does not disturb the graph.
pub(crate) fn dump_names_each_node<B: Backend>(t: &Target<B>, keep_graph: bool) -> CaseResult {
    let b = t.backend();
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let path = dir.path().join("graph.dot");
    let x = b.alloc_from(&[1.0; 8]).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(keep_graph))?;
    if !keep_graph {
        g.enable_debug_mode();
    }
    capture_small_program(b, &stream, &mut g, &x, &y)?;
    g.debug_dump(&path).ctx("debug_dump")?;
    let dot = std::fs::read_to_string(&path)
        .map_err(|e| format!("reading the dump {}: {e}", path.display()))?;
    ensure!(!dot.trim().is_empty(), "debug_dump wrote an empty file");
    ensure!(
        dot.contains("digraph"),
        "the dump is not a DOT digraph:\n{dot}"
    );
    let topology = g.nodes().ctx("nodes()")?;
    ensure!(
        topology.len() == 4,
        "3 kernels + 1 copy should give 4 nodes, nodes() has {:?}",
        topology.nodes
    );
    let statements = labelled_statements(&dot);
    ensure!(
        statements >= topology.len(),
        "the DOT file names {statements} nodes, the graph has {}:\n{dot}",
        topology.len()
    );
    // The dump does not disturb the graph.
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 2.0, "x after replay of the dumped graph")?;
    Ok(())
}

/// 5.09c: debug mode enabled after `capture_end` comes too late for that capture
/// (`RawGraphUnavailable`) but stays on for the next one.
pub(crate) fn debug_mode_too_late<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let path = dir.path().join("graph.dot");
    let x = b.alloc_from(&[1.0; 8]).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    capture_small_program(b, &stream, &mut g, &x, &y)?;
    g.enable_debug_mode();
    expect_err!(
        g.debug_dump(&path),
        GraphError::RawGraphUnavailable,
        "debug_dump after the raw graph was dropped at capture_end"
    );
    // Debug mode stays on: the next capture keeps its raw graph.
    g.reset();
    capture_small_program(b, &stream, &mut g, &x, &y)?;
    g.debug_dump(&path)
        .ctx("debug_dump after reset and a new capture")?;
    Ok(())
}

fn check_chain(topology: &GraphTopology, k: usize) -> CaseResult {
    ensure!(
        topology.count(NodeKind::Kernel) == k
            && topology.count(NodeKind::Memcpy) == 1
            && topology.len() == k + 1,
        "{k} kernels + 1 copy: nodes() has {:?}",
        topology.nodes
    );
    ensure!(
        topology.is_chain(),
        "{k} kernels + 1 copy on one stream are not a chain: edges {:?}",
        topology.edges
    );
    let order = topology
        .topological_kinds()
        .ok_or_else(|| format!("cycle in {:?}", topology.edges))?;
    ensure!(
        order.last() == Some(&NodeKind::Memcpy),
        "the copy, captured last, is not last in the chain: {order:?}"
    );
    Ok(())
}

/// 5.13: k kernels and a copy on one stream give k `Kernel` nodes and one `Memcpy` node in a
/// chain ending with the copy, before and after instantiation.
pub(crate) fn kernels_and_copy_chain<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[1.0; 8]).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    for k in [1usize, 2, 5, 9] {
        let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
        b.capture_on(&stream, &mut g, || {
            for i in 0..k {
                match i % 3 {
                    0 => b.add_scalar(&x, 1.0)?,
                    1 => b.scale(&x, 0.5)?,
                    _ => b.axpy(&x, 2.0, &y)?,
                }
            }
            b.copy(&y, &x)
        })
        .ctx("capture of k kernels and a copy")?;
        check_chain(&g.nodes().ctx("nodes()")?, k)?;
        // Instantiating does not change what nodes() reports.
        g.instantiate().ctx("instantiate")?;
        check_chain(&g.nodes().ctx("nodes() after instantiate")?, k)?;
    }
    Ok(())
}
