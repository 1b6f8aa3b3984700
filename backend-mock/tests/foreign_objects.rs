//! Objects made outside the backend and handed to it (the driver layer's `wrap_stream` and
//! `adopt_block`, on which the CUDA backend's cudarc interop is built) follow the backend's
//! rules: one backend stream per raw stream, captures through any wrapper kept alive, adopted
//! memory kept by graphs and freed once unused. The mock's sanitizer fails a replay that would
//! touch freed memory, so a replay that succeeds proves the keep-alive.

use std::sync::Arc;

use accel_graph_api::prelude::*;
use accel_graph_driver::api::{DriverMemory, DriverStreams};
use accel_graph_mock::MockBackend;

#[test]
fn a_raw_stream_wrapped_twice_is_one_backend_stream() -> Result<(), GraphError> {
    let b = MockBackend::new();
    let raw = b
        .driver()
        .create_stream()
        .map_err(|e| GraphError::ArgumentMismatch(format!("the mock made no stream: {e}")))?;
    let first = b.wrap_stream(Arc::clone(&raw))?;
    let second = b.wrap_stream(raw)?;
    assert_eq!(first, second);
    assert!(!first.is_default());
    // The device's default stream is the backend's.
    assert_eq!(
        b.wrap_stream(b.driver().default_stream())?,
        b.default_stream()
    );

    // A capture begun through one wrapper covers work issued through the other: its buffer,
    // dropped before replay, is kept alive (the sanitizer would fail the replay otherwise).
    let out = b.alloc_from(&[0.0f32; 4])?;
    let mut graph = b.graph(GraphOptions::new())?;
    {
        let x = b.alloc_from(&[1.0f32, 2.0, 3.0, 4.0])?;
        b.capture_on(&first, &mut graph, || {
            let _other = b.use_stream(&second)?;
            b.add_scalar(&x, 1.0)?;
            b.copy(&out, &x)
        })?;
    }
    graph.replay()?;
    b.synchronize()?;
    assert_eq!(b.download(&out)?, vec![2.0, 3.0, 4.0, 5.0]);
    Ok(())
}

#[test]
fn wrappers_of_dropped_streams_are_forgotten() -> Result<(), GraphError> {
    let b = MockBackend::new();
    let raw = b
        .driver()
        .create_stream()
        .map_err(|e| GraphError::ArgumentMismatch(format!("the mock made no stream: {e}")))?;
    let key = {
        let wrapped = b.wrap_stream(Arc::clone(&raw))?;
        wrapped.key()
    };
    // The wrapper is gone: wrapping again makes a new one over the same raw stream.
    let again = b.wrap_stream(raw)?;
    assert_eq!(again.key(), key);
    let x = b.alloc_from(&[1.0f32; 3])?;
    let _current = b.use_stream(&again)?;
    b.scale(&x, 2.0)?;
    assert_eq!(b.download(&x)?, vec![2.0; 3]);
    Ok(())
}

#[test]
fn adopted_memory_is_a_buffer_kept_by_graphs_and_freed_when_unused() -> Result<(), GraphError> {
    let b = MockBackend::new();
    let block = b
        .driver()
        .malloc(4 * std::mem::size_of::<f32>())
        .map_err(|e| GraphError::ArgumentMismatch(format!("the mock allocated nothing: {e}")))?;
    // SAFETY: the block was just allocated by this backend's driver, holds 4 f32s, and
    // nothing else owns it.
    let adopted = unsafe { b.adopt_block::<f32>(block, 4) }?;
    assert_eq!(adopted.len(), 4);
    assert_eq!(b.memory_stats().live_buffers, 1);
    assert_eq!(b.memory_stats().allocated_bytes, 16);
    b.upload(&adopted, &[1.0, 2.0, 3.0, 4.0])?;

    let out = b.alloc_from(&[0.0f32; 4])?;
    let stream = b.new_stream()?;
    let mut graph = b.graph(GraphOptions::new())?;
    b.capture_on(&stream, &mut graph, || {
        b.scale(&adopted, 10.0)?;
        b.copy(&out, &adopted)
    })?;
    drop(adopted);
    // Held by the graph, not freed.
    assert_eq!(b.memory_stats().graph_held_bytes, 16);
    let _current = b.use_stream(&stream)?;
    graph.replay()?;
    assert_eq!(b.download(&out)?, vec![10.0, 20.0, 30.0, 40.0]);
    drop(graph);
    drop(out);
    b.synchronize()?;
    let stats = b.memory_stats();
    assert_eq!(
        (stats.live_buffers, stats.reserved_bytes),
        (0, 0),
        "{stats:?}"
    );
    Ok(())
}

#[test]
fn adopting_more_elements_than_the_address_space_holds_is_refused() {
    let b = MockBackend::new();
    let Ok(block) = b.driver().malloc(4) else {
        panic!("the mock allocated nothing")
    };
    // SAFETY: refused before the block is used (a size that overflows); the block is then
    // never freed by the backend, which a mock block tolerates.
    let refused = unsafe { b.adopt_block::<f32>(block, usize::MAX) };
    assert!(matches!(refused, Err(GraphError::OutOfMemory { .. })));
}
