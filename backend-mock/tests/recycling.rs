//! Recycled device memory (`MockConfig::recycle_memory`, what the CUDA and HIP backends do):
//! a block nothing uses any more is kept and handed out again — but only after a device-wide
//! wait that began after it was let go, so work still queued on it never meets its next
//! owner.

use accel_graph_api::{MemoryStats, prelude::*};
use accel_graph_mock::{MockBackend, MockConfig};

fn recycling(config: MockConfig) -> MockBackend {
    MockBackend::with_config(MockConfig {
        recycle_memory: true,
        ..config
    })
    .unwrap()
}

#[test]
fn a_dropped_buffer_is_reused_only_after_a_device_wide_wait() -> Result<()> {
    let b = recycling(MockConfig::default());
    let x = b.alloc::<f32>(256)?;
    let address = x.device_address();
    drop(x);
    assert_eq!(
        b.cached_bytes(),
        1024,
        "kept, outside the memory statistics"
    );
    assert_eq!(b.memory_stats(), MemoryStats::default());
    let y = b.alloc::<f32>(256)?;
    assert_ne!(
        y.device_address(),
        address,
        "quarantined until a device-wide wait"
    );
    b.synchronize()?;
    let z = b.alloc::<f32>(250)?;
    assert_eq!(z.device_address(), address, "ready after the wait: reused");
    assert_eq!(b.cached_bytes(), 0);
    drop((y, z));
    b.empty_cache()?;
    assert_eq!(b.cached_bytes(), 0);
    Ok(())
}

/// The case `cuMemFree` covers by waiting for the device: a buffer dropped while work queued
/// on another stream (a long kernel: a stalled stream here) still uses it, without
/// `record_stream`. Kept, not freed: the queued work runs on live memory, and no allocation
/// gets the block until a device-wide wait has seen that work finish.
#[test]
fn work_queued_on_a_dropped_buffer_never_meets_the_next_owner() -> Result<()> {
    let b = recycling(MockConfig::default());
    let side = b.new_stream()?;
    let x = b.alloc_from(&[1.0f32; 4])?;
    let address = x.device_address();
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        b.add_scalar(&x, 1.0)?;
    }
    drop(x);
    // A device-wide wait that cannot complete recycles nothing.
    assert!(b.synchronize().is_err(), "a stalled stream never finishes");
    let y = b.alloc_from(&[5.0f32; 4])?;
    assert_ne!(y.device_address(), address);
    // The queued add runs on the kept block: no dangling access, y untouched.
    b.resume_stream(&side)?;
    assert_eq!(b.download(&y)?, vec![5.0; 4]);
    b.synchronize()?;
    let z = b.alloc::<f32>(4)?;
    assert_eq!(z.device_address(), address);
    assert!(b.race_reports().is_empty(), "{:?}", b.race_reports());
    Ok(())
}

#[test]
fn a_full_quarantine_waits_once_for_many_blocks() -> Result<()> {
    let b = recycling(MockConfig::default());
    let buffers = (0..600)
        .map(|_| b.alloc::<f32>(64))
        .collect::<Result<Vec<_>>>()?;
    let addresses: Vec<u64> = buffers.iter().map(|x| x.device_address()).collect();
    drop(buffers);
    // Every 64th block let go made the allocator wait for the device: those before are ready
    // now, without any synchronize of the program's own.
    let again = b.alloc::<f32>(64)?;
    assert!(addresses.contains(&again.device_address()));
    Ok(())
}

#[test]
fn a_refused_allocation_gives_kept_blocks_back_and_tries_again() -> Result<()> {
    let b = recycling(MockConfig {
        memory_capacity: Some(4096),
        ..MockConfig::default()
    });
    drop(b.alloc::<f32>(768)?);
    assert_eq!(b.cached_bytes(), 3072);
    // Still quarantined, and the device has no room for a second block: the kept one goes
    // back to the device first.
    let x = b.alloc::<f32>(768)?;
    assert_eq!(b.cached_bytes(), 0);
    drop(x);
    b.empty_cache()?;
    assert_eq!(b.cached_bytes(), 0);
    Ok(())
}

