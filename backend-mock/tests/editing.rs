//! Graph editing on the mock: what the counters and the simulated memory show that the
//! backend-generic conformance cases (§16) cannot — that an update instantiates nothing, that a
//! node update patches the executable in place, that memory follows the bindings exactly.

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError, GraphOptions, GraphState, NodeKind,
    PortableOps, UpdateConflict, kernel::KernelArg,
};
use accel_graph_mock::{MockBackend, WHILE_ITERATION_LIMIT};

type R = Result<(), GraphError>;

#[test]
fn update_from_keeps_the_executable() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let (x, y) = (b.alloc_from(&[1.0f32; 8])?, b.alloc_from(&[2.0f32; 8])?);
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.scale(&x, 2.0)?;
        b.add_scalar(&x, 1.0)
    })?;
    let mut h = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut h, || {
        b.scale(&y, 3.0)?;
        b.add_scalar(&y, -1.0)
    })?;
    b.reset_counters();
    g.update_from(&h)?;
    let c = b.counters();
    assert_eq!((c.instantiations, c.graph_updates), (0, 1));
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![1.0; 8]);
    assert_eq!(b.download(&y)?, vec![5.0; 8]);
    // The source graph is untouched and never instantiated by the update.
    assert_eq!(h.state(), GraphState::Captured);
    Ok(())
}

#[test]
fn node_update_patches_in_place_and_memory_follows() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let y = b.alloc_from(&[0.0f32; 4])?;
    let x1 = b.alloc_from(&[1.0f32; 4])?;
    let x2 = b.alloc_from(&[10.0f32; 4])?;
    let mut g = b.graph(GraphOptions::new())?;
    let node = b.capture_on(&s, &mut g, || {
        b.axpy(&y, 1.0, &x1)?;
        b.captured_node()
    })?;
    let before = b.memory_stats().allocated_bytes;
    b.reset_counters();
    g.update_node(
        node,
        &[(2, KernelArg::buffer(&x2)), (1, KernelArg::scalar(0.5f32))],
    )?;
    let c = b.counters();
    assert_eq!((c.instantiations, c.node_updates), (0, 1));
    // x1 is not used by the graph any more: dropping it frees its memory now.
    drop(x1);
    assert!(b.memory_stats().allocated_bytes < before);
    // x2 is: dropping it keeps its block for the graph.
    let x2_address = x2.device_address();
    drop(x2);
    assert!(
        b.memory_snapshot()
            .iter()
            .any(|block| block.address == x2_address && block.graph_holds == 1)
    );
    g.replay()?;
    assert_eq!(b.download(&y)?, vec![5.0; 4]);
    drop(g);
    Ok(())
}

#[test]
fn a_block_used_twice_stays_until_its_last_use_is_rebound() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let (a, c) = (b.alloc_from(&[1.0f32; 4])?, b.alloc_from(&[3.0f32; 4])?);
    let (y1, y2) = (b.alloc_from(&[0.0f32; 4])?, b.alloc_from(&[0.0f32; 4])?);
    let mut g = b.graph(GraphOptions::new())?;
    let (n1, n2) = b.capture_on(&s, &mut g, || {
        b.copy(&y1, &a)?;
        let n1 = b.captured_node()?;
        b.axpy(&y2, 1.0, &a)?;
        Ok((n1, b.captured_node()?))
    })?;
    let address = a.device_address();
    drop(a);
    let live = |b: &MockBackend| {
        b.memory_snapshot()
            .iter()
            .any(|block| block.address == address)
    };
    g.update_node(n1, &[(1, KernelArg::buffer(&c))])?;
    assert!(live(&b), "the second node still reads the block");
    g.update_node(n2, &[(2, KernelArg::buffer(&c))])?;
    assert!(!live(&b), "no node reads the block any more");
    g.replay()?;
    assert_eq!(
        (b.download(&y1)?, b.download(&y2)?),
        (vec![3.0; 4], vec![3.0; 4])
    );
    Ok(())
}

