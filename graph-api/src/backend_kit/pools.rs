//! Graph memory pools, shared by every backend: plain blocks and pool blocks, block reuse
//! inside a pool, graph holds on pools and on blocks, and release to the device only when
//! nothing uses a block any more.
//!
//! # The rules (PyTorch's, made memory-safe)
//!
//! * A *plain* block goes back to the device when its buffer is dropped, unless a graph's
//!   captured work uses it: then it stays (`GraphHeld`) until the last such graph lets go.
//! * A *pool* block whose buffer is dropped goes back to its pool's free list, where the
//!   pool's next allocation (by any graph capturing into the pool) may reuse it — never an
//!   allocation outside the pool. It returns to the device only when no graph holds the pool
//!   ([`PoolHold`]) and no graph's captured work uses the block ([`BlockHold`]).
//! * A pool block is handed to an allocation on the stream it was freed on (ordered by that
//!   stream), or on another stream only when the stream order proves every use of the block
//!   ran before (see [`super::stream_order`]); among the blocks allowed, the smallest that
//!   fits.
//! * A block whose buffer was dropped while `record_stream`ed streams may still use it is
//!   *pending* ([`MemoryPools::mark_pending`]): neither live nor free until the driver layer
//!   frees it.
//! * Pool ids are issued per instance ([`MemoryPools::issue_user_pool`],
//!   [`MemoryPools::issue_private_pool`]); [`MemoryPools::check_issued`] refuses any other.
//!
//! Every size derived from a caller's request is computed with checked arithmetic: a request
//! that overflows is an [`GraphError::OutOfMemory`], never a wrapped size.
#![deny(clippy::arithmetic_side_effects)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use super::stream_order::{FreePoint, ReuseRule, StreamClock, StreamOrder};
use crate::{BlockInfo, BlockState, GraphError, MemoryStats, PoolId, PoolStats, Result};

/// Pool blocks are rounded up to this many bytes (PyTorch's allocator uses 512 as well), so
/// slightly different sizes still reuse each other's blocks.
pub const POOL_GRANULARITY: usize = 512;

/// The device side of memory: raw allocation and release of blocks.
pub trait RawAllocator: Send + Sync + 'static {
    /// A raw device allocation: a cheap handle (a device pointer, a reference-counted buffer)
    /// that buffers carry copies of.
    type Block: Clone + Send + Sync + 'static;
    /// Allocates `bytes` bytes of device memory.
    fn allocate(&self, bytes: usize) -> Result<Self::Block>;
    /// Returns a block to the device (the allocator may defer it, e.g. past a capture).
    fn release(&self, block: Self::Block);
    /// The block's device address.
    fn address(&self, block: &Self::Block) -> u64;
}

/// Identity of a block within one [`MemoryPools`] (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(u64);

/// Memory handed out by [`MemoryPools`]: a block, its size, and the pool it belongs to.
#[derive(Debug, Clone)]
pub struct Allocation<B> {
    id: BlockId,
    block: B,
    bytes: usize,
    pool: Option<PoolId>,
    address: u64,
}

impl<B> Allocation<B> {
    /// The block's identity.
    pub fn id(&self) -> BlockId {
        self.id
    }
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
    /// Its device address.
    pub fn address(&self) -> u64 {
        self.address
    }
}

struct Slot<B> {
    block: B,
    address: u64,
    bytes: usize,
    pool: Option<PoolId>,
    /// Handed out as a buffer.
    live: bool,
    /// Its buffer was dropped, but `record_stream`ed streams may still use it.
    pending: bool,
    /// Graphs whose captured work uses the block.
    graph_holds: usize,
    /// The stream a pool block was last allocated on (`None` for a plain block).
    stream: Option<Arc<StreamClock>>,
    /// Other streams seen using the pool block since it was allocated (captured work on
    /// streams forked from or joined to its own): its free point covers them too.
    users: Vec<Arc<StreamClock>>,
    /// Where in stream order a pool block was freed (while it is pending or free).
    freed_at: Option<FreePoint>,
}

#[derive(Default)]
struct Pool {
    /// Graphs that hold the pool (captured into it and not yet reset).
    holds: usize,
    /// Blocks of the pool not handed out, ready for reuse.
    free: Vec<BlockId>,
    /// Blocks the pool owns.
    blocks: usize,
}

