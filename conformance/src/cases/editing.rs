//! §16: graph editing — updates of a whole graph from another capture and of single nodes,
//! child graphs, conditional nodes, instantiate flags. Every case compares against what a
//! fresh capture (or eager execution) of the same work computes, bit for bit.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError, GraphOptions, GraphState,
    InstantiateFlags, NodeKind, PortableOps, UpdateConflict,
    kernel::{Kernel, KernelArg},
};

use crate::{
    Case, Target,
    case::requirements::{
        child_graphs, conditional_if_else, conditional_nodes, graph_update, host_callbacks,
        multi_stream_capture, no_conditional_nodes, none,
    },
    check::{CaseResult, Ctx, ensure, expect_err, expect_panic, new_graph, on_stream, read},
};

const EDITING: &str = "16 graph editing";

/// The cases of §16, in running order.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "16.01 update_from takes another capture's buffers and scalars; replays equal a \
             fresh capture, bit for bit",
            EDITING,
            graph_update,
            update_from_equals_fresh_capture,
        ),
        Case::new(
            "16.01b update_from on a captured, not yet instantiated graph; the source may be a \
             keep_graph=false graph",
            EDITING,
            graph_update,
            update_from_before_instantiation,
        ),
        Case::new(
            "16.02a update_from refuses another node count, kernel function or memset size, \
             typed, and the executable stays as it was",
            EDITING,
            graph_update,
            update_from_refusals,
        ),
        Case::new(
            "16.02b update_from refuses other edges (a fork where a chain was)",
            EDITING,
            |c| graph_update(c).and(multi_stream_capture(c)),
            update_from_refuses_other_edges,
        ),
        Case::new(
            "16.02c update_from refuses another node kind (a child graph where an op was)",
            EDITING,
            |c| graph_update(c).and(child_graphs(c)),
            update_from_refuses_other_kinds,
        ),
        Case::new(
            "16.03 update_from lets kernel nodes change their grid and copies their size (ops \
             over other lengths)",
            EDITING,
            graph_update,
            update_from_changes_kernel_grids,
        ),
        Case::new(
            "16.04 update_node changes a scalar; replays equal a fresh capture",
            EDITING,
            graph_update,
            node_update_scalar,
        ),
        Case::new(
            "16.05 update_node rebinds buffers; the graph holds the new memory and lets the old \
             go when no node uses it",
            EDITING,
            graph_update,
            node_update_rebinds_and_keeps_alive,
        ),
        Case::new(
            "16.06 update_node misuse is typed and changes nothing",
            EDITING,
            |c| graph_update(c).and(child_graphs(c)),
            node_update_misuse,
        ),
        Case::new(
            "16.07 captured_node outside a capture or before any work: NodeUnavailable",
            EDITING,
            none,
            captured_node_unavailable,
        ),
        Case::new(
            "16.08 update_node of a user kernel: buffers and scalars",
            EDITING,
            graph_update,
            node_update_user_kernel,
        ),
        Case::new(
            "16.09 update_from keeps the other graph's memory alive after it is dropped",
            EDITING,
            graph_update,
            update_from_keeps_memory_alive,
        ),
        Case::new(
            "16.10 a graph replayed while the stream captures is one child node; its memory \
             lives with the parent",
            EDITING,
            child_graphs,
            child_graph_node,
        ),
        Case::new(
            "16.11 if_then with conditions written by captured work and uploaded between \
             replays; -0.0 is false",
            EDITING,
            conditional_nodes,
            if_then_decides_at_replay,
        ),
        Case::new(
            "16.12 if_else runs exactly one branch per replay",
            EDITING,
            conditional_if_else,
            if_else_decides_at_replay,
        ),
        Case::new(
            "16.13 while_loop runs its body until the condition is false; equals the unrolled \
             work, bit for bit",
            EDITING,
            conditional_nodes,
            while_loop_equals_unrolled,
        ),
        Case::new(
            "16.14 nested conditionals and child graphs inside bodies; a graph with conditional \
             nodes is no child graph",
            EDITING,
            |c| conditional_if_else(c).and(child_graphs(c)),
            nested_conditionals,
        ),
        Case::new(
            "16.15 conditionals on a stream that does not capture run eagerly, with the \
             replay's results",
            EDITING,
            none,
            eager_conditionals,
        ),
        Case::new(
            "16.16 a body that fails or panics invalidates the capture; nothing stays capturing",
            EDITING,
            conditional_nodes,
            failing_bodies,
        ),
        Case::new(
            "16.16b host callbacks are refused inside conditional bodies",
            EDITING,
            |c| conditional_nodes(c).and(host_callbacks(c)),
            host_callback_in_body,
        ),
        Case::new(
            "16.17 a backend without conditional nodes answers Unsupported naming the \
             capability; the capture goes on",
            EDITING,
            no_conditional_nodes,
            conditionals_unsupported,
        ),
        Case::new(
            "16.18 nodes() shows child graphs and conditional nodes as Graph and Conditional",
            EDITING,
            |c| conditional_nodes(c).and(child_graphs(c)),
            topology_shows_child_and_conditional_nodes,
        ),
        Case::new(
            "16.19 update_from carries child graphs; graphs with conditional nodes are updated \
             node by node only",
            EDITING,
            |c| {
                graph_update(c)
                    .and(conditional_nodes(c))
                    .and(child_graphs(c))
            },
            update_from_with_bodies,
        ),
        Case::new(
            "16.20 instantiate flags: the defaults everywhere; device launch where supported, \
             else Unsupported when the graph is made",
            EDITING,
            none,
            instantiate_flags,
        ),
        Case::new(
            "16.21 bucketed cache with shared executables: one executable per topology, \
             switched by updates; runs equal separate executables, bit for bit",
            EDITING,
            graph_update,
            super::utilities::bucketed::bucketed_cache_shares_executables,
        ),
    ])
}

type Buf<B> = <B as accel_graph_api::PortableOps>::Buffer<f32>;

/// One argument of a node update.
type NodeArg<'a, B> = (usize, KernelArg<'a, <B as PortableOps>::Memory>);

/// Values whose every op below stays exact or rounds the same on every backend.
fn data(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| seed + ((i * 7919) % 23) as f32 * 0.25 - 2.5)
        .collect()
}

