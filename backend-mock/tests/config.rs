//! `MockConfig`: address space, capacity, poisoned memory, and which instances share a
//! simulated device.

use accel_graph_api::{MemoryStats, prelude::*};
use accel_graph_mock::{ADDRESS_ALIGNMENT, MockBackend, MockConfig};

#[test]
fn an_address_space_that_cannot_hold_an_allocation_is_refused() {
    for base_address in [u64::MAX, u64::MAX - 8] {
        let config = MockConfig {
            base_address,
            ..MockConfig::default()
        };
        assert!(matches!(
            MockBackend::with_config(config),
            Err(GraphError::BackendUnavailable {
                backend: "mock",
                ..
            })
        ));
    }
}

#[test]
fn addresses_start_at_the_base_and_are_aligned() -> Result<()> {
    let b = MockBackend::with_config(MockConfig {
        base_address: 0x1001,
        ..MockConfig::default()
    })?;
    let (x, y) = (b.alloc::<f32>(3)?, b.alloc::<f32>(1)?);
    assert_eq!(
        x.device_address(),
        0x1001_u64.next_multiple_of(ADDRESS_ALIGNMENT)
    );
    assert_eq!(y.device_address() % ADDRESS_ALIGNMENT, 0);
    assert!(y.device_address() > x.device_address());
    assert_eq!(b.config().base_address, 0x1001);
    Ok(())
}

#[test]
fn the_capacity_limits_memory_and_a_refused_allocation_holds_nothing() -> Result<()> {
    let b = MockBackend::with_config(MockConfig {
        memory_capacity: Some(1024),
        ..MockConfig::default()
    })?;
    let x = b.alloc::<f32>(200)?; // 800 bytes
    assert!(matches!(
        b.alloc::<f32>(100),
        Err(GraphError::OutOfMemory {
            backend: "mock",
            ..
        })
    ));
    assert_eq!(b.memory_stats().live_buffers, 1);
    drop(x);
    b.alloc::<f32>(256)?; // the whole capacity is free again
    Ok(())
}

#[test]
fn huge_allocations_fail_cleanly() {
    let b = MockBackend::new();
    assert!(matches!(
        b.alloc::<f32>(usize::MAX),
        Err(GraphError::OutOfMemory { .. })
    ));
    assert!(matches!(
        b.alloc::<f32>(usize::MAX / 8),
        Err(GraphError::OutOfMemory { .. })
    ));
    assert_eq!(b.memory_stats(), MemoryStats::default());
}

#[test]
fn poisoned_memory_reads_nan_until_written() -> Result<()> {
    let b = MockBackend::with_config(MockConfig {
        poison_new_memory: true,
        ..MockConfig::default()
    })?;
    let x = b.alloc::<f32>(4)?;
    assert!(b.download(&x)?.iter().all(|v| v.is_nan()));
    b.fill(&x, 0.5)?;
    assert_eq!(b.download(&x)?, vec![0.5; 4]);
    let plain = MockBackend::new();
    assert_eq!(plain.download(&plain.alloc::<f32>(2)?)?, vec![0.0; 2]);
    Ok(())
}

/// A global capture forbids unsafe calls through every instance of its device, and only
/// through those: instances of other devices are not disturbed.
#[test]
fn instances_of_one_shared_device_share_capture_rules() -> Result<()> {
    let a = MockBackend::with_config(MockConfig::shared(1001))?;
    let same = MockBackend::with_config(MockConfig::shared(1001))?;
    let elsewhere = MockBackend::with_config(MockConfig::shared(1002))?;
    let own = MockBackend::new();
    assert_eq!(same.config().shared_device, Some(1001));
    let s = a.new_stream()?;
    let _current = a.use_stream(&s)?;
    let mut g = a.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::Global))?;
    g.capture_begin()?;
    assert!(same.any_capture_active());
    assert!(!elsewhere.any_capture_active() && !own.any_capture_active());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            assert!(elsewhere.alloc::<f32>(4).is_ok());
            assert!(own.alloc::<f32>(4).is_ok());
            assert!(matches!(
                same.alloc::<f32>(4),
                Err(GraphError::UnsafeDuringCapture { .. })
            ));
        });
    });
    assert!(matches!(
        g.capture_end(),
        Err(GraphError::CaptureInvalidated { .. })
    ));
    Ok(())
}

/// Addresses never wrap: with a base that leaves room for exactly one aligned block below
/// 2^64, that block is handed out, and every further allocation is `OutOfMemory` (never a block
/// at address 0 or anywhere below the base). A refused allocation holds nothing.
#[test]
fn addresses_never_wrap_past_the_top_of_the_address_space() -> Result<()> {
    // The highest base with room for one block: [base, base + 256) ends exactly at 2^64 - 256.
    let base = u64::MAX - (2 * ADDRESS_ALIGNMENT - 1);
    let b = MockBackend::with_config(MockConfig {
        base_address: base,
        ..MockConfig::default()
    })?;
    // 100 elements need two blocks' worth of addresses: refused, and nothing is taken.
    assert!(matches!(
        b.alloc::<f32>(100),
        Err(GraphError::OutOfMemory {
            backend: "mock",
            ..
        })
    ));
    let x = b.alloc::<f32>(64)?; // exactly one block
    assert_eq!(x.device_address(), base);
    for len in [1, 0, 64] {
        match b.alloc::<f32>(len) {
            Err(GraphError::OutOfMemory {
                backend: "mock", ..
            }) => {}
            Ok(y) => panic!(
                "alloc({len}) past the top of the address space gave address {:#x}",
                y.device_address()
            ),
            Err(e) => panic!("alloc({len}): expected OutOfMemory, got {e:?}"),
        }
    }
    assert_eq!(b.memory_stats().live_buffers, 1);
    drop(x);
    assert_eq!(b.memory_stats(), MemoryStats::default());
    // One byte less of room is refused up front.
    assert!(
        MockBackend::with_config(MockConfig {
            base_address: base + 1,
            ..MockConfig::default()
        })
        .is_err()
    );
    Ok(())
}