struct Inner<B> {
    slots: HashMap<BlockId, Slot<B>>,
    pools: HashMap<PoolId, Pool>,
    next_block: u64,
    /// Sequence number of the next pool id this instance issues (of either kind).
    next_pool: u64,
}

/// Bits of a pool id half below the issuing instance's namespace: the kind bit and the
/// sequence number.
const SEQUENCE_BITS: u32 = 40;
/// Set in the ids of private pools: an issued id given as the other kind (`(n, 0)` as
/// `(0, n)`) is then not an issued id.
const PRIVATE_BIT: u64 = 1 << (SEQUENCE_BITS - 1);
const SEQUENCE_MASK: u64 = PRIVATE_BIT - 1;

/// Namespaces of pool ids, one per [`MemoryPools`] in the process (never 0, so no id is 0).
static NEXT_NAMESPACE: AtomicU64 = AtomicU64::new(1);

/// Pool bookkeeping over a backend's [`RawAllocator`]; see the module documentation for the
/// rules.
///
/// ```
/// use accel_graph_api::{backend_kit::pools::{MemoryPools, RawAllocator}, Result};
/// struct Host;
/// impl RawAllocator for Host {
///     type Block = u64;
///     fn allocate(&self, bytes: usize) -> Result<u64> { Ok(bytes as u64) }
///     fn release(&self, _block: u64) {}
///     fn address(&self, block: &u64) -> u64 { *block }
/// }
/// let pools = MemoryPools::new(Host);
/// let stream = pools.order().new_stream();
/// let pool = pools.issue_user_pool();
/// let hold = MemoryPools::hold_pool(&pools, pool);
/// let a = pools.alloc_in(pool, 1000, &stream)?;
/// let graph_use = pools.hold_block(a.id()); // a graph's captured work uses the block
/// pools.free(a.id());                       // the buffer is dropped: back to the pool
/// assert_eq!(pools.stats().reserved_bytes, 1024);
/// drop(hold);                               // no graph holds the pool ...
/// assert_eq!(pools.stats().reserved_bytes, 1024); // ... but the block is still in use
/// drop(graph_use);
/// assert_eq!(pools.stats().reserved_bytes, 0);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct MemoryPools<A: RawAllocator> {
    raw: A,
    inner: Mutex<Inner<A::Block>>,
    namespace: u64,
    order: StreamOrder,
}

fn inc(count: &mut usize) {
    *count = count.saturating_add(1);
}

fn dec(count: &mut usize) {
    *count = count.saturating_sub(1);
}

impl<A: RawAllocator> MemoryPools<A> {
    /// Pools over `raw`, reusing blocks in stream order ([`ReuseRule::StreamOrdered`]).
    pub fn new(raw: A) -> Arc<Self> {
        Self::with_reuse_rule(raw, ReuseRule::StreamOrdered)
    }

    /// Pools over `raw` that reuse free blocks by `rule` (anything but the default is a fault
    /// switch for tests).
    pub fn with_reuse_rule(raw: A, rule: ReuseRule) -> Arc<Self> {
        let namespace = NEXT_NAMESPACE.fetch_add(1, Ordering::Relaxed) & ((1 << 24) - 1);
        Arc::new(MemoryPools {
            raw,
            inner: Mutex::new(Inner {
                slots: HashMap::new(),
                pools: HashMap::new(),
                next_block: 0,
                next_pool: 1,
            }),
            namespace: namespace.max(1),
            order: StreamOrder::new(rule),
        })
    }

    /// The stream order the pools reuse blocks by: streams get their clocks here, and the
    /// driver layer reports records, waits and completions to it.
    pub fn order(&self) -> &StreamOrder {
        &self.order
    }

    /// The raw allocator.
    pub fn raw(&self) -> &A {
        &self.raw
    }

    fn lock(&self) -> MutexGuard<'_, Inner<A::Block>> {
        // Every update below leaves the maps consistent between statements that can panic
        // (none can), so a poisoned lock still holds valid bookkeeping.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    // --- pool ids ---

    fn issue(&self, private: bool) -> u64 {
        let mut inner = self.lock();
        let seq = inner.next_pool & SEQUENCE_MASK;
        inner.next_pool = inner.next_pool.saturating_add(1);
        let kind = if private { PRIVATE_BIT } else { 0 };
        (self.namespace << SEQUENCE_BITS) | kind | seq
    }

