//! §5.1, §5.11, §5.12: capture records without executing; empty captures; replay on any
//! stream.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, GraphState, NodeKind};

use crate::{
    Target,
    check::{
        CaseResult, Ctx, capture_add_one, ensure, expect_all, expect_capturing, expect_state,
        new_graph, on_stream, ramp, read, replay_on,
    },
};

/// 5.01: capturing `x += 1` on zeros leaves x at 0; k replays give k.
pub(crate) fn records_not_executes<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 16]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    {
        let _current = on_stream(b, &stream)?;
        expect_state(&g, GraphState::Empty, "new graph")?;
        g.capture_begin().ctx("capture_begin")?;
        expect_state(&g, GraphState::Capturing, "after capture_begin")?;
        expect_capturing(b, &stream, true, "after capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar during capture")?;
        g.capture_end().ctx("capture_end")?;
        expect_capturing(b, &stream, false, "after capture_end")?;
        expect_state(
            &g,
            GraphState::Ready,
            "after capture_end (keep_graph=false)",
        )?;
    }
    expect_all(b, &x, 0.0, "after capture (captured work must not run)")?;
    for k in 1..=3 {
        replay_on(b, &stream, &mut g)?;
        expect_all(b, &x, k as f32, &format!("after {k} replays of x += 1"))?;
    }
    Ok(())
}

/// 5.01b: a graph captures memory, not values: host uploads between replays are seen by the
/// next replay.
pub(crate) fn reads_current_contents<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&ramp(8, 1.0)).ctx("alloc_from")?;
    let y = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || b.copy(&y, &x))
        .ctx("capture of y = x")?;
    expect_all(b, &y, 0.0, "after capture of y = x")?;
    for round in 1..=2 {
        let data = ramp(8, round as f32 * 10.0);
        b.upload(&x, &data).ctx("upload")?;
        replay_on(b, &stream, &mut g)?;
        let got = read(b, &y)?;
        ensure!(
            got == data,
            "replay {round} of y = x: y is {got:?}, expected the uploaded {data:?}"
        );
    }
    Ok(())
}

/// 5.01c: a captured host callback does not run at capture, and runs once per replay.
pub(crate) fn host_callback_per_replay<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    b.capture_on(&stream, &mut g, || {
        b.host_callback(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }))
    })
    .ctx("capture of a host callback")?;
    b.synchronize().ctx("synchronize")?;
    ensure!(
        calls.load(Ordering::SeqCst) == 0,
        "the host callback ran during capture ({} calls)",
        calls.load(Ordering::SeqCst)
    );
    let topology = g.nodes().ctx("nodes()")?;
    ensure!(
        topology.count(NodeKind::Host) == 1,
        "one captured host callback should give one Host node, got {:?}",
        topology.nodes
    );
    for _ in 0..3 {
        replay_on(b, &stream, &mut g)?;
    }
    b.synchronize().ctx("synchronize")?;
    ensure!(
        calls.load(Ordering::SeqCst) == 3,
        "3 replays ran the host callback {} times",
        calls.load(Ordering::SeqCst)
    );
    Ok(())
}

/// 5.01d: a host callback may make another stream current (its own thread's current stream)
/// while it runs, eagerly and during a replay; the caller's current stream is unchanged.
pub(crate) fn host_callback_switches_streams<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let stream = b.new_stream().ctx("new_stream")?;
    let side = b.new_stream().ctx("new_stream")?;
    let switched = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let callback = {
        let (b, side) = (b.clone(), side.clone());
        let (switched, failures) = (Arc::clone(&switched), Arc::clone(&failures));
        Arc::new(move || match b.use_stream(&side) {
            Ok(_guard) => {
                switched.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("use_stream in a host callback: {e}")),
        })
    };
    {
        let _current = on_stream(b, &stream)?;
        b.host_callback(callback.clone())
            .ctx("eager host callback")?;
        b.stream_synchronize(&stream).ctx("stream_synchronize")?;
    }
    let mut g = new_graph(b, GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || b.host_callback(callback))
        .ctx("capture of a host callback")?;
    for _ in 0..2 {
        replay_on(b, &stream, &mut g)?;
    }
    b.synchronize().ctx("synchronize")?;
    let failures = failures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    ensure!(failures.is_empty(), "{}", failures.join("; "));
    ensure!(
        switched.load(Ordering::SeqCst) == 3,
        "the callback switched streams {} times, expected 3 (1 eager + 2 replays)",
        switched.load(Ordering::SeqCst)
    );
    Ok(())
}

/// 5.11: an empty capture succeeds, its replay changes nothing, and `capture_end` logs a
/// warning.
pub(crate) fn empty_capture<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[5.0; 4]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new().keep_graph(true))?;
    let (captured, warned) = crate::warnings::count_warnings(|| {
        b.capture_on_infallible(&stream, &mut g, || ())
            .ctx("empty capture")
    });
    captured?;
    ensure!(
        warned > 0,
        "capture_end of an empty capture should log a warning (as PyTorch does)"
    );
    expect_state(
        &g,
        GraphState::Captured,
        "after an empty capture (keep_graph)",
    )?;
    let topology = g.nodes().ctx("nodes()")?;
    ensure!(
        topology.is_empty(),
        "an empty capture has nodes: {:?}",
        topology.nodes
    );
    replay_on(b, &stream, &mut g)?;
    replay_on(b, &stream, &mut g)?;
    expect_state(&g, GraphState::Ready, "after replay")?;
    expect_all(b, &x, 5.0, "after replays of an empty graph")
}

/// 5.12: a graph captured on one stream replays correctly on another one, and on the default
/// stream.
pub(crate) fn replay_on_other_stream<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 32]).ctx("alloc_from")?;
    let capture_stream = b.new_stream().ctx("new_stream")?;
    let other = b.new_stream().ctx("new_stream")?;
    let mut g = new_graph(b, GraphOptions::new())?;
    capture_add_one(b, &capture_stream, &mut g, &x)?;
    replay_on(b, &other, &mut g)?;
    expect_all(b, &x, 1.0, "after a replay on another stream")?;
    replay_on(b, &b.default_stream(), &mut g)?;
    expect_all(b, &x, 2.0, "after a replay on the default stream")?;
    replay_on(b, &capture_stream, &mut g)?;
    expect_all(b, &x, 3.0, "after a replay on the capture stream")
}
