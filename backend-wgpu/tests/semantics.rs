//! The backend's own checks of wgpu specifics (fork/join edges, host callbacks in replay, pool
//! addresses, axpy on one buffer) on whatever adapter wgpu finds (lavapipe in CI). Without an
//! adapter every check is reported ignored, with the reason.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, CaptureExt, DeviceBuffer, GraphError,
    GraphOptions, GraphState, NodeKind, Result,
};
use accel_graph_wgpu::WgpuBackend;
use libtest_mimic::{Arguments, Failed, Trial};

type Check = fn(&WgpuBackend) -> Result<()>;

const CHECKS: &[(&str, Check)] = &[
    (
        "capture_records_and_replay_runs",
        capture_records_and_replay_runs,
    ),
    (
        "replay_equals_eager_for_every_op",
        replay_equals_eager_for_every_op,
    ),
    (
        "default_stream_refuses_capture_and_misuse_is_typed",
        default_stream_refuses_capture_and_misuse_is_typed,
    ),
    (
        "thread_local_allows_other_threads_global_does_not",
        thread_local_allows_other_threads_global_does_not,
    ),
    ("fork_join_and_unjoined", fork_join_and_unjoined),
    (
        "pools_are_reused_and_released",
        pools_are_reused_and_released,
    ),
    (
        "host_callback_runs_in_order_eagerly_and_on_replay",
        host_callback_runs_in_order_eagerly_and_on_replay,
    ),
];