/// A refused allocation never gives the device a kept block that queued work still uses:
/// the allocator waits for the device first, and a wait that cannot complete (a stalled
/// stream) leaves the block kept, so the allocation is `OutOfMemory` and the queued work later
/// runs on live memory (no `DanglingBuffer`).
#[test]
fn a_refused_allocation_keeps_blocks_queued_work_still_uses() -> Result<()> {
    let b = recycling(MockConfig {
        memory_capacity: Some(4096),
        ..MockConfig::default()
    });
    let side = b.new_stream()?;
    let x = b.alloc_from(&[1.0f32; 768])?;
    let address = x.device_address();
    b.stall_stream(&side)?;
    {
        let _on_side = b.use_stream(&side)?;
        b.add_scalar(&x, 1.0)?;
    }
    drop(x);
    assert!(matches!(
        b.alloc::<f32>(768),
        Err(GraphError::OutOfMemory { .. })
    ));
    assert!(matches!(
        b.empty_cache().and_then(|()| b.alloc::<f32>(768)),
        Err(GraphError::OutOfMemory { .. })
    ));
    assert_eq!(
        b.cached_bytes(),
        3072,
        "still kept: the add is queued on it"
    );
    b.resume_stream(&side)?;
    b.synchronize()?;
    assert!(b.race_reports().is_empty(), "{:?}", b.race_reports());
    let y = b.alloc::<f32>(768)?;
    assert_eq!(y.device_address(), address, "ready after the wait: reused");
    Ok(())
}

/// An eager step making and dropping temporaries, as a serving bucket's warm-up does: exact
/// results, blocks reused, no race and nothing left after `empty_cache`.
#[test]
fn an_eager_loop_of_temporaries_reuses_blocks_and_stays_exact() -> Result<()> {
    let b = recycling(MockConfig::default());
    let h = b.alloc_from(&[1.0f32; 32])?;
    let mut seen = std::collections::HashSet::new();
    let mut want = 1.0f32;
    for step in 0..2000 {
        let t = b.alloc::<f32>(32)?;
        seen.insert(t.device_address());
        b.copy(&t, &h)?;
        b.add_scalar(&t, 1.0)?;
        b.copy(&h, &t)?;
        want += 1.0;
        if step % 500 == 499 {
            b.synchronize()?;
        }
    }
    assert_eq!(b.download(&h)?, vec![want; 32]);
    assert!(
        seen.len() < 1100,
        "blocks were reused: {} addresses for 2000 temporaries",
        seen.len()
    );
    assert!(b.race_reports().is_empty(), "{:?}", b.race_reports());
    drop(h);
    b.empty_cache()?;
    assert_eq!(b.cached_bytes(), 0);
    assert_eq!(b.memory_stats(), MemoryStats::default());
    Ok(())
}

/// Graph pools take their blocks through the same allocator: a capture after eager work
/// reuses what the eager work let go (after a wait), and replays stay exact.
#[test]
fn captures_take_recycled_blocks_and_replay_exactly() -> Result<()> {
    let b = recycling(MockConfig::default());
    let x = b.alloc_from(&[2.0f32; 128])?;
    drop(b.alloc::<f32>(128)?);
    b.synchronize()?;
    assert_eq!(b.cached_bytes(), 512);
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    let out = b.capture_on(&s, &mut g, || {
        let t = b.alloc::<f32>(128)?;
        b.copy(&t, &x)?;
        b.scale(&t, 3.0)?;
        Ok(t)
    })?;
    assert_eq!(
        b.cached_bytes(),
        0,
        "the pool's block came from the kept one"
    );
    g.replay()?;
    assert_eq!(b.download(&out)?, vec![6.0; 128]);
    drop((out, g));
    b.synchronize()?;
    b.empty_cache()?;
    drop(x);
    b.empty_cache()?;
    assert_eq!(b.cached_bytes(), 0);
    assert_eq!(b.memory_stats(), MemoryStats::default());
    Ok(())
}