/// A small program over `y`, `x`, `z`: four kernel ops with two scalars.
fn program<B: Backend>(
    b: &B,
    (y, x, z): (&Buf<B>, &Buf<B>, &Buf<B>),
    a: f32,
    c: f32,
) -> accel_graph_api::Result<()> {
    b.scale(y, a)?;
    b.axpy(y, c, x)?;
    b.add_scalar(y, 1.5)?;
    b.mul(y, z)
}

/// The three buffers of a set, as [`program`] takes them.
fn refs<B: Backend>(set: &[Buf<B>; 3]) -> (&Buf<B>, &Buf<B>, &Buf<B>) {
    (&set[0], &set[1], &set[2])
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

fn same_bits(what: &str, got: &[f32], want: &[f32]) -> CaseResult {
    ensure!(
        bits(got) == bits(want),
        "{what}: got {:?}, expected {:?}",
        &got[..got.len().min(6)],
        &want[..want.len().min(6)]
    );
    Ok(())
}

/// Three buffers of `n` elements with seeded data.
fn triple<B: Backend>(b: &B, n: usize, seed: f32) -> Result<[Buf<B>; 3], String> {
    Ok([
        b.alloc_from(&data(n, seed)).ctx("alloc y")?,
        b.alloc_from(&data(n, seed + 1.0)).ctx("alloc x")?,
        b.alloc_from(&data(n, seed + 2.0)).ctx("alloc z")?,
    ])
}

/// Uploads the seeded data into `set` again.
fn refill<B: Backend>(b: &B, set: &[Buf<B>; 3], n: usize, seed: f32) -> CaseResult {
    for (i, buf) in set.iter().enumerate() {
        b.upload(buf, &data(n, seed + i as f32)).ctx("upload")?;
    }
    Ok(())
}

fn replay<B: Backend>(b: &B, s: &B::Stream, g: &mut B::Graph, what: &str) -> CaseResult {
    let _on = on_stream(b, s)?;
    g.replay().ctx(what)
}

/// Expects an `UpdateRefused` with `conflict`.
fn refused<T>(result: Result<T, GraphError>, conflict: UpdateConflict, what: &str) -> CaseResult {
    match result {
        Err(GraphError::UpdateRefused { conflict: c, .. }) if c == conflict => Ok(()),
        Err(e) => Err(format!(
            "{what}: expected UpdateRefused({conflict:?}), got {e:?}: {e}"
        )),
        Ok(_) => Err(format!(
            "{what}: expected UpdateRefused({conflict:?}), got Ok"
        )),
    }
}

fn update_from_equals_fresh_capture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let n = 1000;
    let one = triple(b, n, 1.0)?;
    let two = triple(b, n, 5.0)?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || program(b, refs::<B>(&one), 0.5, 3.0))
        .ctx("capture g")?;
    let mut h = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut h, || program(b, refs::<B>(&two), 1.25, -2.0))
        .ctx("capture h")?;
    let mut fresh = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut fresh, || program(b, refs::<B>(&two), 1.25, -2.0))
        .ctx("capture the fresh graph")?;
    b.update_graph(&mut g, &h).ctx("update_from")?;
    ensure!(
        g.state() == GraphState::Ready,
        "g is {} after the update",
        g.state()
    );
    replay(b, &s, &mut g, "replay of the updated graph")?;
    replay(b, &s, &mut g, "second replay of the updated graph")?;
    let updated = read(b, &two[0])?;
    same_bits("g's own buffers", &read(b, &one[0])?, &data(n, 1.0))?;
    refill(b, &two, n, 5.0)?;
    replay(b, &s, &mut fresh, "replay of the fresh capture")?;
    replay(b, &s, &mut fresh, "second replay of the fresh capture")?;
    same_bits("updated against fresh", &updated, &read(b, &two[0])?)?;
    // The source graph is unchanged: it still replays its own work.
    refill(b, &two, n, 5.0)?;
    replay(b, &s, &mut h, "replay of the source graph")?;
    replay(b, &s, &mut h, "second replay of the source graph")?;
    same_bits(
        "source graph after the update",
        &read(b, &two[0])?,
        &updated,
    )
}

fn update_from_before_instantiation<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let n = 300;
    let one = triple(b, n, 3.0)?;
    let two = triple(b, n, -1.0)?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || program(b, refs::<B>(&one), 2.0, 0.25))
        .ctx("capture g")?;
    // A keep_graph=false source: Ready at capture_end, and still a source for updates.
    let mut h = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut h, || program(b, refs::<B>(&two), -0.5, 4.0))
        .ctx("capture h")?;
    b.update_graph(&mut g, &h).ctx("update_from")?;
    ensure!(
        g.state() == GraphState::Captured,
        "g is {} after the update, expected captured",
        g.state()
    );
    g.instantiate().ctx("instantiate after the update")?;
    replay(b, &s, &mut g, "replay")?;
    let updated = read(b, &two[0])?;
    same_bits("g's own buffers", &read(b, &one[0])?, &data(n, 3.0))?;
    refill(b, &two, n, -1.0)?;
    replay(b, &s, &mut h, "replay of h")?;
    same_bits("updated against the source", &updated, &read(b, &two[0])?)
}

/// `x += 1` over 4 elements, the graph every refusal must leave working.
fn add_one_graph<B: Backend>(b: &B, s: &B::Stream, x: &Buf<B>) -> Result<B::Graph, String> {
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(s, &mut g, || b.add_scalar(x, 1.0))
        .ctx("capture x += 1")?;
    Ok(g)
}

fn still_adds_one<B: Backend>(
    b: &B,
    s: &B::Stream,
    g: &mut B::Graph,
    x: &Buf<B>,
    when: &str,
) -> CaseResult {
    let before = read(b, x)?;
    replay(b, s, g, when)?;
    let want: Vec<f32> = before.iter().map(|v| v + 1.0).collect();
    same_bits(
        &format!("{when}: the graph still adds 1"),
        &read(b, x)?,
        &want,
    )
}

