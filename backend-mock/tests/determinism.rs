//! The same program gives the same results, node ids, device addresses and DOT bytes.

use accel_graph_api::prelude::*;
use accel_graph_mock::MockBackend;

/// Everything observable about one run of the program.
#[derive(Debug, PartialEq)]
struct Run {
    addresses: Vec<u64>,
    stream_indices: Vec<u64>,
    dot: Vec<u8>,
    topology: accel_graph_api::GraphTopology,
    results: Vec<Vec<f32>>,
}

fn program(backend: &MockBackend, dir: &std::path::Path, name: &str) -> Result<Run> {
    let x = backend.alloc_from(&[1.0, 2.0, 3.0])?;
    let y = backend.alloc_from(&[0.5; 3])?;
    let (main, side) = (backend.new_stream()?, backend.new_stream()?);
    let (fork, join) = (backend.new_event()?, backend.new_event()?);
    let mut g = backend.graph(GraphOptions::new().keep_graph(true))?;
    let tmp = backend.capture_on(&main, &mut g, || {
        let tmp = backend.alloc(3)?; // from the graph's pool
        backend.copy(&tmp, &x)?;
        backend.record_event(&fork)?;
        {
            let _s = backend.use_stream(&side)?;
            backend.wait_event(&fork)?;
            backend.scale(&y, 3.0)?;
            backend.record_event(&join)?;
        }
        backend.axpy(&tmp, 0.25, &x)?;
        backend.wait_event(&join)?;
        backend.axpy(&y, -1.5, &tmp)?;
        backend.fill(&x, 7.0)?;
        Ok(tmp)
    })?;
    g.replay()?;
    g.replay()?;
    let path = dir.join(name);
    g.debug_dump(&path)?;
    Ok(Run {
        addresses: vec![x.device_address(), y.device_address(), tmp.device_address()],
        stream_indices: vec![main.raw().index(), side.raw().index()],
        dot: std::fs::read(&path).map_err(|e| GraphError::io(&path, e))?,
        topology: g.nodes()?,
        results: vec![
            backend.download(&x)?,
            backend.download(&y)?,
            backend.download(&tmp)?,
        ],
    })
}

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("accel-graph-mock-det-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn two_identical_programs_are_identical_in_everything() {
    let dir = temp_dir();
    let a = program(&MockBackend::new(), &dir, "a.dot").unwrap();
    let b = program(&MockBackend::new(), &dir, "b.dot").unwrap();
    assert_eq!(a, b);
    assert!(!a.dot.is_empty());
    // Addresses are 256-aligned and come from the fixed base.
    for addr in &a.addresses {
        assert_eq!(addr % 256, 0);
        assert!(*addr >= accel_graph_mock::MockConfig::DEFAULT_BASE_ADDRESS);
    }
    // The DOT names every node's op and the addresses it touches.
    let dot = String::from_utf8(a.dot.clone()).unwrap();
    for op in ["copy", "scale", "axpy", "fill"] {
        assert!(dot.contains(op), "{op} missing from\n{dot}");
    }
    assert!(dot.contains(&format!("{:#x}", a.addresses[0])));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn replay_equals_eager_bit_for_bit() {
    let b = MockBackend::new();
    let vals: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
    let eager_x = b.alloc_from(&vals).unwrap();
    let eager_y = b.alloc_from(&vals).unwrap();
    let graph_x = b.alloc_from(&vals).unwrap();
    let graph_y = b.alloc_from(&vals).unwrap();
    let program = |x: &_, y: &_| -> Result<()> {
        b.axpy(y, 1.0 / 3.0, x)?;
        b.scale(x, 0.1)?;
        b.add_scalar(y, 1e-3)?;
        b.axpy(x, -2.7, y)
    };
    for _ in 0..3 {
        program(&eager_x, &eager_y).unwrap();
    }
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g, || program(&graph_x, &graph_y))
        .unwrap();
    for _ in 0..3 {
        g.replay().unwrap();
    }
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(
        bits(b.download(&eager_x).unwrap()),
        bits(b.download(&graph_x).unwrap())
    );
    assert_eq!(
        bits(b.download(&eager_y).unwrap()),
        bits(b.download(&graph_y).unwrap())
    );
}
