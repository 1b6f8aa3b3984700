//! §5.3 and §5.4: what `keep_graph` changes in a graph's life.

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState, NodeKind};

use crate::{
    Case,
    case::requirements,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_err, expect_state,
        leak_checked, new_graph, replay_on,
    },
};

pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    vec![
        Case::new(
            "5.03 keep_graph=false: ready at capture_end, instantiate and raw graph refused",
            "5.03 keep_graph=false",
            requirements::none,
            no_keep_graph::<B>,
        ),
        Case::new(
            "5.03b keep_graph=false with debug mode keeps the raw graph, still no instantiate",
            "5.03 keep_graph=false",
            requirements::none,
            no_keep_graph_debug_mode::<B>,
        ),
        Case::new(
            "5.04 keep_graph=true: captured at capture_end, first replay instantiates",
            "5.04 keep_graph=true",
            requirements::none,
            keep_graph_lazy_instantiate::<B>,
        ),
        Case::new(
            "5.04b keep_graph=true: explicit instantiate, repeatable",
            "5.04 keep_graph=true",
            requirements::none,
            keep_graph_explicit_instantiate::<B>,
        ),
    ]
}

fn no_keep_graph<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
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
    })
}

fn no_keep_graph_debug_mode<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
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
    })
}

fn keep_graph_lazy_instantiate<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
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
    })
}

fn keep_graph_explicit_instantiate<B: Backend>(b: &B) -> CaseResult {
    leak_checked(b, || {
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
    })
}