fn main() -> std::process::ExitCode {
    let mut args = Arguments::from_args();
    // A global-mode capture forbids unsafe calls on every thread of its backend: one check at a
    // time, each on a backend of its own (memory statistics are per backend).
    args.test_threads = Some(1);
    let backend = WgpuBackend::new();
    if let Err(e) = &backend {
        println!("skipped: {e}");
    }
    let trials = CHECKS
        .iter()
        .map(|&(name, check)| match &backend {
            Ok(b) => {
                let b = b.clone();
                Trial::test(name, move || {
                    check(&b).map_err(|e| Failed::from(e.to_string()))
                })
            }
            Err(e) => {
                let reason = format!("no wgpu adapter: {e}");
                Trial::test(name, move || Ok(()))
                    .with_ignored_flag(true)
                    .with_kind(reason)
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

fn capture_records_and_replay_runs(b: &WgpuBackend) -> Result<()> {
    let x = b.alloc_from(&[0.0; 1000])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || b.add_scalar(&x, 1.0))??;
    assert_eq!(g.state(), GraphState::Ready);
    assert_eq!(b.download(&x)?, vec![0.0; 1000]);
    for _ in 0..3 {
        g.replay()?;
    }
    assert_eq!(b.download(&x)?, vec![3.0; 1000]);
    Ok(())
}

fn replay_equals_eager_for_every_op(b: &WgpuBackend) -> Result<()> {
    let init: Vec<f32> = (0..777).map(|i| i as f32 * 0.37 - 50.0).collect();
    let program = |y: &accel_graph_wgpu::WgpuBuffer, x: &accel_graph_wgpu::WgpuBuffer| {
        b.add_scalar(y, 1.25)?;
        b.scale(y, -0.75)?;
        b.axpy(y, 0.3, x)?;
        b.axpy(x, 1.5, x)?;
        b.copy(x, y)?;
        b.fill(y, 2.0)?;
        b.axpy(y, -0.1, x)
    };
    let (ey, ex) = (b.alloc_from(&init)?, b.alloc_from(&init)?);
    program(&ey, &ex)?;
    let (gy, gx) = (b.alloc_from(&init)?, b.alloc_from(&init)?);
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || program(&gy, &gx))??;
    assert_eq!(g.state(), GraphState::Captured);
    g.replay()?;
    assert_eq!(b.download(&gy)?, b.download(&ey)?);
    assert_eq!(b.download(&gx)?, b.download(&ex)?);
    let t = g.nodes()?;
    assert_eq!(t.len(), 7);
    assert_eq!(t.count(NodeKind::Memcpy), 1);
    assert_eq!(t.count(NodeKind::Memset), 1);
    assert!(t.is_chain());
    Ok(())
}

fn default_stream_refuses_capture_and_misuse_is_typed(b: &WgpuBackend) -> Result<()> {
    let x = b.alloc(4)?;
    let mut g = b.graph(GraphOptions::new())?;
    assert!(matches!(
        g.capture_begin(),
        Err(GraphError::StreamNotCapturable)
    ));
    assert!(matches!(g.replay(), Err(GraphError::NotCaptured { .. })));
    let s = b.new_stream()?;
    let _cur = b.use_stream(&s);
    g.capture_begin()?;
    assert!(matches!(
        g.capture_begin(),
        Err(GraphError::AlreadyCapturing)
    ));
    let pooled = b.alloc(4)?; // from the graph's pool: allowed
    assert!(matches!(
        b.synchronize(),
        Err(GraphError::UnsafeDuringCapture { .. })
    ));
    assert!(matches!(
        b.alloc(4),
        Err(GraphError::CaptureInvalidated { .. })
    ));
    drop(pooled);
    assert!(matches!(
        b.fill(&x, 1.0),
        Err(GraphError::CaptureInvalidated { .. })
    ));
    assert!(matches!(
        g.capture_end(),
        Err(GraphError::CaptureInvalidated { .. })
    ));
    assert!(!b.is_capturing(&s)?);
    g.reset();
    g.capture(|| b.fill(&x, 1.0))??;
    g.replay()?;
    drop(_cur);
    assert_eq!(b.download(&x)?, vec![1.0; 4]);
    Ok(())
}

fn thread_local_allows_other_threads_global_does_not(b: &WgpuBackend) -> Result<()> {
    for (mode, other_ok) in [
        (CaptureErrorMode::Global, false),
        (CaptureErrorMode::ThreadLocal, true),
        (CaptureErrorMode::Relaxed, true),
    ] {
        let s = b.new_stream()?;
        let _cur = b.use_stream(&s);
        let mut g = b.graph(GraphOptions::new().capture_error_mode(mode))?;
        g.capture_begin()?;
        // A plain allocation on another thread (its current stream is the default stream).
        let other = std::thread::scope(|sc| sc.spawn(|| b.alloc(16).map(drop)).join().unwrap());
        assert_eq!(other.is_ok(), other_ok, "{mode}");
        let wrong = std::thread::scope(|sc| {
            sc.spawn(|| {
                let _c = b.use_stream(&s);
                g.capture_end()
            })
            .join()
            .unwrap()
        });
        match mode {
            CaptureErrorMode::Relaxed => wrong?,
            CaptureErrorMode::Global => {
                assert!(matches!(wrong, Err(GraphError::WrongThread)), "{mode}");
                // The forbidden call from the other thread invalidated the capture.
                let end = g.capture_end();
                assert!(
                    matches!(end, Err(GraphError::CaptureInvalidated { .. })),
                    "{end:?}"
                );
            }
            _ => {
                assert!(matches!(wrong, Err(GraphError::WrongThread)), "{mode}");
                g.capture_end()?;
            }
        }
        assert!(!b.is_capturing(&s)?);
    }
    Ok(())
}

fn fork_join_and_unjoined(b: &WgpuBackend) -> Result<()> {
    let x = b.alloc_from(&[1.0; 300])?;
    let y = b.alloc_from(&[2.0; 300])?;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    {
        let _c = b.use_stream(&s1);
        g.capture_begin()?;
        b.add_scalar(&x, 1.0)?;
        let fork = b.new_event()?;
        b.record_event(&fork)?;
        {
            let _c2 = b.use_stream(&s2);
            b.wait_event(&fork)?;
            assert!(b.is_capturing(&s2)?);
            b.scale(&y, 3.0)?;
            let join = b.new_event()?;
            b.record_event(&join)?;
            drop(_c2);
            b.wait_event(&join)?;
        }
        b.axpy(&x, 1.0, &y)?;
        g.capture_end()?;
        assert!(!b.is_capturing(&s2)?);
    }
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![8.0; 300]);
    let t = g.nodes()?;
    assert_eq!(t.len(), 3);
    assert!(!t.is_chain());
    // add -> scale, add -> axpy, scale -> axpy
    assert_eq!(t.edges.len(), 3);
    let replay_on_s2 = b.use_stream(&s2);
    g.replay()?;
    drop(replay_on_s2);
    assert_eq!(b.download(&x)?, vec![8.0 + 1.0 + 18.0; 300]);

    let mut u = b.graph(GraphOptions::new())?;
    let _c = b.use_stream(&s1);
    u.capture_begin()?;
    let fork = b.new_event()?;
    b.record_event(&fork)?;
    {
        let _c2 = b.use_stream(&s2);
        b.wait_event(&fork)?;
        b.scale(&y, 3.0)?;
    }
    assert!(matches!(u.capture_end(), Err(GraphError::CaptureUnjoined)));
    assert!(!b.is_capturing(&s2)?);
    Ok(())
}

fn pools_are_reused_and_released(b: &WgpuBackend) -> Result<()> {
    let s = b.new_stream()?;
    let _c = b.use_stream(&s);
    let before = b.memory_stats();
    let mut g1 = b.graph(GraphOptions::new())?;
    g1.capture_begin()?;
    let a = b.alloc(1000)?;
    let addr = a.device_address();
    b.fill(&a, 1.0)?;
    drop(a);
    g1.capture_end()?;
    let mut g2 = b.graph(GraphOptions::new().pool(g1.pool()?))?;
    g2.capture_begin()?;
    let c = b.alloc(1000)?;
    assert_eq!(c.device_address(), addr);
    b.fill(&c, 2.0)?;
    g2.capture_end()?;
    drop(c);
    g1.reset();
    assert!(b.memory_stats().pool_reserved_bytes > 0);
    g2.reset();
    assert_eq!(
        b.memory_stats().pool_reserved_bytes,
        before.pool_reserved_bytes
    );
    Ok(())
}

fn host_callback_runs_in_order_eagerly_and_on_replay(b: &WgpuBackend) -> Result<()> {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        b.host_callback(Arc::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }))
    })??;
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    g.replay()?;
    g.replay()?;
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(g.nodes()?.count(NodeKind::Host), 1);
    let dir = std::env::temp_dir().join(format!("wgpu-dot-{}.dot", std::process::id()));
    g.debug_dump(&dir)?;
    let dot = std::fs::read_to_string(&dir)?;
    std::fs::remove_file(&dir)?;
    assert!(dot.contains("host_callback"));
    Ok(())
}