fn update_from_refusals<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let mut g = add_one_graph(b, &s, &x)?;
    let capture = |f: &dyn Fn() -> accel_graph_api::Result<()>| -> Result<B::Graph, String> {
        let mut h = new_graph(b, GraphOptions::new())?;
        b.capture_on(&s, &mut h, f).ctx("capture the other graph")?;
        Ok(h)
    };
    let two = capture(&|| {
        b.add_scalar(&x, 1.0)?;
        b.add_scalar(&x, 1.0)
    })?;
    refused(
        b.update_graph(&mut g, &two),
        UpdateConflict::NodeCount,
        "two nodes for one",
    )?;
    still_adds_one(b, &s, &mut g, &x, "after a node-count refusal")?;
    let scale = capture(&|| b.scale(&x, 2.0))?;
    refused(
        b.update_graph(&mut g, &scale),
        UpdateConflict::KernelFunction,
        "scale for add",
    )?;
    still_adds_one(b, &s, &mut g, &x, "after a kernel-function refusal")?;
    // Memsets keep their size.
    let (small, big) = (
        b.alloc_from(&[0.0f32; 4]).ctx("alloc")?,
        b.alloc_from(&[0.0f32; 8]).ctx("alloc")?,
    );
    let mut fill = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut fill, || b.fill(&small, 3.0))
        .ctx("capture fill")?;
    let fill_big = capture(&|| b.fill(&big, 3.0))?;
    refused(
        b.update_graph(&mut fill, &fill_big),
        UpdateConflict::LaunchShape,
        "fill of 8 for 4",
    )?;
    let src = b.alloc_from(&[5.0f32; 8]).ctx("alloc")?;
    let copy_big = capture(&|| b.copy(&big, &src))?;
    refused(
        b.update_graph(&mut fill, &copy_big),
        UpdateConflict::KernelFunction,
        "copy for fill",
    )?;
    b.upload(&small, &[0.0; 4]).ctx("upload")?;
    replay(b, &s, &mut fill, "the fill graph after refusals")?;
    same_bits("fill after refusals", &read(b, &small)?, &[3.0; 4])?;
    same_bits("the other fill's buffer", &read(b, &big)?, &[0.0; 8])?;
    Ok(())
}

fn update_from_refuses_other_edges<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (s, side) = (
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    );
    let (x, y) = (
        b.alloc_from(&[0.0f32; 4]).ctx("alloc")?,
        b.alloc_from(&[0.0f32; 4]).ctx("alloc")?,
    );
    // A chain: x, then (on the side stream, after x) y.
    let mut chain = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut chain, || {
        let (fork, join) = (b.new_event()?, b.new_event()?);
        b.add_scalar(&x, 1.0)?;
        b.record_event(&fork)?;
        {
            let _on = b.use_stream(&side)?;
            b.wait_event(&fork)?;
            b.add_scalar(&y, 1.0)?;
            b.record_event(&join)?;
        }
        b.wait_event(&join)
    })
    .ctx("capture the chain")?;
    // The same two nodes in parallel: the side stream forks before x.
    let mut parallel = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut parallel, || {
        let (fork, join) = (b.new_event()?, b.new_event()?);
        b.record_event(&fork)?;
        b.add_scalar(&x, 1.0)?;
        {
            let _on = b.use_stream(&side)?;
            b.wait_event(&fork)?;
            b.add_scalar(&y, 1.0)?;
            b.record_event(&join)?;
        }
        b.wait_event(&join)
    })
    .ctx("capture the parallel graph")?;
    refused(
        b.update_graph(&mut chain, &parallel),
        UpdateConflict::Edges,
        "a fork for a chain",
    )?;
    replay(b, &s, &mut chain, "the chain after the refusal")?;
    same_bits("x", &read(b, &x)?, &[1.0; 4])?;
    same_bits("y", &read(b, &y)?, &[1.0; 4])
}

fn update_from_refuses_other_kinds<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let mut g = add_one_graph(b, &s, &x)?;
    let mut child = add_one_graph(b, &s, &x)?;
    let mut parent = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut parent, || child.replay())
        .ctx("capture a child graph")?;
    refused(
        b.update_graph(&mut g, &parent),
        UpdateConflict::NodeKind,
        "a child for an op",
    )?;
    still_adds_one(b, &s, &mut g, &x, "after a node-kind refusal")
}

fn update_from_changes_kernel_grids<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let (short, long, z) = (
        b.alloc_from(&data(4, 1.0)).ctx("alloc")?,
        b.alloc_from(&data(700, 2.0)).ctx("alloc")?,
        b.alloc_from(&data(700, 3.0)).ctx("alloc")?,
    );
    let (z4, out4, out) = (
        b.alloc_from(&data(4, 3.0)).ctx("alloc")?,
        b.alloc_from(&[0.0f32; 4]).ctx("alloc")?,
        b.alloc_from(&vec![0.0f32; 700]).ctx("alloc")?,
    );
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.add_scalar(&short, 1.0)?;
        b.mul(&short, &z4)?;
        b.copy(&out4, &short)
    })
    .ctx("capture over 4")?;
    let mut h = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut h, || {
        b.add_scalar(&long, -3.0)?;
        b.mul(&long, &z)?;
        b.copy(&out, &long)
    })
    .ctx("capture over 700")?;
    b.update_graph(&mut g, &h)
        .ctx("update_from to another grid and copy size")?;
    replay(b, &s, &mut g, "replay")?;
    let want: Vec<f32> = data(700, 2.0)
        .iter()
        .zip(data(700, 3.0))
        .map(|(v, z)| (v + -3.0) * z)
        .collect();
    same_bits("the long buffer", &read(b, &long)?, &want)?;
    same_bits("the copy of 700", &read(b, &out)?, &want)?;
    same_bits("the short buffer", &read(b, &short)?, &data(4, 1.0))?;
    same_bits("the copy of 4", &read(b, &out4)?, &[0.0; 4])
}

