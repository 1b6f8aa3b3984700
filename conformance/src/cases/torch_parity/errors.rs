//! Errors and warnings during capture: `test_graph_error`, `test_graph_warn_if_has_zero_nodes`,
//! `test_graph_capture_oom`, `test_cuda_graph_error_options`,
//! `test_cuda_graph_tensor_item_not_allowed`.
//!
//! PyTorch runs two of them in a child process because the error corrupts the CUDA context;
//! here each error is a typed [`GraphError`] that corrupts nothing, so the ports check the
//! error and then that the backend still works: eager work, and a new capture that replays.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureConflict, CaptureErrorMode, GraphError, GraphOptions,
    GraphState,
};

use super::support::{add, ambient, full, wait_stream};
use crate::{
    Target,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_capturing, expect_err,
        expect_state, new_graph, on_other_thread, on_stream, ramp, read, replay_on,
    },
    warnings::collect_warnings,
};

/// After an error: eager work on `stream` runs, and a new graph captures `x += 1` on a new
/// stream and replays it.
fn backend_still_works<B: Backend>(b: &B, stream: &B::Stream, when: &str) -> CaseResult {
    let x = {
        // Filled on `stream` too: a fill on another stream would race with the add.
        let _current = on_stream(b, stream)?;
        let x = full(b, 64, 0.0).ctx("alloc + fill")?;
        b.add_scalar(&x, 1.0).ctx("eager add_scalar")?;
        x
    };
    expect_all(b, &x, 1.0, &format!("eager x += 1 {when}"))?;
    let side = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    capture_add_one(b, &side, &mut g, &x).map_err(|e| format!("{when}: {e}"))?;
    replay_on(b, &side, &mut g)?;
    expect_all(b, &x, 2.0, &format!("replay of x += 1 captured {when}"))
}

/// 11.09: `capture_begin()` on the default stream fails with "... must be captured on a
/// non-default stream." PyTorch runs it in a child process (the error corrupts the CUDA
/// context there); here it is [`GraphError::StreamNotCapturable`], nothing is left
/// capturing, and the backend — the default stream included — works on.
pub(crate) fn graph_error<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    // The child process starts on the real default stream, not on a side stream.
    let default = b.default_stream();
    let _current = on_stream(b, &default)?;
    let mut g = new_graph(
        b,
        GraphOptions::new().capture_error_mode(CaptureErrorMode::Global),
    )?;
    let error = expect_err!(
        g.capture_begin(),
        GraphError::StreamNotCapturable,
        "capture_begin on the default stream"
    );
    ensure!(
        error
            .to_string()
            .contains("must be captured on a non-default stream"),
        "the error says {error:?}, not that graphs must be captured on a non-default stream"
    );
    expect_state(&g, GraphState::Empty, "after the refused capture_begin")?;
    expect_capturing(b, &default, false, "the default stream after the refusal")?;
    backend_still_works(
        b,
        &default,
        "after the refused capture on the default stream",
    )?;
    // The graph object itself captures too, on a stream that can be captured. The fill runs
    // on the default stream: synchronized before the capture (as `torch.cuda.graph` does),
    // so that the replay on the side stream is ordered after it.
    let x = full(b, 16, 0.0).ctx("alloc + fill")?;
    b.synchronize().ctx("synchronize")?;
    let s = b.new_stream().ctx("new_stream")?;
    capture_add_one(b, &s, &mut g, &x)?;
    replay_on(b, &s, &mut g)?;
    expect_all(
        b,
        &x,
        1.0,
        "the refused graph, captured on a side stream and replayed",
    )
}

/// 11.10: capturing nothing logs a warning saying the graph is empty (PyTorch: "The CUDA
/// Graph is empty"; ours: "The graph is empty. ...").
pub(crate) fn graph_warn_if_has_zero_nodes<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    let (ended, warnings) = collect_warnings(|| -> CaseResult {
        let mut g = new_graph(b, GraphOptions::new())?;
        let s = b.new_stream().ctx("new_stream")?;
        let _on_s = on_stream(b, &s)?;
        g.capture_begin().ctx("capture_begin")?;
        g.capture_end().ctx("capture_end of an empty capture")
    });
    ended?;
    ensure!(
        warnings.iter().any(|w| w.contains("graph is empty")),
        "no warning says the graph is empty; warnings logged: {warnings:?}"
    );
    Ok(())
}

/// `torch.zeros(2**40)`: 2^40 `f32` elements, 4 TiB.
const HUGE: usize = 1 << 40;

/// 11.11: allocating 4 TiB inside a capture fails with an out-of-memory error, and ending
/// the capture afterwards (what `torch.cuda.graph`'s `__exit__` does) succeeds — it must not
/// replace the out-of-memory error with another one.
pub(crate) fn graph_capture_oom<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    let s = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(
        b,
        GraphOptions::new().capture_error_mode(CaptureErrorMode::Global),
    )?;
    {
        let _on_s = on_stream(b, &s)?;
        g.capture_begin().ctx("capture_begin")?;
        let oom = expect_err!(
            full(b, HUGE, 0.0),
            GraphError::OutOfMemory { .. },
            "zeros(2**40) inside the capture"
        );
        ensure!(
            oom.to_string().contains("out of memory"),
            "the error of zeros(2**40) does not say \"out of memory\": {oom}"
        );
        g.capture_end()
            .ctx("capture_end after the out-of-memory error (torch.cuda.graph's __exit__)")?;
    }
    expect_capturing(b, &s, false, "s after capture_end")?;
    backend_still_works(b, &s, "after the out-of-memory error in a capture")
}

