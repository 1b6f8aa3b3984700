//! 10.02 – 10.04: the utilities tell buffers apart by (instance, address), never by address
//! alone. Instances of one device may hand out the same address (the mock's instances all start
//! at one base address), so a buffer of another instance sitting at a static buffer's address
//! must be refused with `ForeignObject` — it used to be taken for the static buffer itself, the
//! copy skipped, and the replay run on stale data.

use accel_graph_api::{Backend, DeviceBuffer, GraphError};
use accel_graph_utils::{
    BucketedCacheOptions, BucketedGraphCache, CaptureSizes, GraphedCallableOptions, Stage,
    StaticBufferLoader, make_graphed_callable,
};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, expect_err},
};

/// Elements of the buffers of these cases.
const LEN: usize = 16;

/// `y = 2x` into a new buffer.
fn double<B: Backend>(
    b: &B,
    x: &[&B::Buffer<f32>],
) -> accel_graph_api::Result<Vec<B::Buffer<f32>>> {
    let y = b.alloc(x[0].len())?;
    b.copy(&y, x[0])?;
    b.scale(&y, 2.0)?;
    Ok(vec![y])
}

/// A buffer of another instance, placed where a case wants it if that instance allows.
struct Placed<B: Backend> {
    buffer: B::Buffer<f32>,
    /// Whether it sits at the address asked for.
    at_address: bool,
    /// The buffers allocated on the way, kept so that the address is not handed out again.
    _passed: Vec<B::Buffer<f32>>,
}

/// A buffer of `other` holding `value`, at `address` if `other` hands that address out within
/// a few allocations of `LEN` elements (it does on the mock, whose fresh instances allocate
/// from the same base address).
fn buffer_at<B: Backend>(other: &B, address: u64, value: f32) -> Result<Placed<B>, String> {
    let mut passed = Vec::new();
    for _ in 0..4 {
        let buffer = other
            .alloc_from(&[value; LEN])
            .ctx("alloc_from on the other instance")?;
        if buffer.device_address() == address {
            return Ok(Placed {
                buffer,
                at_address: true,
                _passed: passed,
            });
        }
        passed.push(buffer);
    }
    let buffer = passed.pop().ok_or("no buffer was allocated")?;
    Ok(Placed {
        buffer,
        at_address: false,
        _passed: passed,
    })
}

/// Says whether the case met the collision it is about (it is checked either way).
fn report(case: &str, same_address: bool) {
    println!(
        "{case}: the other instance's buffer {} the static buffer's device address",
        if same_address { "has" } else { "does not have" }
    );
}

/// 10.02: `GraphedCallable::call` refuses a buffer of another instance, even at the static
/// input's address: `ForeignObject`, no replay, no copy, the static input unchanged; the
/// callable then still serves its own instance's buffers.
pub(super) fn graphed_callable<B: Backend>(t: &Target<B>) -> CaseResult {
    // Two fresh instances: their first allocations are the ones that may share an address.
    let (p, q) = (t.another_instance()?, t.another_instance()?);
    let sample = p.alloc_from(&[1.0; LEN]).ctx("alloc_from (sample)")?;
    let options = GraphedCallableOptions::new().warmup_iters(1);
    let mut graphed = make_graphed_callable(&p, double::<B>, vec![sample], options)
        .ctx("make_graphed_callable")?;
    let static_input = graphed.static_inputs()[0].clone();
    let placed = buffer_at(&q, static_input.device_address(), 5.0)?;
    let foreign = &placed.buffer;
    let stats = graphed.stats();
    expect_err!(
        graphed.call(&[foreign]),
        GraphError::ForeignObject { what: "buffer" },
        "a graphed call with another instance's buffer"
    );
    ensure!(
        graphed.stats() == stats,
        "the refused call changed the statistics: before {stats:?}, after {:?}",
        graphed.stats()
    );
    expect_all(
        &p,
        &static_input,
        1.0,
        "the static input after the refused call",
    )?;
    let own = p.alloc_from(&[3.0; LEN]).ctx("alloc_from")?;
    let out = graphed
        .call(&[&own])
        .ctx("a graphed call with an own buffer")?;
    expect_all(
        &p,
        &out[0],
        6.0,
        "the output of the graphed call with x = 3",
    )?;
    report("10.02", placed.at_address);
    Ok(())
}