    /// A new user pool id `(0, n)` (what `graph_pool_handle()` returns).
    pub fn issue_user_pool(&self) -> PoolId {
        PoolId(0, self.issue(false))
    }

    /// A new private pool id `(n, 0)` for a graph that was given no pool.
    pub fn issue_private_pool(&self) -> PoolId {
        PoolId(self.issue(true), 0)
    }

    /// Errors with [`GraphError::InvalidPoolId`] unless `pool` was issued by this instance, as
    /// the kind of id it is: an issued private id `(n, 0)` given as a user id `(0, n)` was
    /// never issued, nor is an id the instance would issue next.
    pub fn check_issued(&self, pool: PoolId) -> Result<()> {
        pool.validate()?;
        let value = if pool.is_user() { pool.1 } else { pool.0 };
        let seq = value & SEQUENCE_MASK;
        let issued = !pool.is_none()
            && value >> SEQUENCE_BITS == self.namespace
            && (value & PRIVATE_BIT != 0) == pool.is_private()
            && seq >= 1
            && seq < self.lock().next_pool;
        if issued {
            Ok(())
        } else {
            Err(GraphError::InvalidPoolId {
                pool,
                reason: "this backend instance did not issue it (pass an id from \
                         graph_pool_handle() or a graph's pool() of the same instance)",
            })
        }
    }

    // --- allocation ---

    /// A plain allocation straight from the device.
    pub fn alloc_plain(&self, bytes: usize) -> Result<Allocation<A::Block>> {
        let block = self.raw.allocate(bytes)?;
        Ok(self.adopt_plain(block, bytes))
    }

    /// A plain allocation of `bytes` bytes over `block`, a block the raw allocator did not
    /// allocate here but can release (memory handed over by another library): from now on it
    /// follows the rules of a plain block, released to the raw allocator once no buffer and no
    /// graph uses it.
    pub fn adopt_plain(&self, block: A::Block, bytes: usize) -> Allocation<A::Block> {
        let address = self.raw.address(&block);
        let mut inner = self.lock();
        let id = Self::insert(&mut inner, block.clone(), address, bytes, None, None);
        Allocation {
            id,
            block,
            bytes,
            pool: None,
            address,
        }
    }

    /// An allocation from `pool` for work on `stream`: the smallest free block of the pool
    /// that fits and that the stream order lets `stream` take, or a new block of the request
    /// rounded up to [`POOL_GRANULARITY`].
    pub fn alloc_in(
        &self,
        pool: PoolId,
        bytes: usize,
        stream: &Arc<StreamClock>,
    ) -> Result<Allocation<A::Block>> {
        let rounded = bytes
            .max(1)
            .checked_next_multiple_of(POOL_GRANULARITY)
            .ok_or(GraphError::OutOfMemory {
                backend: "pools",
                requested_bytes: bytes,
            })?;
        {
            let mut inner = self.lock();
            let Inner { slots, pools, .. } = &mut *inner;
            let entry = pools.entry(pool).or_default();
            let mut order = self.order.reuse_check(stream);
            let best = entry
                .free
                .iter()
                .enumerate()
                .filter_map(|(i, id)| slots.get(id).map(|s| (i, s)))
                .filter(|(_, s)| s.bytes >= rounded)
                .filter(|(_, s)| s.freed_at.as_ref().is_none_or(|p| order.allows(p)))
                .min_by_key(|&(i, s)| (s.bytes, entry.free[i]))
                .map(|(i, _)| i);
            if let Some(i) = best {
                let id = entry.free.swap_remove(i);
                if let Some(slot) = slots.get_mut(&id) {
                    slot.live = true;
                    slot.freed_at = None;
                    slot.stream = Some(Arc::clone(stream));
                    slot.users.clear();
                    return Ok(Allocation {
                        id,
                        block: slot.block.clone(),
                        bytes: slot.bytes,
                        pool: Some(pool),
                        address: slot.address,
                    });
                }
            }
        }
        // Allocate without the lock: a device allocation may be slow.
        let block = match self.raw.allocate(rounded) {
            Ok(block) => block,
            Err(e) => {
                // The entry made above must not outlive a failed first allocation.
                Self::drop_pool_if_empty(&mut self.lock(), pool);
                return Err(e);
            }
        };
        let address = self.raw.address(&block);
        let mut inner = self.lock();
        inc(&mut inner.pools.entry(pool).or_default().blocks);
        let id = Self::insert(
            &mut inner,
            block.clone(),
            address,
            rounded,
            Some(pool),
            Some(Arc::clone(stream)),
        );
        Ok(Allocation {
            id,
            block,
            bytes: rounded,
            pool: Some(pool),
            address,
        })
    }