fn node_update_scalar<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let n = 500;
    let set = triple(b, n, 2.0)?;
    let [y, x, z] = &set;
    for keep in [false, true] {
        let mut g = new_graph(b, GraphOptions::new().keep_graph(keep))?;
        let node = b
            .capture_on(&s, &mut g, || {
                b.scale(y, 2.0)?;
                b.axpy(y, 0.5, x)?;
                let node = b.captured_node()?;
                b.mul(y, z)?;
                Ok(node)
            })
            .ctx("capture")?;
        ensure!(
            node.index() == 1,
            "the axpy is node {}, expected 1",
            node.index()
        );
        b.update_node(&mut g, node, &[(1, KernelArg::scalar(-3.25f32))])
            .ctx("update_node a")?;
        refill(b, &set, n, 2.0)?;
        replay(b, &s, &mut g, "replay of the updated graph")?;
        let updated = read(b, y)?;
        let mut fresh = new_graph(b, GraphOptions::new())?;
        b.capture_on(&s, &mut fresh, || {
            b.scale(y, 2.0)?;
            b.axpy(y, -3.25, x)?;
            b.mul(y, z)
        })
        .ctx("fresh capture")?;
        refill(b, &set, n, 2.0)?;
        replay(b, &s, &mut fresh, "replay of the fresh capture")?;
        same_bits(
            &format!("updated (keep_graph={keep}) against fresh"),
            &updated,
            &read(b, y)?,
        )?;
    }
    Ok(())
}

/// Whether the block at `address` is among the backend's blocks.
fn holds_block<B: Backend>(b: &B, address: u64) -> bool {
    b.memory_snapshot()
        .iter()
        .any(|block| block.address == address)
}

fn node_update_rebinds_and_keeps_alive<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let n = 256;
    let (y, w) = (
        b.alloc_from(&vec![1.0f32; n]).ctx("alloc")?,
        b.alloc_from(&vec![0.0f32; n]).ctx("alloc")?,
    );
    let x = b.alloc_from(&data(n, 1.0)).ctx("alloc x")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let (axpy, copy) = b
        .capture_on(&s, &mut g, || {
            b.axpy(&y, 2.0, &x)?;
            let axpy = b.captured_node()?;
            b.copy(&w, &x)?;
            Ok((axpy, b.captured_node()?))
        })
        .ctx("capture")?;
    let x_address = x.device_address();
    drop(x);
    ensure!(
        holds_block(b, x_address),
        "the graph holds x's block after x is dropped"
    );
    let x2 = b.alloc_from(&data(n, 7.0)).ctx("alloc x2")?;
    let x2_address = x2.device_address();
    b.update_node(&mut g, axpy, &[(2, KernelArg::buffer(&x2))])
        .ctx("rebind the axpy's x")?;
    drop(x2);
    ensure!(
        holds_block(b, x2_address),
        "the graph holds x2's block after x2 is dropped"
    );
    ensure!(
        holds_block(b, x_address),
        "x's block is let go while the copy node still reads it"
    );
    let x3 = b.alloc_from(&data(n, -4.0)).ctx("alloc x3")?;
    b.update_node(&mut g, copy, &[(1, KernelArg::buffer(&x3))])
        .ctx("rebind the copy's source")?;
    ensure!(
        !holds_block(b, x_address),
        "x's block is still held after no node uses it"
    );
    replay(b, &s, &mut g, "replay")?;
    let want_y: Vec<f32> = data(n, 7.0).iter().map(|v| 1.0 + 2.0 * v).collect();
    same_bits("y = 1 + 2 x2", &read(b, &y)?, &want_y)?;
    same_bits("w = x3", &read(b, &w)?, &data(n, -4.0))?;
    drop(g);
    ensure!(!holds_block(b, x2_address), "x2's block outlives the graph");
    Ok(())
}

fn node_update_misuse<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let mut child = add_one_graph(b, &s, &x)?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let (add, nested) = b
        .capture_on(&s, &mut g, || {
            b.add_scalar(&x, 1.0)?;
            let add = b.captured_node()?;
            child.replay()?;
            Ok((add, b.captured_node()?))
        })
        .ctx("capture")?;
    let short = b.alloc_from(&[0.0f32; 3]).ctx("alloc")?;
    let ints = b.alloc_from(&[0u32; 4]).ctx("alloc")?;
    let cases: [(&[NodeArg<'_, B>], UpdateConflict, &str); 6] = [
        (
            &[(0, KernelArg::buffer(&short))],
            UpdateConflict::LaunchShape,
            "a shorter buffer",
        ),
        (
            &[(0, KernelArg::buffer(&ints))],
            UpdateConflict::ElementType,
            "a u32 buffer",
        ),
        (
            &[(1, KernelArg::scalar(2u32))],
            UpdateConflict::Argument,
            "a u32 scalar",
        ),
        (
            &[(1, KernelArg::buffer(&x))],
            UpdateConflict::Argument,
            "a buffer for the scalar",
        ),
        (
            &[(0, KernelArg::scalar(1.0f32))],
            UpdateConflict::Argument,
            "a scalar for the buffer",
        ),
        (
            &[(2, KernelArg::scalar(1.0f32))],
            UpdateConflict::Argument,
            "parameter 2 of two",
        ),
    ];
    for (args, conflict, what) in cases {
        refused(b.update_node(&mut g, add, args), conflict, what)?;
        b.upload(&x, &[0.0; 4]).ctx("upload")?;
        replay(b, &s, &mut g, what)?;
        same_bits(&format!("after {what}"), &read(b, &x)?, &[2.0; 4])?;
    }
    refused(
        b.update_node(&mut g, nested, &[(0, KernelArg::scalar(1.0f32))]),
        UpdateConflict::NotUpdatable,
        "a child graph's node",
    )?;
    let mut other = add_one_graph(b, &s, &x)?;
    refused(
        b.update_node(&mut other, add, &[(1, KernelArg::scalar(5.0f32))]),
        UpdateConflict::UnknownNode,
        "another graph's node",
    )?;
    g.reset();
    b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))
        .ctx("capture again")?;
    refused(
        b.update_node(&mut g, add, &[(1, KernelArg::scalar(5.0f32))]),
        UpdateConflict::UnknownNode,
        "a node of the capture before reset()",
    )?;
    let fresh = new_graph(b, GraphOptions::new())?;
    let mut fresh = fresh;
    expect_err!(
        b.update_node(&mut fresh, add, &[(1, KernelArg::scalar(5.0f32))]),
        GraphError::NotCaptured { .. },
        "update_node before a capture"
    );
    expect_err!(
        b.update_graph(&mut fresh, &other),
        GraphError::NotCaptured { .. },
        "update_from before a capture"
    );
    Ok(())
}

