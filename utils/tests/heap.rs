//! Heap use of utilities made and dropped in large numbers: nothing may stay behind. A test
//! binary of its own, with a counting global allocator tracking the process's live heap bytes.
//!
//! The count is the (it runs in about a second in a debug build); the leak it guards
//! against (every cache's two streams kept by the mock for good: about 100 bytes a cache, 10 MB
//! over 100,000 caches) would be megabytes, far above the allowance for noise.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicIsize, Ordering},
};

use accel_graph_api::{PortableOps, Result, prelude::*};
use accel_graph_mock::MockBackend;
use accel_graph_utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes};

/// Counts the bytes of live heap allocations, process-wide.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

fn count(delta: isize) {
    LIVE_BYTES.fetch_add(delta, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator with the caller's arguments, whose
// contracts are the same; the counting touches no memory of the allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc` for `ptr` and `layout`; `new_size` is the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Growth of the live heap allowed: noise, far below the leak guarded against.
const ALLOWANCE: isize = 256 * 1024;

type Buf = accel_graph_mock::MockBuffer;

fn double(b: &MockBackend, x: &[&Buf]) -> Result<Vec<Buf>> {
    let y = b.alloc(x[0].len())?;
    b.copy(&y, x[0])?;
    b.scale(&y, 2.0)?;
    Ok(vec![y])
}

/// Bucketed caches made and dropped (each with its two streams and its pool id) return all
/// their memory. The only test of this binary, so nothing else allocates while it measures.
#[test]
fn bucketed_caches_made_and_dropped_keep_no_memory() -> Result<()> {
    const CACHES: usize = 100_000;
    let backend = MockBackend::new();
    let sizes = CaptureSizes::new([1, 2, 4])?;
    let make_and_drop = |n: usize| -> Result<()> {
        for _ in 0..n {
            let cache = BucketedGraphCache::new(
                &backend,
                double,
                sizes.clone(),
                vec![1],
                BucketedCacheOptions::new(),
            )?;
            drop(cache);
        }
        Ok(())
    };
    make_and_drop(100)?;
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    make_and_drop(CACHES)?;
    let grown = LIVE_BYTES.load(Ordering::SeqCst) - before;
    assert!(
        grown < ALLOWANCE,
        "{CACHES} bucketed caches made and dropped left {grown} bytes on the heap"
    );
    Ok(())
}
