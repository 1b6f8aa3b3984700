//! Heap use of utilities made and dropped in large numbers: nothing may stay behind. A test
//! binary of its own, with a counting global allocator tracking the process's live heap bytes.
//!
//! The count is the (it runs in about a second in a debug build); the leak it guards
//! against (every cache's two streams kept by the mock for good: about 100 bytes a cache, 10 MB
//! over 100,000 caches) would be megabytes, far above the allowance for noise.

use std::alloc::System;

use cap::Cap;

use accel_graph_api::{PortableOps, Result, prelude::*};
use accel_graph_mock::MockBackend;
use accel_graph_utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes};

/// Counts the bytes of live heap allocations, process-wide.
#[global_allocator]
static GLOBAL: Cap<System> = Cap::new(System, usize::MAX);

/// Live heap bytes now.
fn live_bytes() -> isize {
    GLOBAL.allocated() as isize
}

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
    let before = live_bytes();
    make_and_drop(CACHES)?;
    let grown = live_bytes() - before;
    assert!(
        grown < ALLOWANCE,
        "{CACHES} bucketed caches made and dropped left {grown} bytes on the heap"
    );
    Ok(())
}