fn captured_node_unavailable<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    expect_err!(
        b.captured_node(),
        GraphError::NodeUnavailable { .. },
        "captured_node outside a capture"
    );
    let mut g = new_graph(b, GraphOptions::new())?;
    let before = b
        .capture_on(&s, &mut g, || {
            let before = b.captured_node();
            b.add_scalar(&x, 1.0)?;
            Ok(before)
        })
        .ctx("capture")?;
    expect_err!(
        before,
        GraphError::NodeUnavailable { .. },
        "captured_node before any work"
    );
    replay(b, &s, &mut g, "replay")?;
    same_bits("x", &read(b, &x)?, &[1.0; 4])
}

fn affine_launch<B: Backend>(
    b: &B,
    kernel: &Kernel,
    y: &Buf<B>,
    x: &Buf<B>,
    a: f32,
) -> accel_graph_api::Result<()> {
    let n = y.len();
    b.launch_kernel(
        kernel,
        kernel.grid_for(n),
        &[
            KernelArg::buffer(y),
            KernelArg::buffer(x),
            KernelArg::scalar(a),
            KernelArg::scalar(0.5f32),
            KernelArg::scalar(n as u32),
        ],
    )
}

fn node_update_user_kernel<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let kernel = &*super::kernels::AFFINE;
    let s = b.new_stream().ctx("new_stream")?;
    let n = 300;
    let (y, x1, x2) = (
        b.alloc_from(&vec![0.0f32; n]).ctx("alloc")?,
        b.alloc_from(&data(n, 1.0)).ctx("alloc")?,
        b.alloc_from(&data(n, 9.0)).ctx("alloc")?,
    );
    let mut g = new_graph(b, GraphOptions::new())?;
    let node = b
        .capture_on(&s, &mut g, || {
            affine_launch(b, kernel, &y, &x1, 2.0)?;
            b.captured_node()
        })
        .ctx("capture the kernel")?;
    b.update_node(
        &mut g,
        node,
        &[(1, KernelArg::buffer(&x2)), (2, KernelArg::scalar(-1.5f32))],
    )
    .ctx("update the kernel's x and a")?;
    refused(
        b.update_node(&mut g, node, &[(4, KernelArg::scalar(n as u32 + 1))]),
        UpdateConflict::Argument,
        "an n past the buffers (the kernel's extent)",
    )?;
    replay(b, &s, &mut g, "replay")?;
    let updated = read(b, &y)?;
    let mut fresh = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut fresh, || affine_launch(b, kernel, &y, &x2, -1.5))
        .ctx("fresh capture")?;
    b.upload(&y, &vec![0.0f32; n]).ctx("upload")?;
    replay(b, &s, &mut fresh, "replay of the fresh capture")?;
    same_bits("updated kernel against fresh", &updated, &read(b, &y)?)
}

fn update_from_keeps_memory_alive<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let n = 128;
    let mine = triple(b, n, 0.0)?;
    let out = b.alloc_from(&vec![0.0f32; n]).ctx("alloc")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        program(b, refs::<B>(&mine), 1.0, 1.0)?;
        b.copy(&out, &mine[0])
    })
    .ctx("capture g")?;
    let (want, address) = {
        let theirs = triple(b, n, 4.0)?;
        let mut h = new_graph(b, GraphOptions::new())?;
        b.capture_on(&s, &mut h, || {
            program(b, refs::<B>(&theirs), 0.75, 2.0)?;
            b.copy(&out, &theirs[0])
        })
        .ctx("capture h")?;
        let eager = triple(b, n, 4.0)?;
        program(b, refs::<B>(&eager), 0.75, 2.0).ctx("eager run")?;
        let want = read(b, &eager[0])?;
        b.update_graph(&mut g, &h).ctx("update_from h")?;
        (want, theirs[0].device_address())
        // h and its buffers are dropped here.
    };
    ensure!(
        holds_block(b, address),
        "the updated graph does not hold the memory its new work uses"
    );
    replay(
        b,
        &s,
        &mut g,
        "replay after the source and its buffers were dropped",
    )?;
    same_bits("the dropped source's work", &read(b, &out)?, &want)?;
    same_bits("g's own buffers", &read(b, &mine[0])?, &data(n, 0.0))?;
    drop(g);
    ensure!(!holds_block(b, address), "the memory outlives the graph");
    Ok(())
}

fn child_graph_node<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&data(64, 1.0)).ctx("alloc")?;
    let mut parent = new_graph(b, GraphOptions::new().keep_graph(true))?;
    let address = {
        let tmp = b.alloc_from(&data(64, 2.0)).ctx("alloc")?;
        let capture_child = |keep: bool| {
            let mut child = new_graph(b, GraphOptions::new().keep_graph(keep))?;
            b.capture_on(&s, &mut child, || {
                b.mul(&x, &tmp)?;
                b.add_scalar(&x, 0.5)
            })
            .ctx("capture a child")?;
            Ok::<_, String>(child)
        };
        // A keep_graph=false child (ready at capture_end) and an instantiated keep_graph one.
        let mut plain = capture_child(false)?;
        let mut kept = capture_child(true)?;
        kept.instantiate().ctx("instantiate the kept child")?;
        b.capture_on(&s, &mut parent, || {
            b.scale(&x, 2.0)?;
            plain.replay()?;
            b.add_scalar(&x, -1.0)?;
            kept.replay()
        })
        .ctx("capture the parent")?;
        same_bits("nothing ran at capture", &read(b, &x)?, &data(64, 1.0))?;
        tmp.device_address()
        // The children and their buffer are dropped here.
    };
    let topology = parent.nodes().ctx("nodes")?;
    ensure!(
        topology.count(NodeKind::Graph) == 2 && topology.len() == 4 && topology.is_chain(),
        "the parent is a chain of 4 nodes, 2 of them child graphs: {topology:?}"
    );
    ensure!(
        holds_block(b, address),
        "the parent holds the children's buffer"
    );
    replay(b, &s, &mut parent, "replay of the parent")?;
    let tmp = data(64, 2.0);
    let want: Vec<f32> = data(64, 1.0)
        .iter()
        .zip(&tmp)
        .map(|(v, t)| ((((v * 2.0) * t + 0.5) - 1.0) * t) + 0.5)
        .collect();
    same_bits("parent replay", &read(b, &x)?, &want)?;
    drop(parent);
    ensure!(
        !holds_block(b, address),
        "the children's buffer outlives the parent"
    );
    Ok(())
}

