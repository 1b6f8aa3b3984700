//! Mock-only hardening checks of the utilities, beyond the conformance suite's §10 cases
//! (which every backend runs): on the mock, instances of one device *do* hand out the same
//! addresses, so the identity checks meet the exact collision they guard against; and a load
//! can be made to fail half-way with an injected allocation fault.

use accel_graph_api::{DeviceBuffer, GraphError, MemoryStats, PortableOps, Result, prelude::*};
use accel_graph_mock::{FaultSite, MockBackend, MockConfig};
use accel_graph_utils::{
    BucketedCacheOptions, BucketedGraphCache, CaptureSizes, GraphedCallableOptions, Stage,
    StaticBufferLoader, make_graphed_callable,
};

type Buf = accel_graph_mock::MockBuffer;

/// Two fresh instances of the simulated device `device`: their allocations start at the same
/// address. Each test uses a device of its own: a global capture on a device forbids plain
/// allocations through every instance of it, and tests run in parallel.
fn two_instances(device: u32) -> Result<(MockBackend, MockBackend)> {
    Ok((
        MockBackend::with_config(MockConfig::shared(device))?,
        MockBackend::with_config(MockConfig::shared(device))?,
    ))
}

fn double(b: &MockBackend, x: &[&Buf]) -> Result<Vec<Buf>> {
    let y = b.alloc(x[0].len())?;
    b.copy(&y, x[0])?;
    b.scale(&y, 2.0)?;
    Ok(vec![y])
}

/// A graphed call with another instance's buffer at the static input's very address: refused,
/// and nothing replayed or copied. (Compared by address alone it was the static input: the
/// copy was skipped and the replay read the old input.)
#[test]
fn a_graphed_call_refuses_a_foreign_buffer_at_the_static_address() -> Result<()> {
    let (p, q) = two_instances(7001)?;
    let sample = p.alloc_from(&[1.0; 4])?;
    let mut g = make_graphed_callable(&p, double, vec![sample], GraphedCallableOptions::new())?;
    let foreign = q.alloc_from(&[5.0; 4])?;
    assert_eq!(
        foreign.device_address(),
        g.static_inputs()[0].device_address()
    );
    p.reset_counters();
    assert!(matches!(
        g.call(&[&foreign]),
        Err(GraphError::ForeignObject { what: "buffer" })
    ));
    let c = p.counters();
    assert_eq!((c.replays, c.eager_ops), (0, 0));
    assert_eq!(g.stats().replays, 0);
    Ok(())
}

/// The same for the static buffer loader: a foreign buffer at the static buffer's address.
#[test]
fn a_load_refuses_a_foreign_buffer_at_the_static_address() -> Result<()> {
    let (p, q) = two_instances(7002)?;
    let mut loader = StaticBufferLoader::new(&p)?;
    let x = p.alloc_from(&[1.0; 4])?;
    let address = loader.load(Stage::Training, 0, &[&x])?[0].device_address();
    let _first = q.alloc::<f32>(4)?;
    let foreign = q.alloc_from(&[5.0; 4])?;
    assert_eq!(foreign.device_address(), address);
    assert!(matches!(
        loader.load(Stage::Training, 0, &[&foreign]),
        Err(GraphError::ForeignObject { what: "buffer" })
    ));
    assert_eq!(
        p.download(&loader.buffers(Stage::Training)[0][0])?,
        vec![1.0; 4]
    );
    Ok(())
}

/// The same for `run_device` of a bucketed cache, with a batch filling its bucket exactly.
#[test]
fn run_device_refuses_a_foreign_buffer_at_the_static_address() -> Result<()> {
    let (p, q) = two_instances(7003)?;
    let options = BucketedCacheOptions::new().warmup_iters(0);
    let mut cache = BucketedGraphCache::new(&p, double, CaptureSizes::new([4])?, vec![1], options)?;
    cache.capture_all()?;
    let foreign = q.alloc_from(&[5.0; 4])?;
    assert_eq!(
        foreign.device_address(),
        cache.static_inputs(4).unwrap()[0].device_address()
    );
    p.reset_counters();
    assert!(matches!(
        cache.run_device(&[&foreign]),
        Err(GraphError::ForeignObject { what: "buffer" })
    ));
    assert_eq!(p.counters().replays, 0);
    assert_eq!(cache.stats().runs, 0);
    Ok(())
}

/// A bucket whose rows overflow the address space is `OutOfMemory` — as `alloc` answers a
/// byte size that overflows, and as `GraphError::OutOfMemory` documents — not an argument
/// error; nothing is captured or kept, and the cache still serves its other buckets.
#[test]
fn a_bucket_whose_size_overflows_is_out_of_memory() -> Result<()> {
    let b = MockBackend::new();
    let before = b.memory_stats();
    let huge = usize::MAX / 2;
    let options = BucketedCacheOptions::new().warmup_iters(0);
    let mut cache =
        BucketedGraphCache::new(&b, double, CaptureSizes::new([4, huge])?, vec![4], options)?;
    let refused = cache.capture_all();
    assert!(
        matches!(
            refused,
            Err(GraphError::OutOfMemory {
                backend: "mock",
                requested_bytes: usize::MAX
            })
        ),
        "{refused:?}"
    );
    assert!(cache.graph(huge).is_none());
    let batch = [1.0; 16];
    let run = cache.run(&[&batch])?;
    assert_eq!(run.bucket(), Some(4));
    drop(run);
    drop(cache);
    assert_eq!(b.memory_stats(), before);
    Ok(())
}

/// A first load that fails registers nothing and keeps no memory, whether it fails half-way
/// through allocating the static buffers (an injected allocation fault) or after allocating
/// them (an input of another instance cannot be copied); the next load allocates afresh and
/// copies. (The loader used to register the microbatch before copying into it: after a failed
/// copy the next load found the microbatch "loaded" and reused buffers never written.)
#[test]
fn a_failed_first_load_registers_nothing() -> Result<()> {
    let (b, other) = two_instances(7004)?;
    let (x, y) = (b.alloc_from(&[1.0; 4])?, b.alloc_from(&[2.0; 2])?);
    let foreign = other.alloc_from(&[9.0; 2])?;
    let mut loader = StaticBufferLoader::new(&b)?;
    let before = b.memory_stats();
    b.inject_fault(FaultSite::Alloc, 2);
    assert!(matches!(
        loader.load(Stage::Training, 0, &[&x, &y]),
        Err(GraphError::InjectedFault {
            operation: "alloc",
            ..
        })
    ));
    assert!(loader.buffers(Stage::Training).is_empty());
    assert_eq!(b.memory_stats(), before);
    assert!(matches!(
        loader.load(Stage::Training, 0, &[&x, &foreign]),
        Err(GraphError::ForeignObject { what: "buffer" })
    ));
    assert!(loader.buffers(Stage::Training).is_empty());
    assert_eq!(b.memory_stats(), before);
    let statics = loader.load(Stage::Training, 0, &[&x, &y])?;
    assert_eq!(b.download(&statics[0])?, vec![1.0; 4]);
    assert_eq!(b.download(&statics[1])?, vec![2.0; 2]);
    drop(loader);
    drop((x, y));
    assert_eq!(b.memory_stats(), MemoryStats::default());
    Ok(())
}