    fn insert(
        inner: &mut Inner<A::Block>,
        block: A::Block,
        address: u64,
        bytes: usize,
        pool: Option<PoolId>,
        stream: Option<Arc<StreamClock>>,
    ) -> BlockId {
        let id = BlockId(inner.next_block);
        inner.next_block = inner.next_block.saturating_add(1);
        inner.slots.insert(
            id,
            Slot {
                block,
                address,
                bytes,
                pool,
                live: true,
                pending: false,
                graph_holds: 0,
                stream,
                users: Vec::new(),
                freed_at: None,
            },
        );
        id
    }

    /// Work on `stream` uses pool block `id` (while it is live): when its buffer is dropped,
    /// the block is free for another stream only once that stream is ordered after this one
    /// too, not only after the stream it was allocated on. The backend reports each stream it
    /// sees using a block in a capture, where it knows every use, so that two unordered
    /// branches of a graph never share a block.
    pub fn note_use(&self, id: BlockId, stream: &Arc<StreamClock>) {
        let mut inner = self.lock();
        if let Some(slot) = inner.slots.get_mut(&id)
            && slot.live
            && slot.pool.is_some()
            && slot
                .stream
                .as_ref()
                .is_none_or(|s| s.serial() != stream.serial())
            && !slot.users.iter().any(|s| s.serial() == stream.serial())
        {
            slot.users.push(Arc::clone(stream));
        }
    }

    /// The buffer of block `id` was dropped while the streams `also` (besides the one it was
    /// allocated on) may still use it: the block is pending — neither live nor free — until
    /// [`MemoryPools::free`], and its free point is taken now, so that a stream that waited
    /// on any of them since counts as ordered after the drop.
    pub fn mark_pending(&self, id: BlockId, also: &[Arc<StreamClock>]) {
        let mut inner = self.lock();
        if let Some(slot) = inner.slots.get_mut(&id)
            && slot.live
        {
            slot.live = false;
            slot.pending = true;
            if slot.pool.is_some() {
                slot.freed_at = Some(
                    self.order
                        .free_point(slot.stream.iter().chain(&slot.users).chain(also)),
                );
            }
        }
    }

    /// The buffer of block `id` was dropped (or its pending free is due): a plain block goes
    /// back to the device (unless a graph uses it), a pool block to its pool's free list with
    /// its free point (and to the device if nothing holds the pool or uses the block).
    pub fn free(&self, id: BlockId) {
        let released = {
            let mut inner = self.lock();
            let Some(slot) = inner.slots.get_mut(&id) else {
                return;
            };
            if !std::mem::take(&mut slot.pending) && slot.pool.is_some() {
                slot.freed_at = Some(self.order.free_point(slot.stream.iter().chain(&slot.users)));
            }
            slot.live = false;
            if let Some(pool) = slot.pool {
                inner.pools.entry(pool).or_default().free.push(id);
            }
            Self::take_if_unused(&mut inner, id)
        };
        self.release_all(released);
    }

    /// Takes a hold on block `id` for a graph whose captured work uses it: the block stays
    /// allocated (and, for a pool block, in its pool) until every hold is dropped.
    pub fn hold_block(self: &Arc<Self>, id: BlockId) -> BlockHold<A> {
        if let Some(slot) = self.lock().slots.get_mut(&id) {
            inc(&mut slot.graph_holds);
        }
        BlockHold {
            pools: Arc::clone(self),
            id,
        }
    }

    fn unhold_block(&self, id: BlockId) {
        let released = {
            let mut inner = self.lock();
            if let Some(slot) = inner.slots.get_mut(&id) {
                dec(&mut slot.graph_holds);
            }
            Self::take_if_unused(&mut inner, id)
        };
        self.release_all(released);
    }

    /// Takes a hold on `pool` for a graph; the pool's free blocks stay cached until every
    /// hold is dropped. The caller has checked that this instance issued `pool`.
    pub fn hold_pool(this: &Arc<Self>, pool: PoolId) -> PoolHold<A> {
        inc(&mut this.lock().pools.entry(pool).or_default().holds);
        PoolHold {
            pools: Arc::clone(this),
            pool,
        }
    }