fn if_then_decides_at_replay<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 8]).ctx("alloc")?;
    let (cf, cu) = (
        b.alloc_from(&[0.0f32]).ctx("alloc")?,
        b.alloc_from(&[1u32]).ctx("alloc")?,
    );
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.fill(&cf, 2.5)?;
        b.if_then(&cf, || b.add_scalar(&x, 1.0))?;
        b.fill(&cf, -0.0)?;
        b.if_then(&cf, || b.add_scalar(&x, 100.0))?;
        b.if_then(&cu, || b.scale(&x, 3.0))
    })
    .ctx("capture")?;
    same_bits("nothing ran at capture", &read(b, &x)?, &[0.0; 8])?;
    replay(b, &s, &mut g, "replay with cu = 1")?;
    same_bits("(0 + 1) * 3", &read(b, &x)?, &[3.0; 8])?;
    b.upload(&cu, &[0]).ctx("upload")?;
    replay(b, &s, &mut g, "replay with cu = 0")?;
    same_bits("3 + 1", &read(b, &x)?, &[4.0; 8])?;
    b.upload(&cu, &[0x8000_0000]).ctx("upload")?;
    replay(b, &s, &mut g, "replay with cu = 1 << 31")?;
    same_bits("(4 + 1) * 3", &read(b, &x)?, &[15.0; 8])
}

fn if_else_decides_at_replay<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[1.0f32; 8]).ctx("alloc")?;
    let c = b.alloc_from(&[7i32]).ctx("alloc")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.if_else(&c, || b.scale(&x, 2.0), || b.add_scalar(&x, -10.0))
    })
    .ctx("capture")?;
    replay(b, &s, &mut g, "replay with c = 7")?;
    same_bits("then branch", &read(b, &x)?, &[2.0; 8])?;
    b.upload(&c, &[0]).ctx("upload")?;
    replay(b, &s, &mut g, "replay with c = 0")?;
    same_bits("else branch", &read(b, &x)?, &[-8.0; 8])?;
    b.upload(&c, &[-1]).ctx("upload")?;
    replay(b, &s, &mut g, "replay with c = -1")?;
    same_bits("then branch again", &read(b, &x)?, &[-16.0; 8])
}

fn while_loop_equals_unrolled<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let n = 300;
    let (acc, v, left) = (
        b.alloc_from(&data(n, 0.0)).ctx("alloc")?,
        b.alloc_from(&data(n, 3.0)).ctx("alloc")?,
        b.alloc_from(&[0.0f32]).ctx("alloc")?,
    );
    let iterations = 7;
    let mut looped = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut looped, || {
        b.fill(&left, iterations as f32)?;
        b.while_loop(&left, || {
            b.axpy(&acc, 0.5, &v)?;
            b.scale(&acc, 0.75)?;
            b.add_scalar(&left, -1.0)
        })
    })
    .ctx("capture the loop")?;
    replay(b, &s, &mut looped, "replay of the loop")?;
    replay(b, &s, &mut looped, "second replay of the loop")?;
    let got = read(b, &acc)?;
    same_bits("the counter", &read(b, &left)?, &[0.0])?;
    b.upload(&acc, &data(n, 0.0)).ctx("upload")?;
    let mut unrolled = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut unrolled, || {
        for _ in 0..2 * iterations {
            b.axpy(&acc, 0.5, &v)?;
            b.scale(&acc, 0.75)?;
        }
        Ok(())
    })
    .ctx("capture the unrolled work")?;
    replay(b, &s, &mut unrolled, "replay of the unrolled work")?;
    same_bits("loop against unrolled", &got, &read(b, &acc)?)?;
    // A condition false from the start runs the body not at all.
    let never = b.alloc_from(&[0u32]).ctx("alloc")?;
    let mut skipped = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut skipped, || {
        b.while_loop(&never, || b.add_scalar(&acc, 1.0))
    })
    .ctx("capture")?;
    let before = read(b, &acc)?;
    replay(b, &s, &mut skipped, "replay")?;
    same_bits("a loop whose condition is false", &read(b, &acc)?, &before)
}

fn nested_conditionals<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let (x, left, parity) = (
        b.alloc_from(&[1.0f32; 16]).ctx("alloc")?,
        b.alloc_from(&[0.0f32]).ctx("alloc")?,
        b.alloc_from(&[0.0f32]).ctx("alloc")?,
    );
    let mut child = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut child, || b.add_scalar(&x, 0.25))
        .ctx("capture the child")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.fill(&left, 4.0)?;
        b.fill(&parity, 1.0)?;
        b.while_loop(&left, || {
            b.if_else(
                &parity,
                || {
                    b.scale(&x, 2.0)?;
                    child.replay()
                },
                || b.add_scalar(&x, -1.0),
            )?;
            // parity = 1 - parity
            b.scale(&parity, -1.0)?;
            b.add_scalar(&parity, 1.0)?;
            b.add_scalar(&left, -1.0)
        })?;
        b.if_then(&flag, || b.scale(&x, -1.0))
    })
    .ctx("capture")?;
    replay(b, &s, &mut g, "replay")?;
    // 1 → 2.25 → 1.25 → 2.75 → 1.75, then negated.
    same_bits("nested result", &read(b, &x)?, &[-1.75; 16])?;
    b.upload(&flag, &[0]).ctx("upload")?;
    b.upload(&x, &[1.0; 16]).ctx("upload")?;
    replay(b, &s, &mut g, "replay with the flag off")?;
    same_bits("nested result, not negated", &read(b, &x)?, &[1.75; 16])?;
    // A graph holding conditional nodes is no child graph (CUDA cannot embed one); the
    // capture it was refused in goes on.
    let mut parent = new_graph(b, GraphOptions::new())?;
    let refused = b
        .capture_on(&s, &mut parent, || {
            let refused = g.replay();
            b.add_scalar(&x, 1.0)?;
            Ok(refused)
        })
        .ctx("capture the parent")?;
    expect_err!(
        refused,
        GraphError::Unsupported { .. },
        "a graph with conditional nodes as a child"
    );
    b.upload(&x, &[0.0; 16]).ctx("upload")?;
    replay(b, &s, &mut parent, "replay of the parent")?;
    same_bits("the parent went on", &read(b, &x)?, &[1.0; 16])
}

