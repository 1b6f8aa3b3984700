//! §5.3 and §5.4: what `keep_graph` changes in a graph's life.

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState, NodeKind};

use crate::{
    Target,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_err, expect_state, new_graph,
        replay_on,
    },
};

/// 5.03: with `keep_graph=false` the graph is ready at `capture_end`; `instantiate()`, the raw
/// graph and `debug_dump` are refused, and the graph still replays.
pub(crate) fn no_keep_graph<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(false))?;
    ensure!(!g.keep_graph(), "keep_graph() is true for keep_graph=false");
    capture_add_one(b, &stream, &mut g, &x)?;
    expect_state(&g, GraphState::Ready, "right after capture_end")?;
    expect_err!(
        g.instantiate(),
        GraphError::InstantiateRequiresKeepGraph,
        "instantiate() with keep_graph=false"
    );
    expect_err!(
        g.nodes(),
        GraphError::RawGraphUnavailable,
        "nodes() (raw graph) with keep_graph=false"
    );
    expect_err!(
        g.debug_dump(&std::env::temp_dir().join("accel-graph-never-written.dot")),
        GraphError::DebugModeNotEnabled,
        "debug_dump() with keep_graph=false and no debug mode"
    );
    expect_state(&g, GraphState::Ready, "after refused calls")?;
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 1.0, "replay after refused calls")?;
    Ok(())
}

/// 5.03b: debug mode keeps the raw graph of a `keep_graph=false` graph, which still refuses
/// `instantiate()`.
pub(crate) fn no_keep_graph_debug_mode<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    g.enable_debug_mode();
    capture_add_one(b, &stream, &mut g, &x)?;
    expect_state(&g, GraphState::Ready, "right after capture_end")?;
    let topology = g.nodes().ctx("nodes() with debug mode")?;
    ensure!(
        topology.count(NodeKind::Kernel) == 1 && topology.len() == 1,
        "x += 1 should give one Kernel node, got {:?}",
        topology.nodes
    );
    expect_err!(
        g.instantiate(),
        GraphError::InstantiateRequiresKeepGraph,
        "instantiate() with keep_graph=false and debug mode"
    );
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 1.0, "after one replay")?;
    Ok(())
}

/// 5.04: with `keep_graph=true` the graph is captured, not instantiated, at `capture_end`;
/// the first replay instantiates it.
pub(crate) fn keep_graph_lazy_instantiate<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    ensure!(g.keep_graph(), "keep_graph() is false for keep_graph=true");
    capture_add_one(b, &stream, &mut g, &x)?;
    expect_state(
        &g,
        GraphState::Captured,
        "after capture_end (not instantiated yet)",
    )?;
    let topology = g.nodes().ctx("nodes() with keep_graph")?;
    ensure!(
        topology.len() == 1,
        "x += 1 should give one node, got {:?}",
        topology.nodes
    );
    replay_on(b, &stream, &mut g)?;
    expect_state(&g, GraphState::Ready, "after the first replay")?;
    expect_all(b, &x, 1.0, "after the first replay")?;
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 2.0, "after the second replay")?;
    g.nodes()
        .ctx("nodes() after instantiation with keep_graph")?;
    Ok(())
}

/// 5.04b: `instantiate()` of a kept graph launches nothing and may be repeated.
pub(crate) fn keep_graph_explicit_instantiate<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    capture_add_one(b, &stream, &mut g, &x)?;
    g.instantiate().ctx("instantiate()")?;
    expect_state(&g, GraphState::Ready, "after instantiate()")?;
    expect_all(b, &x, 0.0, "after instantiate() (nothing launched yet)")?;
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 1.0, "after one replay")?;
    g.instantiate().ctx("instantiate() a second time")?;
    expect_state(&g, GraphState::Ready, "after the second instantiate()")?;
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 2.0, "after a replay of the re-instantiated graph")?;
    Ok(())
}
