//! Graph pools: capture allocations come from the graph's pool, a shared pool is reused, and
//! memory returns to the device only when every holder and buffer is gone.

use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, Result};
use accel_graph_mock::MockBackend;

#[test]
fn a_second_graph_on_the_same_pool_reuses_its_memory() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let x = b.alloc_from(&[1.0; 100]).unwrap();
    let baseline = b.memory_stats();
    assert_eq!(baseline.pools, 0);

    let mut g1 = b.graph(GraphOptions::new()).unwrap();
    let addr1 = b
        .capture_on(&s, &mut g1, || -> Result<u64> {
            let tmp = b.alloc(100)?;
            b.copy(&tmp, &x)?;
            b.axpy(&x, 1.0, &tmp)?;
            Ok(tmp.device_address())
        })
        .unwrap()
        .unwrap();
    let after_g1 = b.memory_stats();
    assert_eq!(after_g1.pools, 1);
    assert_eq!(after_g1.pool_reserved_bytes, 512);
    assert_eq!(after_g1.allocated_bytes, baseline.allocated_bytes);

    let mut g2 = b
        .graph(GraphOptions::new().pool(g1.pool().unwrap()))
        .unwrap();
    let addr2 = b
        .capture_on(&s, &mut g2, || -> Result<u64> {
            let tmp = b.alloc(100)?;
            b.fill(&tmp, 2.0)?;
            Ok(tmp.device_address())
        })
        .unwrap()
        .unwrap();
    assert_eq!(addr1, addr2, "the block is reused");
    assert_eq!(b.memory_stats(), after_g1, "no new memory");
    assert_eq!(g2.pool().unwrap(), g1.pool().unwrap());

    g1.reset();
    assert_eq!(b.memory_stats().pools, 1, "g2 still holds the pool");
    drop(g2);
    assert_eq!(b.memory_stats(), baseline, "pool returned to the device");
}

#[test]
fn pool_memory_stays_while_a_buffer_lives() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    let kept = b.capture_on(&s, &mut g, || b.alloc(10)).unwrap().unwrap();
    g.reset();
    let stats = b.memory_stats();
    assert_eq!((stats.pools, stats.live_buffers), (1, 1));
    drop(kept);
    assert_eq!(b.memory_stats(), Default::default());
}

#[test]
fn user_pool_handles_are_unique_and_shared() {
    let b = MockBackend::new();
    let (p1, p2) = (b.graph_pool_handle(), b.graph_pool_handle());
    assert_ne!(p1, p2);
    let s = b.new_stream().unwrap();
    let mut g1 = b.graph(GraphOptions::new().pool(p1)).unwrap();
    let mut g2 = b.graph(GraphOptions::new().pool(p1)).unwrap();
    let a1 = b
        .capture_on(&s, &mut g1, || b.alloc(8).map(|t| t.device_address()))
        .unwrap()
        .unwrap();
    let a2 = b
        .capture_on(&s, &mut g2, || b.alloc(8).map(|t| t.device_address()))
        .unwrap()
        .unwrap();
    assert_eq!(a1, a2);
    assert_eq!(g1.pool().unwrap(), p1);
}

#[test]
fn plain_allocations_are_not_pooled() {
    let b = MockBackend::new();
    let x = b.alloc(300).unwrap();
    assert_eq!(x.pool(), None);
    let stats = b.memory_stats();
    assert_eq!(
        (
            stats.allocated_bytes,
            stats.reserved_bytes,
            stats.live_buffers
        ),
        (1200, 1200, 1)
    );
    drop(x);
    assert_eq!(b.memory_stats(), Default::default());
}
