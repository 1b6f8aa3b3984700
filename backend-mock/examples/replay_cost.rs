//! Host cost of the mock per graph node: capture, instantiate and replay of 1k / 10k / 100k
//! node graphs of tiny buffers, side by side with eager execution of the same ops (baseline).
//!
//! Run with `cargo run --release -p accel-graph-mock --example replay_cost`.

use std::time::{Duration, Instant};

use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, PortableOps, Result};
use accel_graph_mock::{MockBackend, MockBuffer};

/// Elements per buffer: tiny, so the figures measure per-node overhead, not arithmetic.
const ELEMENTS: usize = 4;
/// The target of the design: at most this many nanoseconds per replayed node.
const TARGET_NS_PER_NODE: f64 = 50.0;

/// Issues op number `i` of the benchmark program (a mix of every portable op).
fn issue(b: &MockBackend, bufs: &[MockBuffer; 3], i: usize) -> Result<()> {
    let [x, y, z] = bufs;
    match i % 5 {
        0 => b.add_scalar(x, 1.0),
        1 => b.scale(y, 0.5),
        2 => b.axpy(y, 0.25, x),
        3 => b.copy(z, y),
        _ => b.fill(x, 1.0),
    }
}

fn ns_per(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e9 / n as f64
}

/// Runs `f` (which times its own measured part) until about `budget` has passed; returns
/// the fastest time: the cost of the work itself, without the preemptions a shared machine
/// adds to some runs.
fn best_time(budget: Duration, mut f: impl FnMut() -> Duration) -> Duration {
    let start = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < 3 || start.elapsed() < budget {
        samples.push(f());
    }
    samples.into_iter().min().unwrap_or_default()
}

/// Times one call of `f`.
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn main() -> Result<()> {
    let b = MockBackend::new();
    let bufs = [
        b.alloc_from(&[1.0; ELEMENTS])?,
        b.alloc_from(&[2.0; ELEMENTS])?,
        b.alloc_from(&[0.0; ELEMENTS])?,
    ];
    let stream = b.new_stream()?;
    let budget = Duration::from_millis(300);
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>12} {:>14} {:>8}",
        "nodes",
        "eager ns/op",
        "capture ns/n",
        "instant. ns/n",
        "replay ns/n",
        "replay/eager",
        "target"
    );
    for nodes in [1_000usize, 10_000, 100_000] {
        let eager = best_time(budget, || {
            timed(|| {
                for i in 0..nodes {
                    issue(&b, &bufs, i).expect("eager op");
                }
            })
        });
        let mut graph = b.graph(GraphOptions::new().keep_graph(true))?;
        let capture = best_time(budget, || {
            graph.reset(); // not timed: dropping the previous capture
            timed(|| {
                b.capture_on(&stream, &mut graph, || -> Result<()> {
                    for i in 0..nodes {
                        issue(&b, &bufs, i)?;
                    }
                    Ok(())
                })
                .expect("capture");
            })
        });
        let instantiate = best_time(budget, || {
            timed(|| graph.instantiate().expect("instantiate"))
        });
        let replay = best_time(budget, || timed(|| graph.replay().expect("replay")));
        let replay_ns = ns_per(replay, nodes);
        println!(
            "{:>8} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>14.2} {:>8}",
            nodes,
            ns_per(eager, nodes),
            ns_per(capture, nodes),
            ns_per(instantiate, nodes),
            replay_ns,
            replay.as_secs_f64() / eager.as_secs_f64(),
            if replay_ns <= TARGET_NS_PER_NODE {
                "met"
            } else {
                "MISSED"
            }
        );
    }
    println!(
        "(best of repeated runs; buffers of {ELEMENTS} f32; capture = capture_begin..capture_end incl. \
         recording; baseline = eager execution of the same ops; target <= \
         {TARGET_NS_PER_NODE} ns per replayed node)"
    );
    Ok(())
}
