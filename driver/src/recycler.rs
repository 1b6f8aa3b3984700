//! `Recycler`: device blocks the pools let go, kept for later allocations instead of a driver
//! free and a driver allocation each time.
//!
//! A driver free is costly where it matters most: CUDA's `cuMemFree` (and HIP's `hipFree`)
//! waits for the whole device before it frees, so an eager step that makes and drops
//! temporaries paid one device-wide wait per temporary — most of a serving bucket's warm-up.
//! The recycler keeps the guarantee such a free gives — no work queued before the block was let
//! go can still be using it when another allocation gets it — but pays one device-wide wait
//! for many blocks:
//!
//! * A block let go goes to *quarantine*: work queued on any stream (the backend's, or a
//!   user's raw stream in the same context) may still use it.
//! * A device-wide wait that began after a block entered quarantine makes it *ready*: the
//!   backend's `synchronize`, or the one the allocator makes itself once quarantine holds
//!   [`QUARANTINE_BYTES`] or [`QUARANTINE_BLOCKS`] (never while a capture of the device runs:
//!   it waits for the captures to end, as frees do). At most [`READY_BYTES`] stay ready: the
//!   largest beyond that go back to the device.
//! * An allocation takes the smallest ready block that fits without wasting more than a
//!   quarter of it (or [`SMALL_SLACK`] bytes for small requests); none: the driver allocates.
//! * `empty_cache`, an allocation the driver refuses, and the backend's end give every kept
//!   block back to the driver (whose free waits for the device as before).

use std::collections::BTreeMap;

/// Quarantined bytes that make the allocator wait for the device and recycle them.
pub const QUARANTINE_BYTES: usize = 32 << 20;
/// Quarantined blocks that make the allocator wait for the device and recycle them: few
/// enough that an eager loop of temporaries soon reuses its own blocks (a driver allocation
/// costs as much as several kernel launches), many enough that the wait is rare.
pub const QUARANTINE_BLOCKS: usize = 64;
/// Ready bytes kept at most; beyond, the largest ready blocks go back to the device.
pub const READY_BYTES: usize = 64 << 20;
/// A request may take a ready block this many bytes larger than it (or a quarter larger,
/// whichever is more).
pub const SMALL_SLACK: usize = 4096;

/// Blocks of `bytes` bytes each, kept from the driver.
#[derive(Debug)]
pub(crate) struct Recycler<B> {
    /// Let go since the last device-wide wait began: queued work may still use them.
    quarantine: Vec<(B, usize)>,
    quarantine_bytes: usize,
    /// Let go before a device-wide wait that has completed: nothing uses them. By size.
    ready: BTreeMap<usize, Vec<B>>,
    ready_bytes: usize,
}

impl<B> Default for Recycler<B> {
    fn default() -> Self {
        Recycler {
            quarantine: Vec::new(),
            quarantine_bytes: 0,
            ready: BTreeMap::new(),
            ready_bytes: 0,
        }
    }
}

/// Blocks taken out of quarantine when a device-wide wait begins; ready once it completed.
#[derive(Debug)]
pub(crate) struct Waited<B>(Vec<(B, usize)>);

impl<B> Recycler<B> {
    /// Bytes kept (quarantined or ready).
    pub(crate) fn kept_bytes(&self) -> usize {
        self.quarantine_bytes.saturating_add(self.ready_bytes)
    }

    /// The smallest ready block of at least `bytes` bytes that wastes little, with its size.
    pub(crate) fn take(&mut self, bytes: usize) -> Option<(B, usize)> {
        let slack = (bytes / 4).max(SMALL_SLACK);
        let limit = bytes.saturating_add(slack);
        let (&size, blocks) = self.ready.range_mut(bytes..=limit).next()?;
        let block = blocks.pop()?;
        if blocks.is_empty() {
            self.ready.remove(&size);
        }
        self.ready_bytes = self.ready_bytes.saturating_sub(size);
        Some((block, size))
    }

    /// Keeps a block let go; true when quarantine is now full enough to wait for the device.
    pub(crate) fn keep(&mut self, block: B, bytes: usize) -> bool {
        self.quarantine.push((block, bytes));
        self.quarantine_bytes = self.quarantine_bytes.saturating_add(bytes);
        self.quarantine_bytes >= QUARANTINE_BYTES || self.quarantine.len() >= QUARANTINE_BLOCKS
    }

    /// Takes the quarantine as a device-wide wait begins.
    pub(crate) fn begin_wait(&mut self) -> Waited<B> {
        self.quarantine_bytes = 0;
        Waited(std::mem::take(&mut self.quarantine))
    }

    /// The wait ended: its blocks are ready if it `succeeded`, else they stay quarantined.
    pub(crate) fn end_wait(&mut self, waited: Waited<B>, succeeded: bool) {
        for (block, bytes) in waited.0 {
            if succeeded {
                self.ready_bytes = self.ready_bytes.saturating_add(bytes);
                self.ready.entry(bytes).or_default().push(block);
            } else {
                self.quarantine_bytes = self.quarantine_bytes.saturating_add(bytes);
                self.quarantine.push((block, bytes));
            }
        }
    }

