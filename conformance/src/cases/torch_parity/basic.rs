//! Capture, replay, reset and recapture: `test_graph_is_current_stream_capturing`,
//! `test_graph_capture_simple`, `test_accelerator_graph_simple`,
//! `test_graph_capture_reset_recapture`, `test_cuda_graph_raw_graph_reset_and_recapture`.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, DeviceBuffer, GraphOptions, GraphState,
};

use super::support::{ambient, expect_sum, full, plus, wait_stream};
use crate::{
    SuiteConfig, Target,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_state, new_graph, on_stream,
    },
};

/// `torch.cuda.CUDAGraph()`: `capture_begin()` defaults to mode `"global"`, as does
/// `torch.cuda.graph(g)`.
fn cuda_graph_options() -> GraphOptions {
    GraphOptions::new().capture_error_mode(CaptureErrorMode::Global)
}

/// 11.01: neither the ambient stream nor a new one captures; between `capture_begin` and
/// `capture_end` on `s`, both "the current stream" and `s` do.
pub(crate) fn graph_is_current_stream_capturing<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    expect_capturing(b, &b.current_stream(), false, "the ambient stream")?;
    let s = b.new_stream().ctx("new_stream")?;
    let _on_s = on_stream(b, &s)?;
    let mut g = new_graph(b, cuda_graph_options())?;
    expect_capturing(
        b,
        &b.current_stream(),
        false,
        "current stream s before capture_begin",
    )?;
    expect_capturing(b, &s, false, "s before capture_begin")?;
    g.capture_begin().ctx("capture_begin on s")?;
    expect_capturing(
        b,
        &b.current_stream(),
        true,
        "current stream s after capture_begin",
    )?;
    expect_capturing(b, &s, true, "s after capture_begin")?;
    // Nothing was captured: PyTorch warns that the graph is empty and asserts nothing more.
    g.capture_end().ctx("capture_end of an empty capture")?;
    expect_capturing(b, &s, false, "s after capture_end")
}

/// 11.02: `a = full(1000, 1)` eagerly on `s`; capture ten `b = b + 1` (each a new buffer
/// from the graph's pool, the previous one dropped); one replay on the ambient stream gives
/// `sum(b) == 11000`.
pub(crate) fn graph_capture_simple<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (ambient_stream, _current) = ambient(b)?;
    let s = b.new_stream().ctx("new_stream")?;
    // `a` lives until the test ends, as the Python variable does.
    let (mut g, _a, out) = {
        // `with torch.cuda.stream(s):` — `s` does not wait on the ambient stream first.
        let _on_s = on_stream(b, &s)?;
        let a = full(b, 1000, 1.0).ctx("a = full(1000, 1) on s")?;
        let mut g = new_graph(b, cuda_graph_options())?;
        b.empty_cache().ctx("empty_cache")?;
        g.capture_begin().ctx("capture_begin")?;
        let out = ten_times_plus(b, &a, 1.0).ctx("b = b + 1, ten times, captured")?;
        g.capture_end().ctx("capture_end")?;
        (g, a, out)
    };
    wait_stream(b, &ambient_stream, &s).ctx("ambient.wait_stream(s)")?;
    g.replay().ctx("replay")?;
    expect_sum(b, &out, 11000.0, "b after one replay")
}

/// `b = a; for _ in range(10): b = b + c` — each step a new buffer; the one it replaces is
/// dropped (unless it is `a`, which the caller keeps).
fn ten_times_plus<B: Backend>(
    b: &B,
    a: &B::Buffer<f32>,
    c: f32,
) -> accel_graph_api::Result<B::Buffer<f32>> {
    let mut out = plus(b, a, c)?;
    for _ in 1..10 {
        out = plus(b, &out, c)?;
    }
    Ok(out)
}

/// 11.03: `with s, torch.accelerator.Graph():` — synchronize, `empty_cache`, capture on `s`
/// in mode `"default"`; inside, `a = full(1000, 1)` is allocated from the pool and its fill is
/// captured; `s` reports capturing; ten `b = b + 1`. After it, the ambient stream waits on
/// `s`, is not capturing, and one replay gives `sum(b) == 11000`.
pub(crate) fn accelerator_graph_simple<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (ambient_stream, _current) = ambient(b)?;
    let s = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    expect_capturing(
        b,
        &b.current_stream(),
        false,
        "the ambient stream before capture",
    )?;
    // `Graph.__enter__`: synchronize and empty the cache before capture_begin.
    b.synchronize().ctx("synchronize")?;
    b.empty_cache().ctx("empty_cache")?;
    let (a, out, capturing_inside) = b
        .capture_on(&s, &mut g, || {
            let a = full(b, 1000, 1.0)?;
            let capturing = b.is_capturing(&s)?;
            let out = ten_times_plus(b, &a, 1.0)?;
            Ok((a, out, capturing))
        })
        .ctx("with s, g: a = full(1000, 1); b = b + 1 ten times")?;
    ensure!(
        capturing_inside,
        "s.is_capturing() is false inside `with s, g:`"
    );
    wait_stream(b, &ambient_stream, &s).ctx("ambient.wait_stream(s)")?;
    expect_capturing(
        b,
        &b.current_stream(),
        false,
        "the ambient stream after capture",
    )?;
    g.replay().ctx("replay")?;
    expect_all(b, &a, 1.0, "a (filled by the replay)")?;
    expect_sum(b, &out, 11000.0, "b after one replay")
}

