//! §5.7: fork/join through events pulls a second stream's work into the capture; a fork that
//! is never joined back is an error at `capture_end`.

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState, NodeKind};

use crate::{
    Target,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_capturing, expect_err,
        expect_state, new_graph, on_stream, recaptures_after_reset, replay_on,
    },
};

/// 5.07a: on s1: `x += 1`, fork to s2: `y += 2 x`, join, then on s1: `x *= 10`. From x = 1,
/// y = 0 one replay gives x = 20, y = 4: the order across the streams is part of the graph.
pub(crate) fn fork_join<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[1.0; 16]).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0; 16]).ctx("alloc_from")?;
    let s1 = b.new_stream().ctx("new_stream")?;
    let s2 = b.new_stream().ctx("new_stream")?;
    let fork = b.new_event().ctx("new_event")?;
    let join = b.new_event().ctx("new_event")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    {
        let _current = on_stream(b, &s1)?;
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar on s1")?;
        b.record_event(&fork).ctx("record_event on s1")?;
        {
            let _side = on_stream(b, &s2)?;
            b.wait_event(&fork).ctx("wait_event on s2")?;
            expect_capturing(b, &s2, true, "s2 after waiting on an event of the capture")?;
            b.axpy(&y, 2.0, &x).ctx("axpy on s2")?;
            b.record_event(&join).ctx("record_event on s2")?;
        }
        b.wait_event(&join).ctx("wait_event on s1")?;
        b.scale(&x, 10.0).ctx("scale on s1")?;
        g.capture_end().ctx("capture_end")?;
    }
    expect_capturing(b, &s1, false, "s1 after capture_end")?;
    expect_capturing(b, &s2, false, "s2 after capture_end")?;
    expect_all(b, &x, 1.0, "x after capture")?;
    expect_all(b, &y, 0.0, "y after capture")?;
    let topology = g.nodes().ctx("nodes()")?;
    ensure!(
        topology.count(NodeKind::Kernel) == 3,
        "three kernels were captured across two streams, nodes() has {:?}",
        topology.nodes
    );
    let order = topology.topological_kinds();
    ensure!(
        order.is_some(),
        "the captured graph has a cycle: {:?}",
        topology.edges
    );
    replay_on(b, &s1, &mut g)?;
    expect_all(b, &x, 20.0, "x after one replay")?;
    expect_all(b, &y, 4.0, "y after one replay")?;
    replay_on(b, &s1, &mut g)?;
    expect_all(b, &x, 210.0, "x after two replays")?;
    expect_all(b, &y, 46.0, "y after two replays")?;
    Ok(())
}

/// 5.07b: a fork never joined back fails `capture_end` with `CaptureUnjoined`; no stream is
/// left capturing and both streams work (and capture) again.
pub(crate) fn unjoined_fork<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let s1 = b.new_stream().ctx("new_stream")?;
    let s2 = b.new_stream().ctx("new_stream")?;
    let fork = b.new_event().ctx("new_event")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    {
        let _current = on_stream(b, &s1)?;
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar on s1")?;
        b.record_event(&fork).ctx("record_event on s1")?;
        {
            let _side = on_stream(b, &s2)?;
            b.wait_event(&fork).ctx("wait_event on s2")?;
            b.add_scalar(&y, 1.0).ctx("add_scalar on s2")?;
        }
        expect_err!(
            g.capture_end(),
            GraphError::CaptureUnjoined,
            "capture_end with s2 never joined back"
        );
    }
    expect_state(&g, GraphState::Empty, "after CaptureUnjoined")?;
    expect_capturing(b, &s1, false, "s1 after CaptureUnjoined")?;
    expect_capturing(b, &s2, false, "s2 after CaptureUnjoined")?;
    // Both streams still run eager work.
    for s in [&s1, &s2] {
        let _current = on_stream(b, s)?;
        b.add_scalar(&y, 1.0)
            .ctx("eager add_scalar after CaptureUnjoined")?;
        // The two streams are not ordered with each other: wait before the next one.
        b.synchronize().ctx("synchronize")?;
    }
    expect_all(b, &x, 0.0, "x (captured work never ran)")?;
    expect_all(b, &y, 2.0, "y after two eager adds")?;
    recaptures_after_reset(b, &mut g)?;
    // The side stream can capture on its own again.
    let mut again = new_graph(b, GraphOptions::new())?;
    capture_add_one(b, &s2, &mut again, &x)?;
    replay_on(b, &s2, &mut again)?;
    expect_all(b, &x, 1.0, "replay of a capture on the former side stream")
}
