//! The sanitizer: a replay node that touches memory returned to the device since capture fails
//! with `DanglingBuffer` (on a GPU that is silent memory corruption).
//!
//! Work issued through the `Backend` API is kept alive by its graph, so the sanitizer never
//! fires for it: dropping a captured buffer is harmless, and the memory stays reserved until
//! the graph is reset. What the sanitizer is for is work the backend cannot track — commands
//! issued on a stream's raw handle through the driver, as users' own kernels are.

use std::sync::{Arc, Mutex};

use accel_graph_api::{MemoryStats, PortableOp, prelude::*};
use accel_graph_driver::api::{DriverOps, Region};
use accel_graph_mock::MockBackend;

#[test]
fn a_dropped_captured_buffer_is_kept_alive_by_its_graph() -> Result<()> {
    let b = MockBackend::new();
    let baseline = b.memory_stats();
    let x = b.alloc_from(&[0.0; 4])?;
    let y = b.alloc_from(&[0.0f32; 4])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        b.copy(&y, &x)
    })?;
    g.replay()?;
    drop(y);
    // Before the keep-alive this replay failed with DanglingBuffer; now the graph holds y's
    // memory, so it runs and writes there.
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![2.0; 4]);
    let held = b.memory_stats();
    assert_eq!(held.live_buffers, 1);
    assert_eq!(held.graph_held_bytes, 16, "y's block, held by the graph");
    assert_eq!(held.reserved_bytes, 32);
    g.reset();
    drop(x);
    assert_eq!(
        b.memory_stats(),
        baseline,
        "everything returned after reset"
    );
    Ok(())
}

#[test]
fn a_graph_keeps_the_pool_block_of_another_graph_it_used() -> Result<()> {
    let b = MockBackend::new();
    let s = b.new_stream()?;
    // g1 allocates `t` from its private pool during capture.
    let mut g1 = b.graph(GraphOptions::new())?;
    let t = b.capture_on(&s, &mut g1, || {
        let t = b.alloc(4)?;
        b.fill(&t, 2.0)?;
        Ok(t)
    })?;
    // g2 uses `t` (memory of g1's pool).
    let mut g2 = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g2, || b.add_scalar(&t, 1.0))?;
    drop(t); // back to g1's pool, which g1 still holds
    g2.replay()?;
    g1.reset(); // g1's pool has no holder now, but g2 still uses the block
    g2.replay()?;
    assert!(b.memory_stats().graph_held_bytes > 0);
    drop(g2);
    assert_eq!(b.memory_stats(), MemoryStats::default());
    Ok(())
}

#[test]
fn graph_own_pool_temporaries_stay_valid() -> Result<()> {
    let b = MockBackend::new();
    let out = b.alloc_from(&[0.0; 2])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        let tmp = b.alloc(2)?;
        b.fill(&tmp, 3.0)?;
        b.axpy(&out, 2.0, &tmp)
        // tmp dropped here: back to the graph's pool, still reserved
    })?;
    g.replay()?;
    g.replay()?;
    assert_eq!(b.download(&out)?, vec![12.0; 2]);
    Ok(())
}

/// Raw work: an op issued through the driver on the capturing stream's raw handle is
/// recorded, but the backend does not know which memory it touches and cannot keep it alive.
#[test]
fn raw_work_on_a_dropped_buffer_is_dangling() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 4])?;
    let y = b.alloc_from(&[0.0f32; 4])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.add_scalar(&x, 1.0)?; // node 0, through the API: kept alive
        // node 1, on the raw stream: y is not tracked
        let raw = PortableOp::Copy {
            dst: Region {
                block: y.block(),
                offset: 0,
                len: y.len(),
            },
            src: Region {
                block: x.block(),
                offset: 0,
                len: x.len(),
            },
        };
        // SAFETY: the test deliberately issues untracked work on the capturing stream (the
        // capture does not keep the block alive) so that the mock's sanitizer can catch the
        // replay that touches freed memory; the mock checks every access, so no UB happens.
        unsafe { b.driver().launch_op(raw, s.raw()) }.map_err(|e| GraphError::Unsupported {
            what: format!("raw launch failed: {e:?}"),
        })
    })?;
    g.replay()?;
    assert_eq!(b.download(&y)?, vec![1.0; 4]);
    let y_address = y.device_address();
    drop(y);
    match g.replay() {
        Err(GraphError::DanglingBuffer {
            address,
            node,
            label,
        }) => {
            assert_eq!(address, y_address);
            assert_eq!(node, 1);
            assert!(label.contains("copy"), "{label}");
        }
        other => panic!("expected DanglingBuffer, got {other:?}"),
    }
    // The replay stopped at the bad node: node 0 ran (x = 2), nothing after it.
    assert_eq!(b.download(&x)?, vec![2.0; 4]);
    Ok(())
}

