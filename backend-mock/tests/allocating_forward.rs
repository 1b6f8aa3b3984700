//! Work that allocates per op, captured as it is (what candle and cudarc code do on CUDA, where
//! the allocations become graph memory nodes): a forward of 128 ops, each allocating its output
//! inside the capture and dropping its input, its result outliving the capture, replayed
//! 10,000 times on the mock — each checked replay equal to the eager forward bit for bit, the
//! result at one address, memory flat; conformance case 5.08f runs the same on every backend at
//! the suite's size.

use accel_graph_api::prelude::*;
use accel_graph_mock::{MockBackend, MockBuffer};

const LEN: usize = 256;
const OPS: usize = 128;
const REPLAYS: usize = 10_000;

fn forward(b: &MockBackend, x: &MockBuffer<f32>) -> Result<MockBuffer<f32>> {
    let mut current = b.alloc::<f32>(LEN)?;
    b.copy(&current, x)?;
    for i in 0..OPS {
        let next = b.alloc::<f32>(LEN)?;
        b.copy(&next, &current)?;
        b.scale(&next, if i % 2 == 0 { 0.5 } else { 1.75 })?;
        b.add_scalar(&next, (i % 7) as f32)?;
        current = next;
    }
    Ok(current)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn ten_thousand_replays_of_a_forward_that_allocates_per_op() -> Result<()> {
    let b = MockBackend::new();
    let host: Vec<f32> = (0..LEN).map(|i| (i % 97) as f32 * 0.25).collect();
    let x = b.alloc_from(&host)?;
    let eager = bits(&b.download(&forward(&b, &x)?)?);
    let stream = b.new_stream()?;
    let before = b.memory_stats();
    let mut graph = b.graph(GraphOptions::new())?;
    let result = b.capture_on(&stream, &mut graph, || forward(&b, &x))?;
    let address = result.device_address();
    let _on = b.use_stream(&stream)?;
    let mut after_first = None;
    for r in 0..REPLAYS {
        graph.replay()?;
        if r == 0 || r % 1000 == 999 {
            assert_eq!(bits(&b.download(&result)?), eager, "replay {}", r + 1);
        }
        if r == 0 {
            after_first = Some(b.memory_stats());
        }
    }
    assert_eq!(
        Some(b.memory_stats()),
        after_first,
        "memory grew over the replays"
    );
    assert_eq!(result.device_address(), address, "the result moved");
    drop(result);
    graph.replay()?;
    b.synchronize()?;
    graph.reset();
    assert_eq!(b.memory_stats(), before, "memory held after the reset");
    Ok(())
}
