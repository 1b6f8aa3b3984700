//! The raw graph and the executable: `test_cuda_graph_raw_graph_keep_graph_false`,
//! `test_cuda_graph_raw_graph`, `test_cuda_graph_raw_graph_exec`.
//!
//! PyTorch hands out the raw `cudaGraph_t` / `cudaGraphExec_t` and inspects them with
//! cuda-python. The portable counterparts are `nodes()` (the raw graph's nodes and their
//! kinds) and `state()` (whether an executable exists); the raw handles themselves are
//! backend-specific (`Graph::raw_graph()` / `Graph::executable()` of each backend's graph
//! type), out of reach of code generic over the backend.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, GraphState, NodeKind,
};

use super::support::{add, ambient, expect_message, full};
use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, expect_err, expect_state, new_graph},
};

/// The buffers of `z = x + y`.
struct Sum<B: Backend> {
    /// Held, as PyTorch's `x` is, until the test ends.
    _x: B::Buffer<f32>,
    /// Held, as PyTorch's `y` is, until the test ends.
    _y: B::Buffer<f32>,
    z: B::Buffer<f32>,
}

/// `x = zeros(2000); y = ones(2000)`, then `with torch.cuda.graph(graph,
/// capture_error_mode="relaxed"): z = x + y` on a side stream.
fn capture_sum<B: Backend>(b: &B, g: &mut B::Graph) -> Result<Sum<B>, String> {
    let x = full(b, 2000, 0.0).ctx("x = zeros(2000)")?;
    let y = full(b, 2000, 1.0).ctx("y = ones(2000)")?;
    let s = b.new_stream().ctx("new_stream")?;
    let z = b
        .capture_on(&s, g, || add(b, &x, &y))
        .ctx("capture of z = x + y")?;
    Ok(Sum { _x: x, _y: y, z })
}

fn relaxed(keep_graph: bool) -> GraphOptions {
    GraphOptions::new()
        .keep_graph(keep_graph)
        .capture_error_mode(CaptureErrorMode::Relaxed)
}

/// 11.28: after a `keep_graph=False` capture, `instantiate()` is refused ("instantiate() is
/// intended to be called by the user only when keep_graph=true") and so is the raw graph
/// ("You cannot access the raw graph unless ... keep_graph=true"): here through `nodes()`,
/// the portable access to the raw graph.
pub(crate) fn cuda_graph_raw_graph_keep_graph_false<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    let mut g = new_graph(b, relaxed(false))?;
    let _sum = capture_sum(b, &mut g)?;
    expect_err!(
        g.instantiate(),
        GraphError::InstantiateRequiresKeepGraph,
        "instantiate() with keep_graph=False"
    );
    expect_message(
        g.instantiate(),
        "instantiate() is intended to be called by the user only when keep_graph=true",
        "instantiate() with keep_graph=False",
    )?;
    expect_err!(
        g.nodes(),
        GraphError::RawGraphUnavailable,
        "the raw graph with keep_graph=False"
    );
    expect_message(
        g.nodes(),
        "You cannot access the raw graph unless the graph was created with keep_graph=true",
        "the raw graph with keep_graph=False",
    )?;
    Ok(())
}

/// 11.29: with `keep_graph=True`, the raw graph of `z = x + y` can be walked and each node's
/// type read (PyTorch: `cudaGraphGetNodes`, `cudaGraphNodeGetType`; here `nodes()`: the
/// copy and the add, as a `Memcpy` and a `Kernel` node); a replay without `instantiate()`
/// instantiates it. (PyTorch asserts nothing on values; the port also checks `z == 1`.)
pub(crate) fn cuda_graph_raw_graph<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    let mut g = new_graph(b, relaxed(true))?;
    let sum = capture_sum(b, &mut g)?;
    let topology = g.nodes().ctx("nodes() of the raw graph")?;
    ensure!(
        topology.count(NodeKind::Memcpy) == 1 && topology.count(NodeKind::Kernel) == 1,
        "the raw graph of z = x + y (a copy and an axpy) has nodes {:?}",
        topology.nodes
    );
    g.replay().ctx("replay without instantiate()")?;
    expect_state(&g, GraphState::Ready, "after the first replay")?;
    expect_all(b, &sum.z, 1.0, "z = x + y after the replay")
}

/// 11.30, both parametrizations: with `keep_graph=True` there is no executable until
/// `instantiate()` (PyTorch: "You cannot access the raw cudaGraphExec_t instance until
/// instantiate() has been called"; here the graph is `Captured`, not `Ready`), and there is
/// one after it; with `keep_graph=False` there is one right after the capture. Either way the
/// graph replays. (PyTorch also queries the executable's flags through cuda-python; the
/// executable handle is backend-specific, see the module documentation.)
pub(crate) fn cuda_graph_raw_graph_exec<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    for keep_graph in [true, false] {
        let when = format!("keep_graph={keep_graph}");
        let mut g = new_graph(b, relaxed(keep_graph))?;
        let sum = capture_sum(b, &mut g)?;
        if keep_graph {
            expect_state(
                &g,
                GraphState::Captured,
                &format!("{when}: before instantiate()"),
            )?;
            g.instantiate().ctx("instantiate")?;
        }
        expect_state(
            &g,
            GraphState::Ready,
            &format!("{when}: with an executable"),
        )?;
        g.replay().ctx("replay")?;
        expect_all(
            b,
            &sum.z,
            1.0,
            &format!("{when}: z = x + y after the replay"),
        )?;
    }
    Ok(())
}