/// PyTorch's `fn()` of 11.27: `x = zeros(2000); y = x + x + x`.
fn zeros_times_three<B: Backend>(b: &B) -> accel_graph_api::Result<B::Buffer<f32>> {
    let x = full(b, 2000, 0.0)?;
    let two = add(b, &x, &x)?;
    add(b, &two, &x)
}

/// 11.27: in modes `thread_local` and `relaxed`, a capture of `fn()` during which another
/// thread allocates and frees 1024 bytes on a stream of its own — after `empty_cache`, so the
/// allocation reaches the device — raises nothing: neither the body nor `capture_end`. (The
/// `global` variant is commented out in PyTorch because it poisons the process; here it is
/// the typed refusal that case 5.06e checks.)
pub(crate) fn cuda_graph_error_options<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (ambient_stream, _current) = ambient(b)?;
    for mode in [CaptureErrorMode::ThreadLocal, CaptureErrorMode::Relaxed] {
        let name = mode.as_str();
        let mut g = new_graph(b, GraphOptions::new().capture_error_mode(mode))?;
        b.synchronize().ctx("synchronize")?;
        let stream = b.new_stream().ctx("new_stream")?;
        wait_stream(b, &stream, &ambient_stream).ctx("stream.wait_stream(ambient)")?;
        {
            // Warm-up: fn() eagerly on the capture stream.
            let _on_stream = on_stream(b, &stream)?;
            drop(zeros_times_three(b).ctx("fn() eagerly")?);
        }
        b.stream_synchronize(&stream).ctx("stream.synchronize()")?;
        wait_stream(b, &ambient_stream, &stream).ctx("ambient.wait_stream(stream)")?;
        b.synchronize().ctx("synchronize")?;
        // `torch.cuda.graph(graph, stream=stream, capture_error_mode=mode)`: synchronize and
        // empty the cache, then capture on `stream`.
        b.synchronize().ctx("synchronize")?;
        b.empty_cache().ctx("empty_cache")?;
        let mut thread_alloc = None;
        let captured = b.capture_on(&stream, &mut g, || {
            let out = zeros_times_three(b)?;
            thread_alloc = Some(on_other_thread(
                "raw_malloc",
                || -> accel_graph_api::Result<()> {
                    let own = b.new_stream()?;
                    let _on_own = b.use_stream(&own)?;
                    // `caching_allocator_alloc(1024)`, then `caching_allocator_delete`.
                    let mem = b.alloc::<f32>(256)?;
                    drop(mem);
                    Ok(())
                },
            ));
            Ok(out)
        });
        let out = captured.map_err(|e| {
            format!("mode {name}: the capture raised while another thread allocated: {e:?}: {e}")
        })?;
        match thread_alloc {
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(e))) => {
                return Err(format!(
                    "mode {name}: another thread's allocation during the capture failed: \
                     {e:?}: {e}"
                ));
            }
            Some(Err(panic)) => return Err(format!("mode {name}: {panic}")),
            None => return Err(format!("mode {name}: the capture body did not run")),
        }
        drop(out);
    }
    Ok(())
}

/// 11.33: a host synchronization inside a capture is refused. PyTorch's child process reads
/// `perm[0]` (a device scalar) with `.item()` to index `b` — a device-to-host copy that
/// synchronizes — inside `torch.cuda.graph(g)`, and must exit with an error. Here the read is
/// a `download` of `perm` on the capturing stream: [`GraphError::UnsafeDuringCapture`] (no
/// capture mode allows it), the scoped capture is discarded, nothing captured ran, and the
/// backend works on.
pub(crate) fn cuda_graph_tensor_item_not_allowed<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let (_ambient, _current) = ambient(b)?;
    // `rand(500, 500)` twice and `randint(0, 500, (500,))`: any values do.
    let a = b
        .alloc_from(&ramp(500 * 500, 1e-6))
        .ctx("a = rand(500, 500)")?;
    let other = b
        .alloc_from(&ramp(500 * 500, 2e-6))
        .ctx("b = rand(500, 500)")?;
    let perm: Vec<f32> = (0..500).map(|i| ((i * 7) % 500) as f32).collect();
    let perm = b.alloc_from(&perm).ctx("perm = randint(0, 500, (500,))")?;
    let a_before = read(b, &a)?;
    let s = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(
        b,
        GraphOptions::new().capture_error_mode(CaptureErrorMode::Global),
    )?;
    let result = b.capture_on(&s, &mut g, || {
        // `idx = perm[0]; a[0] *= b[idx]`: indexing by a device scalar reads it on the host.
        let idx = b.download(&perm)?[0];
        b.axpy(&a, idx, &other)
    });
    let error = expect_err!(
        result,
        GraphError::UnsafeDuringCapture {
            conflict: CaptureConflict::EveryMode,
            ..
        },
        "a host read of perm[0] on the capturing stream"
    );
    expect_state(
        &g,
        GraphState::Empty,
        &format!("after the refused read ({error})"),
    )?;
    expect_capturing(b, &s, false, "s after the refused read")?;
    ensure!(
        read(b, &a)? == a_before,
        "a changed: work of the discarded capture ran"
    );
    backend_still_works(b, &s, "after a host read was refused in a capture")
}
