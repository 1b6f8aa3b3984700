//! The backend's own checks of what is wgpu-specific (the conformance suite covers the shared
//! semantics): the aliased-operand kernels, unfused products, one submit per run of GPU work,
//! the storage-binding limit, timing events and external event nodes.
//! They run on whatever adapter wgpu finds (lavapipe in CI); without one every check is
//! reported ignored, with the reason.

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, EventOptions, GraphError, GraphOptions, NodeKind, PortableOp,
    PortableOps, Result,
};
use accel_graph_wgpu::{WgpuBackend, WgpuBuffer};
use libtest_mimic::{Arguments, Failed, Trial};

type Check = fn(&WgpuBackend) -> Result<()>;

const CHECKS: &[(&str, Check)] = &[
    (
        "aliased_operands_and_empty_ops",
        aliased_operands_and_empty_ops,
    ),
    ("products_are_not_fused", products_are_not_fused),
    (
        "one_submit_per_run_of_gpu_work",
        one_submit_per_run_of_gpu_work,
    ),
    (
        "ops_beyond_one_storage_binding_are_unsupported",
        ops_beyond_one_storage_binding_are_unsupported,
    ),
    ("timing_events", timing_events),
    (
        "external_events_are_graph_nodes",
        external_events_are_graph_nodes,
    ),
    (
        "unknown_adapter_is_unavailable",
        unknown_adapter_is_unavailable,
    ),
];

/// Every instance shares the process's wgpu device and so one capture domain: a capture in
/// `global` mode (the default) in one check would refuse the unsafe calls of a check running
/// beside it. Each check holds this lock, so they run one at a time whatever
/// `--test-threads` says.
static DOMAIN: Mutex<()> = Mutex::new(());

fn exclusive() -> MutexGuard<'static, ()> {
    // A failed check poisons the lock; the next one may still run.
    DOMAIN.lock().unwrap_or_else(|e| e.into_inner())
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let backend = WgpuBackend::new(0);
    if let Err(e) = &backend {
        println!("skipped: {e}");
    }
    let trials = CHECKS
        .iter()
        .map(|&(name, check)| match &backend {
            Ok(b) => {
                let b = b.clone();
                Trial::test(name, move || {
                    let _exclusive = exclusive();
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

/// `axpy(x, a, x)` on the host, element by element as the contract defines it.
fn self_axpy_model(x: &mut [f32], a: f32) {
    let op = PortableOp::Axpy { y: (), a, x: () };
    for v in x {
        *v = op.element(*v, *v);
    }
}

fn ramp(len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|i| i as f32 * scale - 50.0).collect()
}

/// `axpy(x, a, x)` runs the `axpy_self` kernel (one buffer cannot be bound read-only and
/// read-write in one dispatch); a copy onto itself and ops on empty buffers are nodes that do
/// nothing.
fn aliased_operands_and_empty_ops(b: &WgpuBackend) -> Result<()> {
    let init = ramp(777, 0.37);
    let x = b.alloc_from(&init)?;
    let empty = b.alloc(0)?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        b.axpy(&x, 1.5, &x)?;
        b.copy(&x, &x)?;
        b.add_scalar(&empty, 1.0)?;
        b.copy(&empty, &empty)
    })?;
    let labels = g.raw_graph()?.labels();
    assert_eq!(labels.len(), 4, "{labels:?}");
    assert!(labels[0].starts_with("axpy_self grid=(4,1)"), "{labels:?}");
    assert_eq!(labels[1..], ["copy (no-op)", "add_scalar", "copy (no-op)"]);
    let kinds: Vec<NodeKind> = g.nodes()?.nodes.iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            NodeKind::Kernel,
            NodeKind::Memcpy,
            NodeKind::Kernel,
            NodeKind::Memcpy
        ]
    );
    g.replay()?;
    let mut expected = init;
    self_axpy_model(&mut expected, 1.5);
    assert_eq!(b.download(&x)?, expected);
    // Eagerly too.
    b.axpy(&x, 1.5, &x)?;
    b.copy(&x, &x)?;
    self_axpy_model(&mut expected, 1.5);
    assert_eq!(b.download(&x)?, expected);
    Ok(())
}

/// `y + a * x` with the product rounded first, bit for bit as on the host, eagerly and in a
/// replay, with operands chosen so that a fused multiply-add would change the last bit.
fn products_are_not_fused(b: &WgpuBackend) -> Result<()> {
    let a = 1.0 + f32::EPSILON;
    let xv = 1.0 - f32::EPSILON / 2.0;
    let yv = -1.0f32;
    let unfused = yv + a * xv;
    assert_ne!(a.mul_add(xv, yv).to_bits(), unfused.to_bits());
    let run = |y: &WgpuBuffer, x: &WgpuBuffer| b.axpy(y, a, x);
    let (y, x) = (b.alloc_from(&[yv; 300])?, b.alloc_from(&[xv; 300])?);
    run(&y, &x)?;
    let eager = b.download(&y)?;
    let (gy, gx) = (b.alloc_from(&[yv; 300])?, b.alloc_from(&[xv; 300])?);
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || run(&gy, &gx))?;
    g.replay()?;
    let replayed = b.download(&gy)?;
    for v in eager.iter().chain(&replayed) {
        assert_eq!(v.to_bits(), unfused.to_bits(), "{v} vs {unfused}");
    }
    Ok(())
}

