//! Simulated device memory: blocks of host memory at deterministic virtual addresses, and the
//! buffer type handed to users.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
};

use accel_graph_api::{
    DeviceBuffer, GraphError, Result,
    pools::{OwnedAllocation, RawAllocator},
};

/// Device addresses are aligned like CUDA's allocations (at least 256 bytes).
pub const ADDRESS_ALIGNMENT: u64 = 256;

/// One block of simulated device memory.
///
/// Elements are stored as `AtomicU32` bit patterns of `f32`: relaxed atomic loads and stores
/// compile to plain moves, need no `unsafe`, and let several streams (threads) touch the same
/// memory as a GPU would, without undefined behaviour.
pub(crate) struct MockBlock {
    address: u64,
    bytes: usize,
    pub(crate) cells: Box<[AtomicU32]>,
    /// Set when the block goes back to the device; the sanitizer checks it before replay.
    released: AtomicBool,
}

impl MockBlock {
    /// The virtual device address of the block.
    pub(crate) fn address(&self) -> u64 {
        self.address
    }

    /// True once the block was returned to the device (a plain buffer dropped, a pool released).
    pub(crate) fn is_released(&self) -> bool {
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

/// The mock's raw allocator: a bump allocator over a virtual address space starting at a fixed
/// base, so the same program sees the same addresses. Addresses are never reused, which makes
/// "freed since capture" a permanent, cheap fact for the sanitizer.
pub(crate) struct MockAllocator {
    next_address: AtomicU64,
    in_use: AtomicUsize,
    capacity: Option<usize>,
    poison: bool,
}

impl MockAllocator {
    pub(crate) fn new(base_address: u64, capacity: Option<usize>, poison: bool) -> Self {
        MockAllocator {
            next_address: AtomicU64::new(base_address.next_multiple_of(ADDRESS_ALIGNMENT)),
            in_use: AtomicUsize::new(0),
            capacity,
            poison,
        }
    }

    fn out_of_memory(bytes: usize) -> GraphError {
        GraphError::OutOfMemory {
            backend: "mock",
            requested_bytes: bytes,
        }
    }
}

impl RawAllocator for MockAllocator {
    type Block = Arc<MockBlock>;

    fn allocate(&self, bytes: usize) -> Result<Arc<MockBlock>> {
        let reserved = self.in_use.fetch_add(bytes, Ordering::Relaxed);
        let over = match self.capacity {
            Some(cap) => reserved.checked_add(bytes).is_none_or(|total| total > cap),
            None => false,
        };
        let elements = bytes.div_ceil(4);
        let mut cells = Vec::new();
        if over || cells.try_reserve_exact(elements).is_err() {
            self.in_use.fetch_sub(bytes, Ordering::Relaxed);
            return Err(Self::out_of_memory(bytes));
        }
        let init = if self.poison { f32::NAN } else { 0.0 }.to_bits();
        cells.resize_with(elements, || AtomicU32::new(init));
        // Even an empty allocation gets an address of its own, as on a device.
        let span = (bytes as u64).max(1).next_multiple_of(ADDRESS_ALIGNMENT);
        let address = self.next_address.fetch_add(span, Ordering::Relaxed);
        Ok(Arc::new(MockBlock {
            address,
            bytes,
            cells: cells.into_boxed_slice(),
            released: AtomicBool::new(false),
        }))
    }

    fn release(&self, block: Arc<MockBlock>) {
        self.in_use.fetch_sub(block.bytes, Ordering::Relaxed);
        block.released.store(true, Ordering::Release);
    }
}

/// A region of device memory an op touches: the first `len` elements of a block.
#[derive(Clone)]
pub(crate) struct Region {
    pub(crate) block: Arc<MockBlock>,
    pub(crate) len: usize,
}

impl Region {
    /// The elements; `len <= block.cells.len()` holds by construction (see `MockBuffer`).
    #[inline]
    pub(crate) fn cells(&self) -> &[AtomicU32] {
        &self.block.cells[..self.len]
    }

    pub(crate) fn address(&self) -> u64 {
        self.block.address
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}[{}]", self.block.address, self.len)
    }
}

/// A buffer of `f32` in simulated device memory. Dropping it frees the memory: a plain buffer
/// goes back to the device (and a graph that still touches it fails replay with
/// [`GraphError::DanglingBuffer`]); a pool buffer goes back to its pool.
///
/// ```
/// use accel_graph_api::Backend;
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// let a = backend.alloc_from(&[1.0, 2.0])?;
/// let b = backend.alloc(2)?;
/// assert_eq!(a.len(), 2);
/// assert_eq!(a.device_address() % 256, 0);
/// assert!(b.device_address() > a.device_address());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct MockBuffer {
    pub(crate) device: u64,
    pub(crate) len: usize,
    pub(crate) allocation: OwnedAllocation<MockAllocator>,
}

impl MockBuffer {
    pub(crate) fn region(&self) -> Region {
        Region {
            block: Arc::clone(self.allocation.get().block()),
            len: self.len,
        }
    }

    /// Number of `f32` elements (also [`DeviceBuffer::len`]; inherent so that no trait import
    /// is needed).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The virtual device address of the first element (also
    /// [`DeviceBuffer::device_address`]).
    pub fn device_address(&self) -> u64 {
        self.allocation.get().block().address
    }

    /// The [`accel_graph_api::Backend::instance_id`] of the backend that allocated it.
    pub fn instance_id(&self) -> u64 {
        self.device
    }

    /// The pool the buffer came from (`None` for a plain allocation).
    pub fn pool(&self) -> Option<accel_graph_api::PoolId> {
        self.allocation.get().pool()
    }
}

impl DeviceBuffer for MockBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn device_address(&self) -> u64 {
        MockBuffer::device_address(self)
    }
}

impl fmt::Debug for MockBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockBuffer")
            .field("address", &format_args!("{:#x}", self.device_address()))
            .field("len", &self.len)
            .field("pool", &self.pool())
            .finish()
    }
}