#[test]
fn child_graphs_are_one_node_and_inline_at_replay() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let x = b.alloc_from(&[0.0f32; 2])?;
    let mut child = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut child, || {
        b.add_scalar(&x, 1.0)?;
        b.scale(&x, 2.0)
    })?;
    let mut parent = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut parent, || {
        child.replay()?;
        b.add_scalar(&x, 5.0)?;
        child.replay()
    })?;
    let topology = parent.nodes()?;
    assert_eq!(topology.count(NodeKind::Graph), 2);
    assert!(topology.is_chain());
    drop(child);
    parent.replay()?;
    // ((0 + 1) * 2 + 5 + 1) * 2
    assert_eq!(b.download(&x)?, vec![16.0; 2]);
    assert_eq!(parent.executable()?.len(), 5);
    Ok(())
}

#[test]
fn conditionals_decide_at_replay() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let (x, flag, left) = (
        b.alloc_from(&[0.0f32])?,
        b.alloc_from(&[1u32])?,
        b.alloc_from(&[0.0f32])?,
    );
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        b.if_then(&flag, || b.add_scalar(&x, 100.0))?;
        b.fill(&left, 3.0)?;
        b.while_loop(&left, || {
            b.add_scalar(&x, 1.0)?;
            b.add_scalar(&left, -1.0)?;
            b.if_else(&flag, || b.scale(&x, 2.0), || b.scale(&x, 0.5))
        })
    })?;
    assert_eq!(g.nodes()?.count(NodeKind::Conditional), 2);
    b.reset_counters();
    g.replay()?;
    // 100, then three times (x + 1) * 2.
    assert_eq!(
        b.download(&x)?,
        vec![((100.0f32 + 1.0) * 2.0 + 1.0) * 2.0 * 2.0 + 2.0]
    );
    assert_eq!(b.counters().conditional_bodies_run, 1 + 3 + 3);
    b.upload(&flag, &[0])?;
    b.upload(&x, &[0.0])?;
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![((0.5f32 + 1.0) * 0.5 + 1.0) * 0.5]);
    Ok(())
}

/// Run eagerly (no capture), a loop whose condition never becomes false stops after the same
/// documented number of iterations as a replayed one.
#[test]
fn a_runaway_eager_while_loop_is_reported() -> R {
    let b = MockBackend::new();
    let forever = b.alloc_from(&[1u32])?;
    let mut runs = 0u64;
    let err = b
        .while_loop(&forever, || {
            runs += 1;
            Ok(())
        })
        .expect_err("the loop never ends");
    assert!(
        matches!(err, GraphError::WhileLoopLimit { iterations, .. } if iterations == WHILE_ITERATION_LIMIT),
        "{err}"
    );
    assert_eq!(runs, WHILE_ITERATION_LIMIT);
    Ok(())
}

#[test]
fn a_runaway_while_loop_is_reported() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let (x, forever) = (b.alloc_from(&[0.0f32])?, b.alloc_from(&[1u32])?);
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.while_loop(&forever, || b.add_scalar(&x, 1.0))
    })?;
    let err = g.replay().expect_err("the loop never ends");
    assert!(
        matches!(err, GraphError::WhileLoopLimit { iterations, .. } if iterations == WHILE_ITERATION_LIMIT),
        "{err}"
    );
    assert_eq!(b.download(&x)?, vec![WHILE_ITERATION_LIMIT as f32]);
    Ok(())
}

#[test]
fn conditional_bodies_are_checked_for_races() -> R {
    let b = MockBackend::new(); // the race sanitizer is on by default
    let (s, side) = (b.new_stream()?, b.new_stream()?);
    let (x, flag) = (b.alloc_from(&[0.0f32; 4])?, b.alloc_from(&[1u32])?);
    let mut g = b.graph(GraphOptions::new())?;
    let result = b.capture_on(&s, &mut g, || {
        b.if_then(&flag, || {
            // A fork inside the body that is never ordered against the body's own write.
            let forked = b.new_event()?;
            b.record_event(&forked)?;
            {
                let _on = b.use_stream(&side)?;
                b.wait_event(&forked)?;
                b.add_scalar(&x, 1.0)?;
            }
            b.add_scalar(&x, 2.0)
        })
    });
    assert!(
        result.is_err(),
        "an unjoined or racing body fails the capture"
    );
    assert!(!b.is_capturing(&s)? && !b.is_capturing(&side)?);
    Ok(())
}

