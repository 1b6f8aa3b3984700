//! Graph pools over a host allocator: which free block an allocation on which stream may
//! take, and the books of pending frees.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use accel_graph_api::{
    BlockState, Result,
    backend_kit::pools::{MemoryPools, RawAllocator},
};

/// Hands out increasing addresses; releases nothing (the tests read the books, not memory).
#[derive(Default)]
struct Host(AtomicU64);

impl RawAllocator for Host {
    type Block = u64;
    fn allocate(&self, bytes: usize) -> Result<u64> {
        Ok(self.0.fetch_add(bytes as u64 + 4096, Ordering::Relaxed))
    }
    fn release(&self, _block: u64) {}
    fn address(&self, block: &u64) -> u64 {
        *block
    }
}

fn pools() -> Arc<MemoryPools<Host>> {
    MemoryPools::new(Host::default())
}

#[test]
fn a_free_block_goes_to_another_stream_only_once_ordered() -> Result<()> {
    let pools = pools();
    let order = pools.order();
    let (a, b) = (order.new_stream(), order.new_stream());
    let pool = pools.issue_user_pool();
    let _held = MemoryPools::hold_pool(&pools, pool);
    let first = pools.alloc_in(pool, 1000, &a)?;
    pools.free(first.id());
    let unordered = pools.alloc_in(pool, 1000, &b)?;
    assert_ne!(
        unordered.address(),
        first.address(),
        "b is not ordered after the free"
    );
    order.wait(&b, &order.stamp(&a));
    let ordered = pools.alloc_in(pool, 1000, &b)?;
    assert_eq!(
        ordered.address(),
        first.address(),
        "b waited on an event recorded after it"
    );
    pools.free(ordered.id());
    let same_stream = pools.alloc_in(pool, 1000, &b)?;
    assert_eq!(
        same_stream.address(),
        first.address(),
        "freed on b, taken on b"
    );
    Ok(())
}

#[test]
fn a_pending_block_counts_apart_and_keeps_its_drop_point() -> Result<()> {
    let pools = pools();
    let order = pools.order();
    let (a, recorded, later) = (order.new_stream(), order.new_stream(), order.new_stream());
    let pool = pools.issue_user_pool();
    let _held = MemoryPools::hold_pool(&pools, pool);
    let block = pools.alloc_in(pool, 1000, &a)?;
    pools.mark_pending(block.id(), std::slice::from_ref(&recorded));
    let stats = pools.stats();
    assert_eq!(
        (
            stats.allocated_bytes,
            stats.pending_free_bytes,
            stats.live_buffers
        ),
        (0, 1024, 0)
    );
    assert!(stats.reserved_bytes >= stats.allocated_bytes + stats.pending_free_bytes);
    assert_eq!(pools.snapshot()[0].state, BlockState::PendingFree);
    // Ordered after the drop on both streams that may use the block, before its free is due.
    order.wait(&later, &order.stamp(&a));
    order.wait(&later, &order.stamp(&recorded));
    pools.free(block.id());
    let stats = pools.stats();
    assert_eq!((stats.pending_free_bytes, stats.reserved_bytes), (0, 1024));
    assert_eq!(pools.snapshot()[0].state, BlockState::Free);
    let reused = pools.alloc_in(pool, 1000, &later)?;
    assert_eq!(
        reused.address(),
        block.address(),
        "ordered after the drop point"
    );
    Ok(())
}

#[test]
fn a_recorded_stream_must_be_ordered_too() -> Result<()> {
    let pools = pools();
    let order = pools.order();
    let (a, recorded) = (order.new_stream(), order.new_stream());
    let pool = pools.issue_user_pool();
    let _held = MemoryPools::hold_pool(&pools, pool);
    let block = pools.alloc_in(pool, 1000, &a)?;
    pools.mark_pending(block.id(), std::slice::from_ref(&recorded));
    pools.free(block.id());
    // The allocation stream alone is not enough: the recorded stream may still use it.
    assert_ne!(pools.alloc_in(pool, 1000, &a)?.address(), block.address());
    recorded.completed_before(order.now());
    assert_eq!(pools.alloc_in(pool, 1000, &a)?.address(), block.address());
    Ok(())
}