/// The conditional program of [`eager_conditionals`].
fn conditional_program<B: Backend>(
    b: &B,
    x: &Buf<B>,
    left: &Buf<B>,
    flag: &<B as PortableOps>::Buffer<u32>,
) -> accel_graph_api::Result<()> {
    b.fill(left, 3.0)?;
    b.while_loop(left, || {
        b.if_then(flag, || b.scale(x, 1.5))?;
        b.add_scalar(x, 0.125)?;
        b.add_scalar(left, -1.0)
    })
}

fn eager_conditionals<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = 100;
    let (x, left, flag) = (
        b.alloc_from(&data(n, 1.0)).ctx("alloc")?,
        b.alloc(1).ctx("alloc")?,
        b.alloc_from(&[1u32]).ctx("alloc")?,
    );
    conditional_program(b, &x, &left, &flag).ctx("eager run")?;
    let eager = read(b, &x)?;
    let want: Vec<f32> = data(n, 1.0)
        .iter()
        .map(|v| (0..3).fold(*v, |v, _| v * 1.5 + 0.125))
        .collect();
    same_bits("eager conditionals", &eager, &want)?;
    if !b.capabilities().conditional_nodes {
        return Ok(());
    }
    b.upload(&x, &data(n, 1.0)).ctx("upload")?;
    let s = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut g, || conditional_program(b, &x, &left, &flag))
        .ctx("capture")?;
    replay(b, &s, &mut g, "replay")?;
    same_bits("replayed against eager", &read(b, &x)?, &eager)
}

fn failing_bodies<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc")?;
    let wide = b.alloc_from(&[1u32, 1]).ctx("alloc")?;
    let short = b.alloc_from(&[0.0f32; 3]).ctx("alloc")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    // An argument error before the node is begun leaves the capture running.
    b.capture_on(&s, &mut g, || {
        let refused = b.if_then(&wide, || b.add_scalar(&x, 1.0));
        b.add_scalar(&x, 1.0)?;
        Ok(refused)
    })
    .ctx("capture")
    .and_then(|refused| {
        expect_err!(
            refused,
            GraphError::LengthMismatch { .. },
            "a condition of two elements"
        );
        Ok(())
    })?;
    replay(b, &s, &mut g, "replay")?;
    same_bits("the capture went on", &read(b, &x)?, &[1.0; 4])?;
    g.reset();
    // A body that fails: its error comes back, and the scoped capture discards the capture.
    let mut in_body = Ok(());
    let result = b.capture_on(&s, &mut g, || {
        b.if_then(&flag, || {
            in_body = match b.captured_node() {
                Err(GraphError::NodeUnavailable { .. }) => Ok(()),
                other => Err(format!("captured_node in a body: {other:?}")),
            };
            b.add_scalar(&x, 5.0)?;
            b.mul(&x, &short) // lengths differ: the body fails
        })
    });
    in_body?;
    expect_err!(
        result,
        GraphError::LengthMismatch { .. },
        "the failing body's error"
    );
    ensure!(g.state() == GraphState::Empty, "the graph is {}", g.state());
    ensure!(
        !b.is_capturing(&s).ctx("is_capturing")?,
        "the stream still captures"
    );
    // The same body with its error ignored: the capture is invalidated all the same.
    let result = b.capture_on(&s, &mut g, || {
        let _ignored = b.if_then(&flag, || b.mul(&x, &short));
        b.add_scalar(&x, 1.0)
    });
    expect_err!(
        result,
        GraphError::CaptureInvalidated { .. },
        "ending a capture whose conditional node failed"
    );
    ensure!(
        !b.is_capturing(&s).ctx("is_capturing")?,
        "the stream still captures"
    );
    same_bits(
        "nothing of the failed captures ran",
        &read(b, &x)?,
        &[1.0; 4],
    )?;
    // A body that panics.
    let panicked = expect_panic(|| {
        b.capture_on(&s, &mut g, || {
            b.if_then(&flag, || -> accel_graph_api::Result<()> {
                b.add_scalar(&x, 1.0)?;
                panic!("a body that panics")
            })
        })
    });
    ensure!(
        panicked.is_some_and(|m| m.contains("a body that panics")),
        "the body's panic must propagate"
    );
    ensure!(g.state() == GraphState::Empty, "the graph is {}", g.state());
    ensure!(
        !b.is_capturing(&s).ctx("is_capturing")?,
        "the stream still captures"
    );
    // An external event is host-visible work a body cannot hold.
    let external = b
        .new_event_with(accel_graph_api::EventOptions::new().external(true))
        .ctx("new_event_with")?;
    let result = b.capture_on(&s, &mut g, || {
        b.if_then(&flag, || b.record_event(&external))
    });
    expect_err!(
        result,
        GraphError::Unsupported { .. },
        "an external event recorded in a body"
    );
    ensure!(
        !b.is_capturing(&s).ctx("is_capturing")?,
        "the stream still captures"
    );
    // The backend still captures conditionals.
    b.capture_on(&s, &mut g, || b.if_then(&flag, || b.add_scalar(&x, 1.0)))
        .ctx("capture after the failures")?;
    replay(b, &s, &mut g, "replay")?;
    same_bits("after the failures", &read(b, &x)?, &[2.0; 4])
}

fn host_callback_in_body<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc")?;
    let calls = Arc::new(AtomicUsize::new(0));
    let mut g = new_graph(b, GraphOptions::new())?;
    let result = b.capture_on(&s, &mut g, || {
        b.if_then(&flag, || {
            let calls = Arc::clone(&calls);
            b.host_callback(Arc::new(move || {
                calls.fetch_add(1, Ordering::Relaxed);
            }))
        })
    });
    expect_err!(
        result,
        GraphError::Unsupported { .. },
        "a host callback in a body"
    );
    ensure!(
        !b.is_capturing(&s).ctx("is_capturing")?,
        "the stream still captures"
    );
    ensure!(calls.load(Ordering::Relaxed) == 0, "the callback ran");
    Ok(())
}