#[test]
fn misuse_is_typed() -> R {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let (x, y) = (b.alloc_from(&[0.0f32; 4])?, b.alloc_from(&[0.0f32; 3])?);
    let mut g = b.graph(GraphOptions::new())?;
    let node = b.capture_on(&s, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        b.captured_node()
    })?;
    let refused = |r: Result<(), GraphError>, conflict: UpdateConflict| match r {
        Err(GraphError::UpdateRefused { conflict: c, .. }) if c == conflict => {}
        other => panic!("expected {conflict:?}, got {other:?}"),
    };
    refused(
        g.update_node(node, &[(0, KernelArg::buffer(&y))]),
        UpdateConflict::LaunchShape,
    );
    refused(
        g.update_node(node, &[(1, KernelArg::scalar(1u32))]),
        UpdateConflict::Argument,
    );
    refused(
        g.update_node(node, &[(2, KernelArg::scalar(1.0f32))]),
        UpdateConflict::Argument,
    );
    let ints = b.alloc_from(&[0u32; 4])?;
    refused(
        g.update_node(node, &[(0, KernelArg::buffer(&ints))]),
        UpdateConflict::ElementType,
    );
    let mut other = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut other, || b.add_scalar(&x, 1.0))?;
    refused(
        other.update_node(node, &[(1, KernelArg::scalar(2.0f32))]),
        UpdateConflict::UnknownNode,
    );
    g.reset();
    b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))?;
    refused(
        g.update_node(node, &[(1, KernelArg::scalar(2.0f32))]),
        UpdateConflict::UnknownNode,
    );
    assert!(matches!(
        b.captured_node(),
        Err(GraphError::NodeUnavailable { .. })
    ));
    let foreign = MockBackend::new().alloc_from(&[0.0f32; 4])?;
    let node = {
        let mut h = b.graph(GraphOptions::new())?;
        let n = b.capture_on(&s, &mut h, || {
            b.add_scalar(&x, 1.0)?;
            b.captured_node()
        })?;
        assert!(matches!(
            h.update_node(n, &[(0, KernelArg::buffer(&foreign))]),
            Err(GraphError::ForeignObject { .. })
        ));
        n
    };
    let _ = node;
    Ok(())
}

#[test]
fn a_rebinding_that_makes_branches_race_is_refused() -> R {
    let b = MockBackend::new();
    let (s, side) = (b.new_stream()?, b.new_stream()?);
    let (x, y) = (b.alloc_from(&[0.0f32; 4])?, b.alloc_from(&[0.0f32; 4])?);
    let mut g = b.graph(GraphOptions::new())?;
    // Two unordered branches, one writing x, the other y.
    let on_side = b.capture_on(&s, &mut g, || {
        let (fork, join) = (b.new_event()?, b.new_event()?);
        b.record_event(&fork)?;
        b.add_scalar(&x, 1.0)?;
        let node = {
            let _on = b.use_stream(&side)?;
            b.wait_event(&fork)?;
            b.add_scalar(&y, 1.0)?;
            let node = b.captured_node()?;
            b.record_event(&join)?;
            node
        };
        b.wait_event(&join)?;
        Ok(node)
    })?;
    let refused = g.update_node(on_side, &[(0, KernelArg::buffer(&x))]);
    assert!(
        matches!(refused, Err(GraphError::DataRace { .. })),
        "{refused:?}"
    );
    g.replay()?;
    assert_eq!(
        (b.download(&x)?, b.download(&y)?),
        (vec![1.0; 4], vec![1.0; 4])
    );
    Ok(())
}