    /// The largest ready blocks beyond [`READY_BYTES`], to give back to the driver.
    pub(crate) fn excess(&mut self) -> Vec<(B, usize)> {
        let mut excess = Vec::new();
        while self.ready_bytes > READY_BYTES {
            let Some(mut largest) = self.ready.last_entry() else {
                break;
            };
            let size = *largest.key();
            if let Some(block) = largest.get_mut().pop() {
                excess.push((block, size));
                self.ready_bytes = self.ready_bytes.saturating_sub(size);
            }
            if largest.get().is_empty() {
                largest.remove();
            }
        }
        excess
    }

    /// True when blocks wait in quarantine.
    pub(crate) fn quarantined(&self) -> bool {
        !self.quarantine.is_empty()
    }

    /// Every ready block, to give back to the driver (quarantined ones stay: work queued
    /// before they were let go may still use them).
    pub(crate) fn drain_ready(&mut self) -> Vec<(B, usize)> {
        self.ready_bytes = 0;
        std::mem::take(&mut self.ready)
            .into_iter()
            .flat_map(|(size, list)| list.into_iter().map(move |b| (b, size)))
            .collect()
    }

    /// Every block kept, to give back to the driver.
    pub(crate) fn drain(&mut self) -> Vec<(B, usize)> {
        let mut blocks = std::mem::take(&mut self.quarantine);
        for (size, list) in std::mem::take(&mut self.ready) {
            blocks.extend(list.into_iter().map(|b| (b, size)));
        }
        self.quarantine_bytes = 0;
        self.ready_bytes = 0;
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_reused_only_after_a_wait_that_began_after_it_was_let_go() {
        let mut r = Recycler::default();
        assert!(!r.keep(1u64, 1024));
        assert_eq!(
            r.take(1024),
            None,
            "quarantined: queued work may still use it"
        );
        let waited = r.begin_wait();
        // Let go while the wait runs: not covered by it.
        assert!(!r.keep(2u64, 1024));
        r.end_wait(waited, true);
        assert_eq!(r.take(1000), Some((1, 1024)));
        assert_eq!(r.take(1000), None);
        assert_eq!(r.kept_bytes(), 1024);
    }

    #[test]
    fn a_request_takes_the_smallest_block_that_wastes_little() {
        let mut r = Recycler::default();
        for (block, bytes) in [(1u64, 1 << 20), (2, 900 << 10), (3, 8 << 20)] {
            r.keep(block, bytes);
        }
        let waited = r.begin_wait();
        r.end_wait(waited, true);
        assert_eq!(r.take(850 << 10), Some((2, 900 << 10)));
        assert_eq!(r.take(4 << 20), None, "an 8 MiB block wastes half of it");
        assert_eq!(r.take(1 << 20), Some((1, 1 << 20)));
        assert_eq!(r.take(100), None, "8 MiB for 100 bytes: allocate instead");
        assert_eq!(r.drain().len(), 1);
        assert_eq!(r.kept_bytes(), 0);
    }

    #[test]
    fn quarantine_asks_for_a_wait_when_full_and_a_failed_wait_keeps_it() {
        let mut r = Recycler::default();
        let full = (0..QUARANTINE_BLOCKS)
            .map(|i| r.keep(i, 16))
            .collect::<Vec<_>>();
        assert_eq!(full.iter().filter(|&&f| f).count(), 1);
        assert!(full[QUARANTINE_BLOCKS - 1]);
        let waited = r.begin_wait();
        r.end_wait(waited, false);
        assert_eq!(r.take(16), None);
        assert_eq!(r.kept_bytes(), 16 * QUARANTINE_BLOCKS);
        assert!(r.keep(0, QUARANTINE_BYTES));
    }

    #[test]
    fn only_ready_blocks_are_given_back_before_the_end() {
        let mut r = Recycler::default();
        r.keep(1u32, 4096);
        let waited = r.begin_wait();
        r.end_wait(waited, true);
        r.keep(2u32, 4096);
        assert!(r.quarantined());
        assert_eq!(r.drain_ready(), vec![(1, 4096)]);
        assert_eq!(r.kept_bytes(), 4096, "the quarantined block stays");
        assert_eq!(r.drain(), vec![(2, 4096)]);
        assert_eq!(r.kept_bytes(), 0);
    }

    #[test]
    fn ready_blocks_beyond_the_bound_go_back_largest_first() {
        let mut r = Recycler::default();
        let sizes = [READY_BYTES / 2, READY_BYTES / 2, 1 << 20, 4096];
        for (i, &bytes) in sizes.iter().enumerate() {
            r.keep(i, bytes);
        }
        let waited = r.begin_wait();
        r.end_wait(waited, true);
        let excess = r.excess();
        assert_eq!(excess.len(), 1);
        assert_eq!(excess[0].1, READY_BYTES / 2);
        assert!(r.excess().is_empty());
        assert_eq!(r.kept_bytes(), READY_BYTES / 2 + (1 << 20) + 4096);
    }
}