/// The same raw work, declared with `track_raw_use`: the capture keeps the memory, so the
/// replays after the drop write it safely.
#[test]
fn raw_work_declared_with_track_raw_use_is_kept_alive() -> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0f32; 4])?;
    let y = b.alloc_from(&[0.0f32; 4])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        let raw = PortableOp::Copy {
            dst: Region {
                block: y.block(),
                offset: 0,
                len: y.len(),
            },
            src: Region {
                block: x.block(),
                offset: 0,
                len: x.len(),
            },
        };
        assert!(y.as_ref().track_raw_use(s.raw())?, "the stream captures");
        assert!(x.as_ref().track_raw_use(s.raw())?);
        // SAFETY: both blocks are live and hold 4 elements, and the capture keeps them
        // (track_raw_use above) for as long as the graph can replay.
        unsafe { b.driver().launch_op(raw, s.raw()) }.map_err(|e| GraphError::Unsupported {
            what: format!("raw launch failed: {e:?}"),
        })
    })?;
    assert!(!y.as_ref().track_raw_use(s.raw())?, "the capture ended");
    drop(y);
    g.replay()?;
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![2.0; 4]);
    Ok(())
}

/// A host node that drops a buffer mid-replay: the device free waits until the callback has
/// returned (CUDA permits no `cuMemFree` inside a host function), so the replay that ran it
/// completes; the next replay frees it first, and the sanitizer catches the untracked raw work
/// on it at the node that touches it.
#[test]
fn a_buffer_a_host_node_drops_is_freed_after_the_callback_and_raw_work_on_it_is_caught()
-> Result<()> {
    let b = MockBackend::new();
    let x = b.alloc_from(&[1.0; 4])?;
    let y = b.alloc_from(&[0.0f32; 4])?;
    let (y_address, y_block) = (y.device_address(), y.block().clone());
    let slot = Arc::new(Mutex::new(Some(y)));
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    let held = Arc::clone(&slot);
    b.capture_on(&s, &mut g, || {
        // Node 0: drops the only handle of y while the replay runs.
        b.host_callback(Arc::new(move || {
            drop(held.lock().unwrap().take());
        }))?;
        // Node 1, on the raw stream: copies into y, which the backend does not track.
        let raw = PortableOp::Copy {
            dst: Region {
                block: &y_block,
                offset: 0,
                len: 4,
            },
            src: Region {
                block: x.block(),
                offset: 0,
                len: x.len(),
            },
        };
        // SAFETY: the test deliberately issues untracked work on the capturing stream (the
        // capture does not keep the block alive) so that the mock's sanitizer can catch the
        // replay that touches freed memory; the mock checks every access, so no UB happens.
        unsafe { b.driver().launch_op(raw, s.raw()) }.map_err(|e| GraphError::Unsupported {
            what: format!("raw launch failed: {e:?}"),
        })
    })?;
    assert!(
        !y_block.is_released(),
        "y is alive until the replay drops it"
    );
    g.replay()?;
    assert!(slot.lock().unwrap().is_none(), "the host node ran");
    assert!(
        !y_block.is_released(),
        "no device free inside a host callback: it waits for the next call"
    );
    assert_eq!(b.counters().frees_in_host_callbacks, 0);
    match g.replay() {
        Err(GraphError::DanglingBuffer {
            address,
            node,
            label,
        }) => {
            assert_eq!(address, y_address);
            assert_eq!(node, 1, "caught at the node that touches y");
            assert!(label.contains("copy"), "{label}");
        }
        other => panic!("expected DanglingBuffer on the second replay, got {other:?}"),
    }
    assert!(y_block.is_released());
    Ok(())
}
