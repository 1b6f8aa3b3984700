//! 10.01: sizes computed from a caller's element count use checked arithmetic, so a count whose
//! byte size (or its rounding up to a pool block) overflows is `OutOfMemory`, never a wrapped,
//! tiny allocation.

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions};

use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, expect_all, expect_err, new_graph, on_stream, replay_on},
};

/// Element counts that overflow: `usize::MAX / 4` elements fit in `usize` bytes but not once
/// rounded up to a pool block (the rounding used to wrap to a 0-byte block inside captures);
/// the other two overflow the byte count itself.
const HUGE: [(usize, &str); 3] = [
    (usize::MAX / 4, "usize::MAX / 4"),
    (usize::MAX / 2 + 1, "usize::MAX / 2 + 1"),
    (usize::MAX, "usize::MAX"),
];

/// Every huge count is refused with `OutOfMemory` naming the backend, and changes no memory
/// statistic.
fn refuse_huge<B: Backend>(b: &B, where_: &str) -> CaseResult {
    let before = b.memory_stats();
    for (len, name) in HUGE {
        let error = expect_err!(
            b.alloc::<f32>(len),
            GraphError::OutOfMemory { .. },
            format!("alloc({name} elements) {where_}")
        );
        if let GraphError::OutOfMemory { backend, .. } = error {
            ensure!(
                backend == b.kind().name(),
                "alloc({name} elements) {where_}: OutOfMemory names backend {backend:?}, not \
                 {:?}",
                b.kind().name()
            );
        }
        let after = b.memory_stats();
        ensure!(
            after == before,
            "alloc({name} elements) {where_} was refused but changed the memory: before \
             {before:?}, after {after:?}"
        );
    }
    Ok(())
}

/// 10.01: outside a capture and inside one, `alloc` of `usize::MAX / 4`, `usize::MAX / 2 + 1`
/// and `usize::MAX` elements is `OutOfMemory`; the capture in progress is not disturbed (it
/// goes on, allocates from its pool, ends and replays what it recorded), and nothing is held
/// afterwards.
pub(super) fn overflowing_sizes<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    let before = b.memory_stats();
    refuse_huge(b, "outside a capture")?;

    let mut g = new_graph(b, GraphOptions::new())?;
    {
        let _current = on_stream(b, &stream)?;
        g.capture_begin().ctx("capture_begin")?;
        b.add_scalar(&x, 1.0).ctx("add_scalar inside the capture")?;
        refuse_huge(b, "inside a capture")?;
        // The capture is still usable: it allocates from its pool and records more work.
        let tmp = b.alloc(8).ctx("a pool allocation after the refused ones")?;
        b.fill(&tmp, 2.0).ctx("fill inside the capture")?;
        b.axpy(&x, 1.0, &tmp).ctx("axpy inside the capture")?;
        drop(tmp);
        g.capture_end()
            .ctx("capture_end after the refused allocations")?;
    }
    expect_all(b, &x, 0.0, "x after the capture (nothing ran)")?;
    replay_on(b, &stream, &mut g)?;
    expect_all(b, &x, 3.0, "one replay of x += 1; x += 2")?;
    drop(g);
    let after = b.memory_stats();
    ensure!(
        after == before,
        "memory held after the graph was dropped: before {before:?}, after {after:?}"
    );
    Ok(())
}
