//! Simulated device memory: blocks of host memory at deterministic virtual addresses.
#![deny(clippy::arithmetic_side_effects)]

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
};

use accel_graph_api::{AccessKind, backend_kit::EmulatedCudaError};
use accel_graph_driver::{DriverError, DriverResult, api::DriverMemory};

use crate::{MockDevice, error::invalid_config, sanitizer::BlockHistory, stream::MockStreamState};

/// Device addresses are aligned like CUDA's allocations (at least 256 bytes).
pub const ADDRESS_ALIGNMENT: u64 = 256;

/// One block of simulated device memory.
///
/// Elements are stored as `AtomicU32` bit patterns of `f32`: relaxed atomic loads and stores
/// compile to plain moves, need no `unsafe`, and let several streams (threads) touch the same
/// memory as a GPU would, without undefined behaviour.
pub struct MockBlock {
    address: u64,
    bytes: usize,
    pub(crate) cells: Box<[AtomicU32]>,
    /// Set when the block goes back to the device; the sanitizer checks it before each node.
    released: AtomicBool,
    /// The race sanitizer's history of eager accesses to the block.
    pub(crate) accesses: BlockHistory,
}

impl MockBlock {
    /// The virtual device address of the block.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// True once the block was returned to the device.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }
}

impl fmt::Debug for MockBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockBlock")
            .field("address", &format_args!("{:#x}", self.address))
            .field("bytes", &self.bytes)
            .field("released", &self.is_released())
            .finish()
    }
}

/// The simulated address space: a bump allocator over virtual addresses starting at a fixed
/// base, so the same program sees the same addresses. Addresses are never reused, which makes
/// "freed since capture" a permanent, cheap fact for the sanitizer.
pub(crate) struct AddressSpace {
    next_address: AtomicU64,
    in_use: AtomicUsize,
    capacity: Option<usize>,
    poison: bool,
}

impl AddressSpace {
    pub(crate) fn new(
        base_address: u64,
        capacity: Option<usize>,
        poison: bool,
    ) -> accel_graph_api::Result<Self> {
        let first = base_address
            .checked_next_multiple_of(ADDRESS_ALIGNMENT)
            .filter(|first| first.checked_add(ADDRESS_ALIGNMENT).is_some())
            .ok_or_else(|| {
                invalid_config(format!(
                    "MockConfig::base_address {base_address:#x} leaves no room for an \
                     allocation below 2^64"
                ))
            })?;
        Ok(AddressSpace {
            next_address: AtomicU64::new(first),
            in_use: AtomicUsize::new(0),
            capacity,
            poison,
        })
    }

    fn out_of_memory(bytes: usize, why: &str) -> DriverError {
        DriverError::emulated(
            EmulatedCudaError::OutOfMemory,
            format!("cuMemAlloc of {bytes} bytes: {why}"),
        )
    }

    /// Reserves `bytes` of capacity, or nothing: a refused request never counts, even for a
    /// moment, against other threads' requests.
    fn reserve(&self, bytes: usize) -> DriverResult<()> {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let total = used.checked_add(bytes)?;
                match self.capacity {
                    Some(cap) if total > cap => None,
                    _ => Some(total),
                }
            })
            .map(|_| ())
            .map_err(|_| Self::out_of_memory(bytes, "the device's capacity is exhausted"))
    }

    fn unreserve(&self, bytes: usize) {
        let _ = self
            .in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    pub(crate) fn allocate(&self, bytes: usize) -> DriverResult<Arc<MockBlock>> {
        // Even an empty allocation gets an address of its own, as on a device.
        let span = u64::try_from(bytes.max(1))
            .ok()
            .and_then(|b| b.checked_next_multiple_of(ADDRESS_ALIGNMENT))
            .ok_or_else(|| Self::out_of_memory(bytes, "the size exceeds the address space"))?;
        self.reserve(bytes)?;
        let mut cells = Vec::new();
        if cells.try_reserve_exact(bytes.div_ceil(4)).is_err() {
            self.unreserve(bytes);
            return Err(Self::out_of_memory(bytes, "host memory is exhausted"));
        }
        let address = self
            .next_address
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
                next.checked_add(span)
            });
        let Ok(address) = address else {
            self.unreserve(bytes);
            return Err(Self::out_of_memory(
                bytes,
                "the virtual address space is exhausted",
            ));
        };
        let init = if self.poison { f32::NAN } else { 0.0 }.to_bits();
        cells.resize_with(bytes.div_ceil(4), || AtomicU32::new(init));
        Ok(Arc::new(MockBlock {
            address,
            bytes,
            cells: cells.into_boxed_slice(),
            released: AtomicBool::new(false),
            accesses: BlockHistory::default(),
        }))
    }

    fn release(&self, block: &MockBlock) {
        self.unreserve(block.bytes);
        block.released.store(true, Ordering::Release);
    }
}

