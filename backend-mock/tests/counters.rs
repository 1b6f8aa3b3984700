//! Counters: eager ops, captured ops, replays, nodes replayed, allocations, instantiations.

use std::sync::Arc;

use accel_graph_api::prelude::*;
use accel_graph_mock::{MockBackend, MockCounters};

#[test]
fn counters_follow_the_work() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 3])?;
    let y = b.alloc(3)?;
    b.fill(&y, 1.0)?;
    b.axpy(&x, 2.0, &y)?;
    b.host_callback(Arc::new(|| {}))?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        let _tmp = b.alloc::<f32>(3)?;
        b.add_scalar(&x, 1.0)?;
        b.scale(&x, 2.0)?;
        b.copy(&y, &x)
    })?;
    assert_eq!(b.counters().instantiations, 0, "keep_graph: not yet");
    for _ in 0..4 {
        g.replay()?;
    }
    assert_eq!(
        b.counters(),
        MockCounters {
            eager_ops: 3,
            captured_ops: 3,
            replays: 4,
            nodes_replayed: 12,
            allocations: 3,
            instantiations: 1,
            frees_during_capture: 0,
            frees_in_host_callbacks: 0,
            unsafe_calls_meeting_captures: 0,
            data_races: 0,
            graph_updates: 0,
            node_updates: 0,
            conditional_bodies_run: 0,
        }
    );
    g.instantiate()?; // explicit re-instantiation counts too
    assert_eq!(b.counters().instantiations, 2);
    let clone = b.clone();
    clone.reset_counters();
    assert_eq!(b.counters(), MockCounters::default());
    Ok(())
}

/// Buffers dropped while a capture runs (a temporary of the capture, a plain buffer of another
/// thread's work) reach the device only after the capture: no free breaks it.
#[test]
fn no_device_free_happens_during_a_capture() -> Result<()> {
    let b = MockBackend::new();
    let plain = b.alloc::<f32>(64)?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::Relaxed))?;
    b.capture_on(&s, &mut g, || {
        let tmp = b.alloc(64)?;
        b.fill(&tmp, 1.0)?;
        drop(tmp);
        std::thread::scope(|t| {
            t.spawn(|| drop(plain));
        });
        Ok(())
    })?;
    assert_eq!(b.counters().frees_during_capture, 0);
    drop(g);
    assert_eq!(b.memory_stats(), accel_graph_api::MemoryStats::default());
    Ok(())
}

#[test]
fn an_empty_graph_replays_no_node() -> Result<()> {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on_infallible(&s, &mut g, || ())?;
    g.replay()?;
    let c = b.counters();
    assert_eq!((c.replays, c.nodes_replayed), (1, 0));
    Ok(())
}

#[test]
fn counters_are_per_instance() -> Result<()> {
    let a = MockBackend::new();
    let b = MockBackend::new();
    let x = a.alloc_from(&[0.0])?;
    a.add_scalar(&x, 1.0)?;
    assert_eq!(a.counters().eager_ops, 1);
    assert_eq!(b.counters(), MockCounters::default());
    Ok(())
}
