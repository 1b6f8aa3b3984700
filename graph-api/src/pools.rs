//! Graph memory pools, shared by every backend: private and shared pools, block reuse inside a
//! pool, and release to the device when the last graph and the last buffer let go.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use crate::{MemoryStats, PoolId, Result};

/// Pool blocks are rounded up to this many bytes (PyTorch's allocator uses 512 as well), so
/// slightly different sizes still reuse each other's blocks.
pub const POOL_GRANULARITY: usize = 512;

/// The device side of memory: raw allocation and release of blocks.
pub trait RawAllocator: Send + Sync + 'static {
    /// A raw device allocation.
    type Block: Send + Sync + 'static;
    /// Allocates `bytes` bytes of device memory.
    fn allocate(&self, bytes: usize) -> Result<Self::Block>;
    /// Returns a block to the device.
    fn release(&self, block: Self::Block);
}

/// Memory handed out by [`MemoryPools`]: a block, its size, and the pool it belongs to.
#[derive(Debug)]
pub struct Allocation<B> {
    block: B,
    bytes: usize,
    pool: Option<PoolId>,
}

impl<B> Allocation<B> {
    /// The raw block.
    pub fn block(&self) -> &B {
        &self.block
    }
    /// Bytes reserved for it (rounded up inside pools).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The pool it came from (`None` for a plain allocation).
    pub fn pool(&self) -> Option<PoolId> {
        self.pool
    }
}

struct Pool<B> {
    /// Graphs that hold the pool (captured into it and not yet reset).
    holds: usize,
    /// Blocks of this pool handed out.
    live: usize,
    /// Blocks of this pool not handed out, ready for reuse: `(bytes, block)`.
    free: Vec<(usize, B)>,
    /// Bytes of every block the pool owns.
    reserved: usize,
}

impl<B> Default for Pool<B> {
    fn default() -> Self {
        Pool {
            holds: 0,
            live: 0,
            free: Vec::new(),
            reserved: 0,
        }
    }
}

struct Inner<B> {
    pools: HashMap<PoolId, Pool<B>>,
    plain_bytes: usize,
    plain_live: usize,
    allocated_bytes: usize,
}

/// Pool bookkeeping over a backend's [`RawAllocator`].
///
/// A pool lives while a graph holds it ([`MemoryPools::hold`]) or a buffer allocated from it is
/// alive; freed buffers go back to the pool's free list, where the next allocation in the same
/// pool (by the same graph or another graph sharing the pool) reuses them. When the last hold
/// and the last buffer are gone, the pool's blocks return to the device.
///
/// ```
/// use accel_graph_api::{pools::{MemoryPools, RawAllocator}, PoolId, Result};
/// struct Host;
/// impl RawAllocator for Host {
///     type Block = Vec<u8>;
///     fn allocate(&self, bytes: usize) -> Result<Vec<u8>> { Ok(vec![0; bytes]) }
///     fn release(&self, _block: Vec<u8>) {}
/// }
/// let pools = MemoryPools::new(Host);
/// let pool = PoolId::new_user();
/// let hold = MemoryPools::hold(&pools, pool);
/// let a = pools.alloc_in(pool, 1000)?;
/// pools.free(a);                        // back to the pool, still reserved
/// assert_eq!(pools.stats().reserved_bytes, 1024);
/// let b = pools.alloc_in(pool, 1000)?;  // reuses the block
/// assert_eq!(pools.stats().reserved_bytes, 1024);
/// pools.free(b);
/// drop(hold);                           // last holder gone: memory returns to the device
/// assert_eq!(pools.stats().reserved_bytes, 0);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct MemoryPools<A: RawAllocator> {
    raw: A,
    inner: Mutex<Inner<A::Block>>,
}

impl<A: RawAllocator> MemoryPools<A> {
    /// Pools over `raw`.
    pub fn new(raw: A) -> Arc<Self> {
        Arc::new(MemoryPools {
            raw,
            inner: Mutex::new(Inner {
                pools: HashMap::new(),
                plain_bytes: 0,
                plain_live: 0,
                allocated_bytes: 0,
            }),
        })
    }

    /// The raw allocator.
    pub fn raw(&self) -> &A {
        &self.raw
    }

    fn lock(&self) -> MutexGuard<'_, Inner<A::Block>> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing the accounting, so keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A plain allocation straight from the device.
    pub fn alloc_plain(&self, bytes: usize) -> Result<Allocation<A::Block>> {
        let block = self.raw.allocate(bytes)?;
        let mut inner = self.lock();
        inner.plain_bytes += bytes;
        inner.plain_live += 1;
        inner.allocated_bytes += bytes;
        Ok(Allocation {
            block,
            bytes,
            pool: None,
        })
    }

    /// An allocation from `pool`: the smallest free block that fits, or a new block.
    pub fn alloc_in(&self, pool: PoolId, bytes: usize) -> Result<Allocation<A::Block>> {
        let rounded = bytes.max(1).div_ceil(POOL_GRANULARITY) * POOL_GRANULARITY;
        let mut inner = self.lock();
        let entry = inner.pools.entry(pool).or_default();
        let best = entry
            .free
            .iter()
            .enumerate()
            .filter(|(_, (size, _))| *size >= rounded)
            .min_by_key(|(_, (size, _))| *size)
            .map(|(i, _)| i);
        let (size, block) = match best {
            Some(i) => entry.free.swap_remove(i),
            None => {
                // Allocate without the lock: a device allocation may be slow.
                drop(inner);
                let block = self.raw.allocate(rounded)?;
                inner = self.lock();
                inner.pools.entry(pool).or_default().reserved += rounded;
                (rounded, block)
            }
        };
        let entry = inner.pools.entry(pool).or_default();
        entry.live += 1;
        inner.allocated_bytes += size;
        Ok(Allocation {
            block,
            bytes: size,
            pool: Some(pool),
        })
    }