fn conditionals_unsupported<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    let refused = b
        .capture_on(&s, &mut g, || {
            let refused = b.while_loop(&flag, || b.add_scalar(&x, 1.0));
            b.add_scalar(&x, 2.0)?;
            Ok(refused)
        })
        .ctx("capture")?;
    let e = expect_err!(
        refused,
        GraphError::Unsupported { .. },
        "while_loop in a capture"
    );
    ensure!(
        e.to_string().contains("conditional_nodes"),
        "the error names the capability: {e}"
    );
    replay(b, &s, &mut g, "replay")?;
    same_bits("the capture went on", &read(b, &x)?, &[2.0; 4])
}

fn topology_shows_child_and_conditional_nodes<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let flag = b.alloc_from(&[1u32]).ctx("alloc")?;
    let mut child = add_one_graph(b, &s, &x)?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        child.replay()?;
        b.if_then(&flag, || b.add_scalar(&x, 1.0))
    })
    .ctx("capture")?;
    let topology = g.nodes().ctx("nodes")?;
    ensure!(
        topology.count(NodeKind::Graph) == 1 && topology.count(NodeKind::Conditional) == 1,
        "one Graph and one Conditional node expected: {topology:?}"
    );
    let path = std::env::temp_dir().join(format!(
        "accel_graph_editing_{}_{}.dot",
        std::process::id(),
        b.instance_id()
    ));
    g.debug_dump(&path).ctx("debug_dump")?;
    let dot = std::fs::read_to_string(&path).map_err(|e| format!("reading the dump: {e}"));
    let _ = std::fs::remove_file(&path);
    let dot = dot?;
    ensure!(
        dot.starts_with("digraph") && dot.len() > 40,
        "the dump is not a DOT digraph: {dot}"
    );
    Ok(())
}

fn update_from_with_bodies<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let build = |x: &Buf<B>, a: f32| {
        let mut child = new_graph(b, GraphOptions::new())?;
        b.capture_on(&s, &mut child, || b.scale(x, a))
            .ctx("capture the child")?;
        let mut g = new_graph(b, GraphOptions::new())?;
        b.capture_on(&s, &mut g, || {
            b.add_scalar(x, a)?;
            child.replay()
        })
        .ctx("capture")?;
        Ok::<_, String>(g)
    };
    let (x1, x2) = (
        b.alloc_from(&[1.0f32; 4]).ctx("alloc")?,
        b.alloc_from(&[1.0f32; 4]).ctx("alloc")?,
    );
    let mut g = build(&x1, 2.0)?;
    let h = build(&x2, 3.0)?;
    b.update_graph(&mut g, &h).ctx("update_from")?;
    drop(h);
    replay(b, &s, &mut g, "replay")?;
    same_bits("x1 untouched", &read(b, &x1)?, &[1.0; 4])?;
    same_bits("x2: (1 + 3) * 3", &read(b, &x2)?, &[12.0; 4])?;
    // A child of another shape is another topology.
    let mut other = new_graph(b, GraphOptions::new())?;
    let mut longer = new_graph(b, GraphOptions::new())?;
    b.capture_on(&s, &mut longer, || {
        b.scale(&x2, 3.0)?;
        b.scale(&x2, 3.0)
    })
    .ctx("capture a longer child")?;
    b.capture_on(&s, &mut other, || {
        b.add_scalar(&x2, 1.0)?;
        longer.replay()
    })
    .ctx("capture other")?;
    refused(
        b.update_graph(&mut g, &other),
        UpdateConflict::NodeCount,
        "a child of two nodes",
    )?;
    // Graphs holding conditional nodes are not updated from another capture (CUDA cannot
    // copy them); their nodes are updated one at a time.
    let flag = b.alloc_from(&[1u32]).ctx("alloc")?;
    let conditional = |a: f32| {
        let mut g = new_graph(b, GraphOptions::new())?;
        let node = b
            .capture_on(&s, &mut g, || {
                b.add_scalar(&x1, a)?;
                let node = b.captured_node()?;
                b.if_then(&flag, || b.scale(&x1, 2.0))?;
                Ok(node)
            })
            .ctx("capture a conditional graph")?;
        Ok::<_, String>((g, node))
    };
    let ((mut c1, node), (c2, _)) = (conditional(1.0)?, conditional(5.0)?);
    refused(
        b.update_graph(&mut c1, &c2),
        UpdateConflict::NotUpdatable,
        "a graph with a conditional node",
    )?;
    b.update_node(&mut c1, node, &[(1, KernelArg::scalar(5.0f32))])
        .ctx("a node update of a graph with a conditional node")?;
    replay(b, &s, &mut c1, "replay")?;
    same_bits("(1 + 5) * 2", &read(b, &x1)?, &[12.0; 4])
}

fn instantiate_flags<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let s = b.new_stream().ctx("new_stream")?;
    let x = b.alloc_from(&[0.0f32; 4]).ctx("alloc")?;
    let defaults = InstantiateFlags::default();
    let plain = InstantiateFlags {
        auto_free_on_launch: false,
        use_node_priority: false,
        device_launch: false,
    };
    for flags in [defaults, plain] {
        let mut g = new_graph(b, GraphOptions::new().instantiate_flags(flags))?;
        b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))
            .ctx("capture")?;
        replay(b, &s, &mut g, "replay")?;
    }
    same_bits("two graphs ran", &read(b, &x)?, &[2.0; 4])?;
    let device = GraphOptions::new().instantiate_flags(InstantiateFlags {
        device_launch: true,
        ..plain
    });
    if b.capabilities().device_launch {
        let mut g = new_graph(b, device)?;
        b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))
            .ctx("capture for device launch")?;
        replay(b, &s, &mut g, "replay of a device-launch graph")?;
        same_bits("device-launch graph", &read(b, &x)?, &[3.0; 4])
    } else {
        expect_err!(
            b.graph(device),
            GraphError::Unsupported { .. },
            "a device-launch graph where the backend has none"
        );
        Ok(())
    }
}