    fn unhold_pool(&self, pool: PoolId) {
        let released = {
            let mut inner = self.lock();
            let Some(entry) = inner.pools.get_mut(&pool) else {
                return;
            };
            dec(&mut entry.holds);
            let candidates = if entry.holds == 0 {
                entry.free.clone()
            } else {
                Vec::new()
            };
            let mut released = Vec::new();
            for id in candidates {
                released.extend(Self::take_if_unused(&mut inner, id));
            }
            Self::drop_pool_if_empty(&mut inner, pool);
            released
        };
        self.release_all(released);
    }

    /// Removes block `id` from the books if nothing uses it any more; returns the block to
    /// release to the device.
    fn take_if_unused(inner: &mut Inner<A::Block>, id: BlockId) -> Option<A::Block> {
        let slot = inner.slots.get(&id)?;
        if slot.live || slot.pending || slot.graph_holds > 0 {
            return None;
        }
        if let Some(pool) = slot.pool
            && inner.pools.get(&pool).is_some_and(|p| p.holds > 0)
        {
            // Free in a held pool: cached for the pool's next allocation.
            return None;
        }
        let slot = inner.slots.remove(&id)?;
        if let Some(pool) = slot.pool {
            if let Some(entry) = inner.pools.get_mut(&pool) {
                entry.free.retain(|&f| f != id);
                dec(&mut entry.blocks);
            }
            Self::drop_pool_if_empty(inner, pool);
        }
        Some(slot.block)
    }

    fn drop_pool_if_empty(inner: &mut Inner<A::Block>, pool: PoolId) {
        if inner
            .pools
            .get(&pool)
            .is_some_and(|p| p.holds == 0 && p.blocks == 0)
        {
            inner.pools.remove(&pool);
        }
    }

    fn release_all(&self, blocks: impl IntoIterator<Item = A::Block>) {
        for block in blocks {
            self.raw.release(block);
        }
    }

    /// Returns every block nobody uses to the device: free blocks of pools no graph holds
    /// (normally released at once; this is the catch-all of `empty_cache`). Returns the bytes
    /// released.
    pub fn release_unused(&self) -> usize {
        let (released, bytes) = {
            let mut inner = self.lock();
            let unheld_free: Vec<BlockId> = inner
                .pools
                .values()
                .filter(|p| p.holds == 0)
                .flat_map(|p| p.free.iter().copied())
                .collect();
            let mut released = Vec::new();
            let mut bytes = 0usize;
            for id in unheld_free {
                let size = inner.slots.get(&id).map_or(0, |s| s.bytes);
                if let Some(block) = Self::take_if_unused(&mut inner, id) {
                    released.push(block);
                    bytes = bytes.saturating_add(size);
                }
            }
            (released, bytes)
        };
        self.release_all(released);
        bytes
    }

    // --- accounting ---

    /// Bytes reserved by `pool` (0 if it does not exist).
    pub fn pool_reserved_bytes(&self, pool: PoolId) -> usize {
        let inner = self.lock();
        inner
            .slots
            .values()
            .filter(|s| s.pool == Some(pool))
            .fold(0usize, |sum, s| sum.saturating_add(s.bytes))
    }

    /// Current accounting (pools sorted by id).
    pub fn stats(&self) -> MemoryStats {
        let inner = self.lock();
        let mut stats = MemoryStats::default();
        let mut per_pool: HashMap<PoolId, PoolStats> = inner
            .pools
            .iter()
            .map(|(&pool, p)| {
                (
                    pool,
                    PoolStats {
                        pool,
                        reserved_bytes: 0,
                        active_bytes: 0,
                        graphs: p.holds,
                    },
                )
            })
            .collect();
        for slot in inner.slots.values() {
            stats.reserved_bytes = stats.reserved_bytes.saturating_add(slot.bytes);
            // Each block counts in one of allocated, pending and graph-held at most, so
            // reserved bytes are never less than their sum.
            if slot.live {
                stats.allocated_bytes = stats.allocated_bytes.saturating_add(slot.bytes);
                inc(&mut stats.live_buffers);
            } else if slot.pending {
                stats.pending_free_bytes = stats.pending_free_bytes.saturating_add(slot.bytes);
            } else if slot.graph_holds > 0 {
                stats.graph_held_bytes = stats.graph_held_bytes.saturating_add(slot.bytes);
            }
            if let Some(pool) = slot.pool {
                stats.pool_reserved_bytes = stats.pool_reserved_bytes.saturating_add(slot.bytes);
                if let Some(p) = per_pool.get_mut(&pool) {
                    p.reserved_bytes = p.reserved_bytes.saturating_add(slot.bytes);
                    if slot.live {
                        p.active_bytes = p.active_bytes.saturating_add(slot.bytes);
                    }
                }
            }
        }
        let mut pools: Vec<PoolStats> = per_pool.into_values().collect();
        pools.sort_by_key(|p| p.pool);
        stats.pools = pools;
        stats
    }