    /// Frees an allocation: a plain one goes back to the device, a pooled one to its pool
    /// (and the pool to the device if nothing holds it any more).
    pub fn free(&self, allocation: Allocation<A::Block>) {
        let Allocation { block, bytes, pool } = allocation;
        let mut inner = self.lock();
        inner.allocated_bytes -= bytes;
        match pool {
            None => {
                inner.plain_bytes -= bytes;
                inner.plain_live -= 1;
                drop(inner);
                self.raw.release(block);
            }
            Some(id) => {
                let entry = inner.pools.entry(id).or_default();
                entry.live -= 1;
                entry.free.push((bytes, block));
                let released = Self::take_if_unused(&mut inner, id);
                drop(inner);
                self.release_blocks(released);
            }
        }
    }

    /// Takes a hold on `pool` for a graph; the pool stays until every hold is dropped.
    pub fn hold(this: &Arc<Self>, pool: PoolId) -> PoolHold<A> {
        this.lock().pools.entry(pool).or_default().holds += 1;
        PoolHold {
            pools: Arc::clone(this),
            pool,
        }
    }

    fn unhold(&self, pool: PoolId) {
        let mut inner = self.lock();
        if let Some(entry) = inner.pools.get_mut(&pool) {
            entry.holds -= 1;
        }
        let released = Self::take_if_unused(&mut inner, pool);
        drop(inner);
        self.release_blocks(released);
    }

    fn take_if_unused(inner: &mut Inner<A::Block>, pool: PoolId) -> Vec<A::Block> {
        match inner.pools.get(&pool) {
            Some(p) if p.holds == 0 && p.live == 0 => inner
                .pools
                .remove(&pool)
                .map(|p| p.free.into_iter().map(|(_, b)| b).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    fn release_blocks(&self, blocks: Vec<A::Block>) {
        for block in blocks {
            self.raw.release(block);
        }
    }

    /// Bytes reserved by `pool` (0 if it does not exist).
    pub fn pool_reserved_bytes(&self, pool: PoolId) -> usize {
        self.lock().pools.get(&pool).map_or(0, |p| p.reserved)
    }

    /// Current accounting.
    pub fn stats(&self) -> MemoryStats {
        let inner = self.lock();
        let pool_reserved: usize = inner.pools.values().map(|p| p.reserved).sum();
        let pool_live: usize = inner.pools.values().map(|p| p.live).sum();
        MemoryStats {
            allocated_bytes: inner.allocated_bytes,
            reserved_bytes: inner.plain_bytes + pool_reserved,
            pool_reserved_bytes: pool_reserved,
            live_buffers: inner.plain_live + pool_live,
            pools: inner.pools.len(),
        }
    }
}

impl<A: RawAllocator> Drop for MemoryPools<A> {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, pool) in inner.pools.drain() {
            for (_, block) in pool.free {
                self.raw.release(block);
            }
        }
    }
}

/// A graph's hold on a pool; dropping it lets the pool go once its buffers are gone.
pub struct PoolHold<A: RawAllocator> {
    pools: Arc<MemoryPools<A>>,
    pool: PoolId,
}

impl<A: RawAllocator> PoolHold<A> {
    /// The pool held.
    pub fn pool(&self) -> PoolId {
        self.pool
    }
}

impl<A: RawAllocator> Drop for PoolHold<A> {
    fn drop(&mut self) {
        self.pools.unhold(self.pool);
    }
}

impl<A: RawAllocator> std::fmt::Debug for PoolHold<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PoolHold{}", self.pool)
    }
}

/// An [`Allocation`] that frees itself on drop: the memory behind a backend's buffer type.
pub struct OwnedAllocation<A: RawAllocator> {
    allocation: Option<Allocation<A::Block>>,
    pools: Arc<MemoryPools<A>>,
}

impl<A: RawAllocator> OwnedAllocation<A> {
    /// Takes ownership of `allocation`, to be freed into `pools`.
    pub fn new(pools: &Arc<MemoryPools<A>>, allocation: Allocation<A::Block>) -> Self {
        OwnedAllocation {
            allocation: Some(allocation),
            pools: Arc::clone(pools),
        }
    }

    /// The allocation.
    pub fn get(&self) -> &Allocation<A::Block> {
        self.allocation
            .as_ref()
            .expect("an owned allocation is present until drop")
    }

    /// The pools it returns to.
    pub fn pools(&self) -> &Arc<MemoryPools<A>> {
        &self.pools
    }
}

impl<A: RawAllocator> Drop for OwnedAllocation<A> {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            self.pools.free(a);
        }
    }
}

impl<A: RawAllocator> std::fmt::Debug for OwnedAllocation<A>
where
    A::Block: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedAllocation")
            .field("allocation", &self.allocation)
            .finish()
    }
}
