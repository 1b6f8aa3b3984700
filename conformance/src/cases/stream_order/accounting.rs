//! 12.04: the memory books while `record_stream`ed frees wait for their streams.

use accel_graph_api::{AcceleratorGraph, Backend, BlockState, DeviceBuffer, GraphOptions};

use super::order_after;
use crate::{
    Target,
    check::{CaseResult, Ctx, ensure, new_graph, on_stream},
};

/// Elements of each buffer.
const ELEMENTS: usize = 1000;

/// The books after a step: `reserved >= allocated + graph-held + pending`; the snapshot's live
/// blocks are the allocated bytes and the live buffers, its pending blocks the pending bytes,
/// its graph-held blocks within the graph-held bytes, and all its blocks within the reserved
/// bytes.
fn books_hold<B: Backend>(b: &B, step: &str) -> CaseResult {
    let stats = b.memory_stats();
    let snapshot = b.memory_snapshot();
    let sum = |state: BlockState| -> usize {
        snapshot
            .iter()
            .filter(|k| k.state == state)
            .map(|k| k.bytes)
            .sum()
    };
    let live = snapshot
        .iter()
        .filter(|k| k.state == BlockState::Live)
        .count();
    let held = snapshot.iter().map(|k| k.bytes).sum::<usize>();
    ensure!(
        stats.reserved_bytes
            >= stats.allocated_bytes + stats.graph_held_bytes + stats.pending_free_bytes,
        "{step}: reserved bytes below allocated + graph-held + pending: {stats:?}"
    );
    ensure!(
        sum(BlockState::Live) == stats.allocated_bytes && live == stats.live_buffers,
        "{step}: the snapshot's live blocks ({live}, {} bytes) are not the allocated ones \
         ({stats:?}): {snapshot:?}",
        sum(BlockState::Live)
    );
    ensure!(
        sum(BlockState::PendingFree) == stats.pending_free_bytes,
        "{step}: the snapshot's pending blocks ({} bytes) are not the pending bytes \
         ({stats:?}): {snapshot:?}",
        sum(BlockState::PendingFree)
    );
    ensure!(
        sum(BlockState::GraphHeld) <= stats.graph_held_bytes && held <= stats.reserved_bytes,
        "{step}: the snapshot holds more than the statistics say ({stats:?}): {snapshot:?}"
    );
    Ok(())
}

/// The state the snapshot gives the block at `address`, if it still holds one there.
fn state_at<B: Backend>(b: &B, address: u64) -> Option<BlockState> {
    b.memory_snapshot()
        .iter()
        .find(|k| k.address == address)
        .map(|k| k.state)
}

/// 12.04: a program over two streams, the books checked after every step. An eager buffer
/// `record_stream`ed onto the side stream and dropped is pending or gone, never live. In a
/// capture that forks the side stream, a pool buffer used there, `record_stream`ed onto it
/// and dropped is pending (the side stream captures: its progress past the drop can only be
/// recorded after the capture), still after the capture, and free in the graph's pool once
/// the streams are waited for; the graph replays, and everything goes when it is dropped.
pub(super) fn books_stay_true<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let baseline = b.memory_stats();
    let main = b.new_stream().ctx("new_stream")?;
    let side = b.new_stream().ctx("new_stream")?;
    let (fork, join) = (
        b.new_event().ctx("new_event")?,
        b.new_event().ctx("new_event")?,
    );
    books_hold(b, "start")?;

    let x = b.alloc_from(&[1.0; ELEMENTS]).ctx("alloc x")?;
    books_hold(b, "x allocated")?;
    b.record_stream(&x, &side).ctx("record_stream(x, side)")?;
    {
        let _side = on_stream(b, &side)?;
        b.add_scalar(&x, 1.0).ctx("x += 1 on the side stream")?;
    }
    books_hold(b, "x used on the side stream")?;
    let x_address = x.device_address();
    drop(x);
    books_hold(b, "x dropped")?;
    let x_state = state_at(b, x_address);
    ensure!(
        matches!(x_state, None | Some(BlockState::PendingFree)),
        "x's block after its drop: {x_state:?}, expected pending or gone"
    );

    let mut g = new_graph(b, GraphOptions::new())?;
    let (a_address, a_bytes) = {
        let _main = on_stream(b, &main)?;
        g.capture_begin().ctx("capture_begin")?;
        let a = b.alloc(ELEMENTS).ctx("alloc a in the capture")?;
        b.fill(&a, 2.0).ctx("fill a")?;
        books_hold(b, "a allocated in the capture")?;
        order_after(b, &side, &main, &fork).ctx("fork the side stream")?;
        {
            let _side = on_stream(b, &side)?;
            b.add_scalar(&a, 1.0).ctx("a += 1 on the side stream")?;
        }
        b.record_stream(&a, &side).ctx("record_stream(a, side)")?;
        books_hold(b, "a used on the side stream")?;
        let address = a.device_address();
        let bytes = b
            .memory_snapshot()
            .iter()
            .find(|k| k.address == address)
            .map_or(0, |k| k.bytes);
        drop(a);
        books_hold(b, "a dropped in the capture")?;
        let state = state_at(b, address);
        let pending = b.memory_stats().pending_free_bytes;
        ensure!(
            state == Some(BlockState::PendingFree) && pending >= bytes,
            "a's block dropped while the side stream (capturing) may use it: {state:?}, \
             {pending} pending bytes; expected PendingFree, at least {bytes} bytes"
        );
        order_after(b, &main, &side, &join).ctx("join the side stream")?;
        books_hold(b, "side stream joined")?;
        g.capture_end().ctx("capture_end")?;
        (address, bytes)
    };
    books_hold(b, "capture ended")?;
    let state = state_at(b, a_address);
    ensure!(
        matches!(
            state,
            Some(BlockState::PendingFree) | Some(BlockState::Free)
        ),
        "a's block right after the capture: {state:?}, expected pending or free"
    );
    // The first synchronize records the side stream's progress past the drop, the second
    // waits for it; the allocation after it processes the free.
    for round in 0..2 {
        b.synchronize().ctx("synchronize")?;
        drop(b.alloc::<f32>(1).ctx("alloc")?);
        books_hold(b, &format!("synchronize {round}"))?;
    }
    let state = state_at(b, a_address);
    let stats = b.memory_stats();
    ensure!(
        state == Some(BlockState::Free) && stats.pending_free_bytes == 0,
        "a's block ({a_bytes} bytes) once the streams were waited for: {state:?}, expected \
         free in the graph's pool; {stats:?}"
    );
    {
        let _main = on_stream(b, &main)?;
        g.replay().ctx("replay")?;
    }
    b.synchronize().ctx("synchronize")?;
    books_hold(b, "replayed")?;
    drop(g);
    books_hold(b, "graph dropped")?;
    let after = b.memory_stats();
    ensure!(
        after == baseline,
        "memory not back after the graph was dropped: before {baseline:?}, after {after:?}"
    );
    Ok(())
}