/// A replay is one queue submit per run of GPU work: host functions split runs, event waits
/// and empty nodes do not.
fn one_submit_per_run_of_gpu_work(b: &WgpuBackend) -> Result<()> {
    let x = b.alloc_from(&[1.0; 64])?;
    let y = b.alloc_from(&[2.0; 64])?;
    let hits = Arc::new(AtomicUsize::new(0));
    let s = b.new_stream()?;
    let mut plain = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut plain, || {
        for _ in 0..10 {
            b.axpy(&y, 0.5, &x)?;
            b.copy(&x, &y)?;
        }
        Ok(())
    })?;
    assert_eq!(plain.executable()?.submits(), 1);
    let mut split = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut split, || {
        b.add_scalar(&x, 1.0)?;
        let h = Arc::clone(&hits);
        b.host_callback(Arc::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }))?;
        b.scale(&x, 2.0)
    })?;
    let exec = split.executable()?;
    assert_eq!((exec.submits(), exec.host_steps()), (2, 1));
    plain.replay()?;
    split.replay()?;
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    Ok(())
}

/// A kernel binds its buffers whole: past the adapter's storage-binding size an op is
/// `Unsupported`, not a validation error on the device.
fn ops_beyond_one_storage_binding_are_unsupported(b: &WgpuBackend) -> Result<()> {
    let limits = b.driver().limits().clone();
    let max_binding = limits.max_storage_buffer_binding_size;
    let len = usize::try_from(max_binding / 4 + 1).unwrap_or(usize::MAX);
    if max_binding.saturating_add(4) > limits.max_buffer_size || len > (1 << 30) {
        println!(
            "note: the adapter's buffers ({} bytes) are no larger than one binding \
             ({max_binding} bytes): nothing to check",
            limits.max_buffer_size
        );
        return Ok(());
    }
    let big = b.alloc(len)?;
    let err = b.fill(&big, 1.0).unwrap_err();
    assert!(matches!(err, GraphError::Unsupported { .. }), "{err:?}");
    // A copy is no binding: it runs.
    let other = b.alloc(len)?;
    b.copy(&other, &big)?;
    b.synchronize()
}

/// Timing events write GPU timestamps where the adapter has timestamp queries, across eager
/// work and replays; elsewhere `elapsed_time` is `Unsupported`.
fn timing_events(b: &WgpuBackend) -> Result<()> {
    let timing = EventOptions::new().enable_timing(true);
    let (start, end) = (b.new_event_with(timing)?, b.new_event_with(timing)?);
    let x = b.alloc_from(&vec![1.0; 1 << 16])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        for _ in 0..20 {
            b.scale(&x, 1.0001)?;
        }
        Ok(())
    })?;
    let _current = b.use_stream(&s)?;
    b.record_event(&start)?;
    g.replay()?;
    b.record_event(&end)?;
    b.event_synchronize(&end)?;
    assert!(b.event_query(&start)? && b.event_query(&end)?);
    let elapsed = b.elapsed_time(&start, &end);
    if !b.capabilities().event_timing {
        assert!(
            matches!(elapsed, Err(GraphError::Unsupported { .. })),
            "{elapsed:?}"
        );
        println!("note: the adapter has no timestamp queries");
        return Ok(());
    }
    let ms = elapsed?;
    assert!(ms.is_finite() && ms >= 0.0, "{ms}");
    println!("note: a replay of 20 scales of 65536 elements took {ms:.3} ms");
    // The other way round the interval is negative, as CUDA's.
    let back = b.elapsed_time(&end, &start)?;
    assert!(back <= 0.0, "{back}");
    // A timing event that was never recorded cannot be read.
    let fresh = b.new_event_with(timing)?;
    assert!(b.elapsed_time(&fresh, &end).is_err());
    Ok(())
}

/// An external event recorded inside a capture is a node of the graph: each replay records
/// it (and, for a timing event, writes its timestamp).
fn external_events_are_graph_nodes(b: &WgpuBackend) -> Result<()> {
    let options = EventOptions::new()
        .external(true)
        .enable_timing(b.capabilities().event_timing);
    let done = b.new_event_with(options)?;
    let before = b.new_event_with(EventOptions::new().enable_timing(options.enable_timing))?;
    let x = b.alloc_from(&[0.0; 32])?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        b.add_scalar(&x, 1.0)?;
        b.record_event(&done)?;
        b.wait_event(&done)?;
        b.add_scalar(&x, 1.0)
    })?;
    let kinds: Vec<NodeKind> = g.nodes()?.nodes.iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            NodeKind::Kernel,
            NodeKind::EventRecord,
            NodeKind::EventWait,
            NodeKind::Kernel
        ]
    );
    g.instantiate()?;
    let _current = b.use_stream(&s)?;
    b.record_event(&before)?;
    g.replay()?;
    // Recorded by the replay: a blocking wait on it is a wait for the replay's work.
    b.event_synchronize(&done)?;
    assert!(b.event_query(&done)?);
    assert_eq!(b.download(&x)?, vec![2.0; 32]);
    if options.enable_timing {
        let ms = b.elapsed_time(&before, &done)?;
        assert!(ms.is_finite() && ms >= 0.0, "{ms}");
    }
    Ok(())
}

/// An adapter that does not exist is `BackendUnavailable`, naming the adapters there are.
fn unknown_adapter_is_unavailable(_b: &WgpuBackend) -> Result<()> {
    if std::env::var_os(accel_graph_wgpu::ADAPTER_ENV).is_some() {
        println!(
            "note: {} overrides the ordinal: nothing to check",
            accel_graph_wgpu::ADAPTER_ENV
        );
        return Ok(());
    }
    match WgpuBackend::new(usize::MAX) {
        Err(GraphError::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "wgpu");
            assert!(reason.contains("found"), "{reason}");
            Ok(())
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
}
