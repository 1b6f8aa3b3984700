//! Buffers dropped inside host callbacks: CUDA permits no runtime call in a host function, so
//! the device free must wait until the callback has returned. The mock refuses a free inside a
//! host function as CUDA does and counts it, so these tests fail if a free ever reaches it.

use std::sync::{Arc, Mutex};

use accel_graph_api::prelude::*;
use accel_graph_mock::{MockBackend, MockBuffer};

/// A host callback that drops whatever buffer `slot` holds.
fn dropper(slot: &Arc<Mutex<Option<MockBuffer>>>) -> accel_graph_api::HostCallback {
    let slot = Arc::clone(slot);
    Arc::new(move || drop(slot.lock().unwrap().take()))
}

#[test]
fn a_buffer_dropped_in_an_eager_callback_is_freed_after_it() -> Result<()> {
    let b = MockBackend::new();
    let baseline = b.memory_stats();
    let slot = Arc::new(Mutex::new(Some(b.alloc(1 << 20)?)));
    b.host_callback(dropper(&slot))?;
    b.synchronize()?;
    assert!(slot.lock().unwrap().is_none(), "the callback ran");
    assert_eq!(b.counters().frees_in_host_callbacks, 0);
    b.empty_cache()?;
    assert_eq!(b.memory_stats(), baseline);
    Ok(())
}

#[test]
fn a_buffer_dropped_in_a_replayed_callback_is_freed_by_the_next_call() -> Result<()> {
    let b = MockBackend::new();
    let stream = b.new_stream()?;
    let slot = Arc::new(Mutex::new(None));
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&stream, &mut g, || b.host_callback(dropper(&slot)))?;
    let baseline = b.memory_stats();
    for _ in 0..3 {
        // A plain allocation (not graph memory), dropped by the next replay's callback.
        *slot.lock().unwrap() = Some(b.alloc(1 << 20)?);
        let _current = b.use_stream(&stream)?;
        g.replay()?;
    }
    b.synchronize()?;
    assert_eq!(b.counters().frees_in_host_callbacks, 0);
    b.empty_cache()?;
    assert_eq!(b.memory_stats(), baseline);
    Ok(())
}