/// Writes `src` at byte `offset` of `cells`. Whole cells are stored; a cell the range covers
/// only in part is updated atomically, so a concurrent writer of its other bytes (another view
/// of the block) keeps its bytes, as a GPU's byte-addressed memory would.
pub(crate) fn write_bytes(cells: &[AtomicU32], offset: usize, src: &[u8]) {
    let (mut at, mut rest) = (offset, src);
    while !rest.is_empty() {
        let (index, within) = (at / 4, at % 4);
        let Some(cell) = cells.get(index) else {
            return;
        };
        let (head, tail) = rest.split_at(rest.len().min(4usize.saturating_sub(within)));
        match <[u8; 4]>::try_from(head) {
            Ok(whole) => cell.store(u32::from_ne_bytes(whole), Ordering::Relaxed),
            Err(_) => {
                let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    let mut bytes = old.to_ne_bytes();
                    for (b, &v) in bytes.iter_mut().skip(within).zip(head) {
                        *b = v;
                    }
                    Some(u32::from_ne_bytes(bytes))
                });
            }
        }
        at = at.saturating_add(head.len());
        rest = tail;
    }
}

/// Reads bytes `offset .. offset + dst.len()` of `cells` into `dst`.
pub(crate) fn read_bytes(cells: &[AtomicU32], offset: usize, dst: &mut [u8]) {
    let (mut at, mut rest) = (offset, dst);
    while !rest.is_empty() {
        let (index, within) = (at / 4, at % 4);
        let Some(cell) = cells.get(index) else {
            return;
        };
        let n = rest.len().min(4usize.saturating_sub(within));
        let (head, tail) = rest.split_at_mut(n);
        let bytes = cell.load(Ordering::Relaxed).to_ne_bytes();
        for (d, &b) in head.iter_mut().zip(bytes.iter().skip(within)) {
            *d = b;
        }
        at = at.saturating_add(n);
        rest = tail;
    }
}

impl DriverMemory for MockDevice {
    type Block = Arc<MockBlock>;

    fn malloc(&self, bytes: usize) -> DriverResult<Arc<MockBlock>> {
        self.alive()?;
        self.unsafe_call("malloc", false)?;
        self.memory.allocate(bytes)
    }

    unsafe fn free(&self, block: Arc<MockBlock>) -> DriverResult<()> {
        // CUDA permits no runtime call inside a host function: the free fails and the memory
        // stays allocated for good. Model that, so a test sees it if it ever happens.
        if crate::ops::HostFunctionRuns::active() {
            crate::counters::Counters::bump(&self.counters.frees_in_host_callbacks, 1);
            return Err(DriverError::emulated(
                EmulatedCudaError::NotPermitted,
                "a device free (cuMemFree) called from inside a host function",
            ));
        }
        // A free reaching the device during a capture would break it on a GPU (a device free
        // synchronizes): model that, so a test sees it if it ever happens.
        if self.capture.any_active() {
            crate::counters::Counters::bump(&self.counters.frees_during_capture, 1);
            self.capture
                .invalidate_all("a device free (cuMemFree) ran during the capture");
        }
        self.memory.release(&block);
        Ok(())
    }

    fn block_address(&self, block: &Arc<MockBlock>) -> u64 {
        block.address
    }

    fn recycles_blocks(&self) -> bool {
        self.config().recycle_memory
    }

    unsafe fn upload(
        &self,
        dst: &Arc<MockBlock>,
        offset: usize,
        src: &[u8],
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        self.check_can_wait(stream, "upload")?;
        self.sanitize_copy(
            stream,
            dst,
            offset..offset.saturating_add(src.len()),
            AccessKind::Write,
        )?;
        write_bytes(&dst.cells, offset, src);
        Ok(())
    }

    unsafe fn download(
        &self,
        src: &Arc<MockBlock>,
        offset: usize,
        dst: &mut [u8],
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        self.check_can_wait(stream, "download")?;
        self.sanitize_copy(
            stream,
            src,
            offset..offset.saturating_add(dst.len()),
            AccessKind::Read,
        )?;
        read_bytes(&src.cells, offset, dst);
        Ok(())
    }
}