/// 10.03: `StaticBufferLoader::load` refuses a buffer of another instance, even at the static
/// buffer's address: `ForeignObject`, the static buffer unchanged; loads of own buffers still
/// work.
pub(super) fn static_buffer_loader<B: Backend>(t: &Target<B>) -> CaseResult {
    let (p, q) = (t.another_instance()?, t.another_instance()?);
    let mut loader = StaticBufferLoader::new(&p).ctx("StaticBufferLoader::new")?;
    let first = p.alloc_from(&[1.0; LEN]).ctx("alloc_from")?;
    let address = loader
        .load(Stage::Training, 0, &[&first])
        .ctx("first load")?[0]
        .device_address();
    let placed = buffer_at(&q, address, 5.0)?;
    let foreign = &placed.buffer;
    expect_err!(
        loader.load(Stage::Training, 0, &[foreign]),
        GraphError::ForeignObject { what: "buffer" },
        "a load of another instance's buffer"
    );
    expect_all(
        &p,
        &loader.buffers(Stage::Training)[0][0],
        1.0,
        "the static buffer after the refused load",
    )?;
    let second = p.alloc_from(&[2.0; LEN]).ctx("alloc_from")?;
    loader
        .load(Stage::Training, 0, &[&second])
        .ctx("a load of an own buffer")?;
    expect_all(
        &p,
        &loader.buffers(Stage::Training)[0][0],
        2.0,
        "the static buffer after a good load",
    )?;
    report("10.03", placed.at_address);
    Ok(())
}

/// 10.04: `BucketedGraphCache::run_device` refuses a buffer of another instance filling a
/// bucket exactly, even at the bucket's static input address: `ForeignObject`, no run
/// counted, the static input unchanged; own buffers still run.
pub(super) fn bucketed_cache<B: Backend>(t: &Target<B>) -> CaseResult {
    let (p, q) = (t.another_instance()?, t.another_instance()?);
    let sizes = CaptureSizes::new([LEN]).ctx("CaptureSizes")?;
    let options = BucketedCacheOptions::new().warmup_iters(0).pad_value(1.0);
    let mut cache = BucketedGraphCache::new(&p, double::<B>, sizes, vec![1], options)
        .ctx("BucketedGraphCache::new")?;
    cache.capture_all().ctx("capture_all")?;
    let static_input = cache.static_inputs(LEN).ok_or("bucket not captured")?;
    let address = static_input[0].device_address();
    expect_all(&p, &static_input[0], 1.0, "the static input after capture")?;
    let placed = buffer_at(&q, address, 5.0)?;
    let foreign = &placed.buffer;
    let stats = cache.stats();
    expect_err!(
        cache.run_device(&[foreign]),
        GraphError::ForeignObject { what: "buffer" },
        "run_device with another instance's buffer"
    );
    ensure!(
        cache.stats() == stats,
        "the refused run changed the statistics: before {stats:?}, after {:?}",
        cache.stats()
    );
    let static_input = cache.static_inputs(LEN).ok_or("bucket not captured")?;
    expect_all(
        &p,
        &static_input[0],
        1.0,
        "the static input after the refused run",
    )?;
    let own = p.alloc_from(&[3.0; LEN]).ctx("alloc_from")?;
    let run = cache
        .run_device(&[&own])
        .ctx("run_device with an own buffer")?;
    let got = run.download(0).ctx("download")?;
    ensure!(got == [6.0; LEN], "run_device with x = 3 gave {got:?}");
    report("10.04", placed.at_address);
    Ok(())
}