    /// Every block held from the device, by address.
    pub fn snapshot(&self) -> Vec<BlockInfo> {
        let inner = self.lock();
        let mut blocks: Vec<BlockInfo> = inner
            .slots
            .values()
            .map(|s| BlockInfo {
                address: s.address,
                bytes: s.bytes,
                pool: s.pool,
                state: if s.live {
                    BlockState::Live
                } else if s.pending {
                    BlockState::PendingFree
                } else if s.pool.is_some()
                    && s.pool
                        .and_then(|p| inner.pools.get(&p))
                        .is_some_and(|p| p.holds > 0)
                {
                    BlockState::Free
                } else {
                    BlockState::GraphHeld
                },
                graph_holds: s.graph_holds,
            })
            .collect();
        blocks.sort_by_key(|b| b.address);
        blocks
    }
}

impl<A: RawAllocator> Drop for MemoryPools<A> {
    fn drop(&mut self) {
        // The last owner is going: every buffer, graph and hold is gone, so whatever is left
        // (nothing, normally) goes back to the device.
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        let blocks: Vec<A::Block> = inner.slots.drain().map(|(_, s)| s.block).collect();
        for block in blocks {
            self.raw.release(block);
        }
    }
}

impl<A: RawAllocator> std::fmt::Debug for MemoryPools<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("MemoryPools")
            .field("blocks", &inner.slots.len())
            .field("pools", &inner.pools.len())
            .finish()
    }
}

/// A graph's hold on a pool; dropping it lets the pool's free blocks go back to the device.
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
        self.pools.unhold_pool(self.pool);
    }
}

impl<A: RawAllocator> std::fmt::Debug for PoolHold<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PoolHold{}", self.pool)
    }
}

/// A graph's hold on a block its captured work uses; dropping the last one lets the block go
/// once its buffer is gone too.
pub struct BlockHold<A: RawAllocator> {
    pools: Arc<MemoryPools<A>>,
    id: BlockId,
}

impl<A: RawAllocator> BlockHold<A> {
    /// The block held.
    pub fn id(&self) -> BlockId {
        self.id
    }
}

/// Another hold on the same block (a graph taking over, or embedding, the work of another
/// graph holds the blocks that work uses in its own right).
impl<A: RawAllocator> Clone for BlockHold<A> {
    fn clone(&self) -> Self {
        self.pools.hold_block(self.id)
    }
}

impl<A: RawAllocator> Drop for BlockHold<A> {
    fn drop(&mut self) {
        self.pools.unhold_block(self.id);
    }
}

impl<A: RawAllocator> std::fmt::Debug for BlockHold<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockHold({:?})", self.id)
    }
}

/// An [`Allocation`] that frees itself on drop: the memory behind a backend's buffer type.
pub struct OwnedAllocation<A: RawAllocator> {
    allocation: Allocation<A::Block>,
    pools: Arc<MemoryPools<A>>,
}

impl<A: RawAllocator> OwnedAllocation<A> {
    /// Takes ownership of `allocation`, to be freed into `pools`.
    pub fn new(pools: &Arc<MemoryPools<A>>, allocation: Allocation<A::Block>) -> Self {
        OwnedAllocation {
            allocation,
            pools: Arc::clone(pools),
        }
    }

    /// The allocation.
    pub fn get(&self) -> &Allocation<A::Block> {
        &self.allocation
    }

    /// A graph hold on the allocation's block (see [`MemoryPools::hold_block`]).
    pub fn hold(&self) -> BlockHold<A> {
        self.pools.hold_block(self.allocation.id)
    }

    /// The pools it returns to.
    pub fn pools(&self) -> &Arc<MemoryPools<A>> {
        &self.pools
    }
}

impl<A: RawAllocator> Drop for OwnedAllocation<A> {
    fn drop(&mut self) {
        self.pools.free(self.allocation.id);
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
