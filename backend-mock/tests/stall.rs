//! Stalled streams: a stand-in for a long-running kernel. Work issued on a stalled stream
//! queues until it is resumed; calls that would wait for it fail instead of blocking forever.

use accel_graph_api::prelude::*;
use accel_graph_mock::{MockBackend, MockConfig};

/// A backend for tests that look at memory while a stalled stream's queued work has yet to
/// write it, to show that it has not run. On a GPU that look is a data race with the
/// long-running work, which the race sanitizer reports when the work runs (on resume; see
/// `tests/races.rs`), so these tests turn it off.
fn peeking_backend() -> MockBackend {
    MockBackend::with_config(MockConfig {
        race_sanitizer: false,
        ..MockConfig::default()
    })
    .unwrap()
}

fn driver_name(result: Result<()>) -> Option<String> {
    match result {
        Err(GraphError::Driver { name, .. }) => Some(name),
        _ => None,
    }
}

#[test]
fn queued_work_runs_in_order_on_resume() -> Result<()> {
    let b = peeking_backend();
    let x = b.alloc_from(&[1.0; 3])?;
    let side = b.new_stream()?;
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        b.scale(&x, 3.0)?;
        b.add_scalar(&x, 1.0)?;
    }
    assert_eq!(b.download(&x)?, vec![1.0; 3], "nothing ran yet");
    assert_eq!(b.counters().eager_ops, 0);
    b.resume_stream(&side)?;
    assert_eq!(b.download(&x)?, vec![4.0; 3], "scale, then add");
    b.resume_stream(&side)?; // resuming a running stream is a no-op
    Ok(())
}

#[test]
fn waiting_for_a_stalled_stream_fails_instead_of_blocking() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0])?;
    let side = b.new_stream()?;
    b.stall_stream(&side)?;
    let not_ready = Some("CUDA_ERROR_NOT_READY".to_owned());
    assert_eq!(driver_name(b.synchronize()), not_ready);
    assert_eq!(driver_name(b.stream_synchronize(&side)), not_ready);
    {
        let _on_side = b.use_stream(&side)?;
        assert_eq!(driver_name(b.download(&x).map(drop)), not_ready);
    }
    // Other streams still work and can be waited for.
    b.stream_synchronize(&b.default_stream())?;
    assert_eq!(b.download(&x)?, vec![1.0]);
    b.resume_stream(&side)?;
    b.synchronize()?;
    b.stream_synchronize(&side)?;
    Ok(())
}

#[test]
fn an_event_recorded_on_a_stalled_stream_stays_pending() -> Result<()> {
    let b = MockBackend::new();
    let side = b.new_stream()?;
    let event = b.new_event()?;
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        b.record_event(&event)?;
    }
    assert!(!b.event_query(&event)?);
    b.resume_stream(&side)?;
    assert!(b.event_query(&event)?);
    Ok(())
}

#[test]
fn a_replay_on_a_stalled_stream_queues_its_nodes() -> Result<()> {
    let b = peeking_backend();
    let x = b.alloc_from(&[0.0; 2])?;
    let (capture, side) = (b.new_stream()?, b.new_stream()?);
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&capture, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        b.scale(&x, 10.0)
    })?;
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        g.replay()?;
    }
    assert_eq!(b.download(&x)?, vec![0.0; 2]);
    b.resume_stream(&side)?;
    assert_eq!(b.download(&x)?, vec![10.0; 2]);
    Ok(())
}

/// Eager work queued on a stalled stream and a buffer dropped meanwhile: without
/// `record_stream` the memory goes back at once and the sanitizer catches the queued op
/// touching it; with `record_stream` the memory waits for the stream.
#[test]
fn record_stream_keeps_memory_for_queued_work() -> Result<()> {
    let b = MockBackend::new();
    let side = b.new_stream()?;

    let x = b.alloc_from(&[1.0; 4])?;
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        b.add_scalar(&x, 1.0)?;
    }
    drop(x); // no record_stream: freed while the queued add still uses it
    assert!(matches!(
        b.resume_stream(&side),
        Err(GraphError::DanglingBuffer { .. })
    ));

    let baseline = b.memory_stats();
    let y = b.alloc_from(&[1.0; 4])?;
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        b.add_scalar(&y, 1.0)?;
    }
    b.record_stream(&y, &side)?;
    drop(y);
    assert!(b.memory_stats().reserved_bytes > baseline.reserved_bytes);
    b.resume_stream(&side)?;
    b.stream_synchronize(&side)?;
    assert_eq!(
        b.memory_stats(),
        baseline,
        "freed once the stream passed the drop"
    );
    Ok(())
}

#[test]
fn stalling_a_stream_of_another_instance_is_refused() {
    let (a, b) = (MockBackend::new(), MockBackend::new());
    let theirs = b.new_stream().unwrap();
    assert!(matches!(
        a.stall_stream(&theirs),
        Err(GraphError::ForeignObject { what: "stream" })
    ));
    assert!(matches!(
        a.resume_stream(&theirs),
        Err(GraphError::ForeignObject { what: "stream" })
    ));
}