/// 11.06: as 11.02 (11000), then `reset()` and a recapture into the same graph object:
/// `b.fill_(2.0)` (a captured fill of the first capture's output, which outlives that
/// graph's reset) and ten `b = b + 2`: one replay gives 22000, and so do
/// [`SuiteConfig::torch_replays`] more (1000 in the GPU run). With the graph and `b` dropped,
/// the memory is what it was before the first capture.
pub(crate) fn graph_capture_reset_recapture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let replays = SuiteConfig::from_env().torch_replays;
    let (ambient_stream, _current) = ambient(b)?;
    let s = b.new_stream().ctx("new_stream")?;
    let a = {
        let _on_s = on_stream(b, &s)?;
        full(b, 1000, 1.0).ctx("a = full(1000, 1) on s")?
    };
    let baseline = b.memory_stats();
    let mut g = new_graph(b, cuda_graph_options())?;
    let first = {
        let _on_s = on_stream(b, &s)?;
        b.empty_cache().ctx("empty_cache")?;
        g.capture_begin().ctx("capture_begin")?;
        let out = ten_times_plus(b, &a, 1.0).ctx("b = b + 1, ten times, captured")?;
        g.capture_end().ctx("capture_end")?;
        out
    };
    wait_stream(b, &ambient_stream, &s).ctx("ambient.wait_stream(s)")?;
    g.replay().ctx("replay")?;
    expect_sum(b, &first, 11000.0, "b after the first capture's replay")?;

    g.reset();
    // The first output is still referenced: its block outlives the reset.
    expect_sum(b, &first, 11000.0, "b after reset()")?;
    let second = {
        let _on_s = on_stream(b, &s)?;
        g.capture_begin().ctx("capture_begin after reset()")?;
        b.fill(&first, 2.0).ctx("b.fill_(2.0), captured")?;
        let out = ten_times_plus(b, &first, 2.0).ctx("b = b + 2, ten times, captured")?;
        g.capture_end().ctx("capture_end of the recapture")?;
        out
    };
    // `b = b + 2` rebinds `b`: the first output is dropped here, while the graph that fills
    // it lives (the graph keeps its block).
    drop(first);
    wait_stream(b, &ambient_stream, &s).ctx("ambient.wait_stream(s)")?;
    g.replay().ctx("replay of the recapture")?;
    expect_sum(b, &second, 22000.0, "b after the second capture's replay")?;
    for _ in 0..replays {
        g.replay().ctx("replay of the recapture")?;
    }
    expect_sum(
        b,
        &second,
        22000.0,
        &format!("b after {replays} more replays (ACCEL_GRAPH_TORCH_REPLAYS)"),
    )?;

    g.reset();
    drop(g);
    drop(second);
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "with the graph and b dropped the memory is not back to the baseline: \
         before the captures {baseline:?}, now {after:?}"
    );
    Ok(())
}

/// 11.31: a `keep_graph` graph captures `x += 1` (relaxed) on a side stream; `instantiate`,
/// replay (1), `instantiate` again, replay (2), replay (3). After `reset()`, a new `x` (a new
/// address, so the new graph cannot pass by replaying the old one) and `x += 2` captured into
/// the same object: 2, 4 and 6 the same way.
pub(crate) fn cuda_graph_raw_graph_reset_and_recapture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    // `torch.cuda.graph` captures on one side stream shared by all its uses.
    let capture_stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(
        b,
        GraphOptions::new()
            .keep_graph(true)
            .capture_error_mode(CaptureErrorMode::Relaxed),
    )?;
    let x = full(b, 2000, 0.0).ctx("x = zeros(2000)")?;
    b.capture_on(&capture_stream, &mut g, || b.add_scalar(&x, 1.0))
        .ctx("capture of x += 1")?;
    expect_state(&g, GraphState::Captured, "after the capture (keep_graph)")?;
    instantiate_replay_three(b, &mut g, &x, 1.0)?;

    g.reset();
    let old_address = x.device_address();
    let x2 = full(b, 2000, 0.0).ctx("x = zeros(2000) after reset()")?;
    drop(x);
    ensure!(
        x2.device_address() != old_address,
        "the new x is at the old x's address {old_address:#x}"
    );
    b.capture_on(&capture_stream, &mut g, || b.add_scalar(&x2, 2.0))
        .ctx("capture of x += 2 after reset()")?;
    instantiate_replay_three(b, &mut g, &x2, 2.0)
}

/// `instantiate(); replay()` → `step`; `instantiate(); replay()` → `2 step`; `replay()` →
/// `3 step` (each check exact over every element).
fn instantiate_replay_three<B: Backend>(
    b: &B,
    g: &mut B::Graph,
    x: &B::Buffer<f32>,
    step: f32,
) -> CaseResult {
    g.instantiate().ctx("instantiate")?;
    g.replay().ctx("replay")?;
    expect_all(b, x, step, "x after instantiate and replay")?;
    // Re-instantiating an instantiated graph is allowed and replays the same work.
    g.instantiate().ctx("instantiate again")?;
    g.replay().ctx("replay")?;
    expect_all(b, x, 2.0 * step, "x after a second instantiate and replay")?;
    g.replay().ctx("replay")?;
    expect_all(b, x, 3.0 * step, "x after a third replay")
}
