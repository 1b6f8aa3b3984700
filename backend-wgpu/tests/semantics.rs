//! The backend's own checks of what is wgpu-specific (the conformance suite covers the shared
//! semantics): the aliased-operand kernels, unfused products, one submit per run of GPU work,
//! the storage-binding limit, timing events and external event nodes; user kernels' bindings
//! and GEMM's 16-bit rounding, odd offsets and shared buffers.
//! They run on whatever adapter wgpu finds (lavapipe in CI); without one every check is
//! reported ignored, with the reason.

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, EventOptions, FloatElement, Gemm, GraphError,
    GraphOptions, NodeKind, PortableOp, PortableOps, Result, gemm_reference,
    half::{bf16, f16},
    kernel::{Access, Kernel, KernelArg},
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
    ("gemm_16bit_rounds_like_half", gemm_16bit_rounds_like_half),
    (
        "gemm_16bit_views_at_odd_offsets_keep_their_neighbours",
        gemm_16bit_views_at_odd_offsets_keep_their_neighbours,
    ),
    ("gemm_beta_zero_ignores_c", gemm_beta_zero_ignores_c),
    ("gemm_operands_in_one_buffer", gemm_operands_in_one_buffer),
    ("kernel_views_of_one_buffer", kernel_views_of_one_buffer),
    (
        "kernel_binding_mistakes_are_typed_errors",
        kernel_binding_mistakes_are_typed_errors,
    ),
    (
        "kernels_on_16bit_and_empty_views",
        kernels_on_16bit_and_empty_views,
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

/// A seeded stream of 64-bit values (the tests' operands, reproducible).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 16
    }
}

/// Equal bits, or both NaN (payloads go through f32 arithmetic), or both zero (the sign of a
/// zero sum may be lost by a shader compiler: WGSL does not promise it).
fn same_16bit<T: FloatElement>(got: T, want: T) -> bool {
    let (g, w) = (got.to_f32(), want.to_f32());
    bytemuck::bytes_of(&got) == bytemuck::bytes_of(&want)
        || (g.is_nan() && w.is_nan())
        || (g == 0.0 && w == 0.0)
}

/// Runs `spec` on the given operands (whole buffers) and checks C bit for bit against the
/// reference, eagerly.
fn check_gemm<T: FloatElement>(
    b: &WgpuBackend,
    spec: &Gemm,
    a: &[T],
    bm: &[T],
    c: &[T],
) -> Result<()> {
    let (da, db, dc) = (b.alloc_from(a)?, b.alloc_from(bm)?, b.alloc_from(c)?);
    b.gemm(spec, &da, &db, &dc)?;
    let got = b.download(&dc)?;
    let mut want = c.to_vec();
    gemm_reference(spec, a, bm, &mut want);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            same_16bit(*g, *w),
            "{} {spec:?}: element {i} is {g:?}, the reference {w:?} (operands a={:?} b={:?})",
            T::DTYPE,
            a.get(i / spec.n),
            bm.get(i % spec.n)
        );
    }
    Ok(())
}

/// With k = 1 each element is one product, exact in f32, then rounded once to 16 bits: over
/// random bit patterns (normals, subnormals, infinities, NaNs) and products that overflow or
/// fall to subnormals, GEMM's rounding equals the `half` crate's bit for bit.
fn gemm_16bit_rounds_like_half(b: &WgpuBackend) -> Result<()> {
    let (m, n) = (96, 80);
    let spec = Gemm::new(m, n, 1);
    let mut rng = Lcg(7);
    // f16: every bit pattern (all are normal f32 numbers, whatever the device's f32 denormal
    // mode; products of two f16 are exact in f32).
    let f16s = |rng: &mut Lcg, len: usize| -> Vec<f16> {
        (0..len)
            .map(|_| f16::from_bits(rng.next() as u16))
            .collect()
    };
    for _ in 0..3 {
        let (a, bm) = (f16s(&mut rng, m), f16s(&mut rng, n));
        check_gemm(b, &spec, &a, &bm, &vec![f16::ZERO; m * n])?;
    }
    // bf16: random signs and mantissas, exponents kept where products are normal f32 (a
    // device may flush f32 subnormals) and reach past f32's range (infinity), plus some
    // infinities and NaNs.
    let bf16s = |rng: &mut Lcg, len: usize| -> Vec<bf16> {
        (0..len)
            .map(|i| match i % 41 {
                0 => bf16::INFINITY,
                1 => bf16::NAN,
                _ => {
                    let r = rng.next();
                    let exponent = 67 + (r % 187) as u16; // 2^-60 ..= 2^126
                    bf16::from_bits((r >> 20) as u16 & 0x807f | exponent << 7)
                }
            })
            .collect()
    };
    for _ in 0..3 {
        let (a, bm) = (bf16s(&mut rng, m), bf16s(&mut rng, n));
        check_gemm(b, &spec, &a, &bm, &vec![bf16::ZERO; m * n])?;
    }
    // Ties: (1 + i/128)(1 + j/128) for all i, j < 128 in bf16 (ties where ij = 64 mod 128,
    // below 2), and (1 + i/1024)(1 + 8j/1024) in f16 (ties where ij = 64 mod 128): each
    // rounds to the even neighbour.
    let spec = Gemm::new(128, 128, 1);
    let grid = |scale: f32, step: f32| -> Vec<f32> {
        (0..128).map(|i| 1.0 + i as f32 * step / scale).collect()
    };
    let to = |v: Vec<f32>| v.into_iter().map(bf16::from_f32).collect::<Vec<_>>();
    let (a, bm) = (to(grid(128.0, 1.0)), to(grid(128.0, 1.0)));
    check_gemm(b, &spec, &a, &bm, &vec![bf16::ZERO; 128 * 128])?;
    let to = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    let (a, bm) = (to(grid(1024.0, 1.0)), to(grid(1024.0, 8.0)));
    check_gemm(b, &spec, &a, &bm, &vec![f16::ZERO; 128 * 128])?;
    Ok(())
}

/// Integer-valued operands in -3..=3 as `T`.
fn small_integers<T: FloatElement>(rng: &mut Lcg, len: usize) -> Vec<T> {
    (0..len)
        .map(|_| T::from_f32((rng.next() % 7) as f32 - 3.0))
        .collect()
}

/// A, B and C as views at odd element offsets of larger 16-bit buffers, with n odd and two
/// batches, so that words hold elements of two rows, two tiles, two batches, or one element
/// of the view and one outside it: C equals the reference, eager and replayed, and every
/// element around the views keeps its bits.
fn odd_offsets<T: FloatElement>(b: &WgpuBackend) -> Result<()> {
    let spec = Gemm::new(19, 17, 5).scalars(1.0, 0.5).batch(2);
    let (a_len, b_len, c_len) = (spec.a_len()?, spec.b_len()?, spec.c_len()?);
    let mut rng = Lcg(11);
    let (a, bm, c) = (
        small_integers::<T>(&mut rng, a_len),
        small_integers::<T>(&mut rng, b_len),
        small_integers::<T>(&mut rng, c_len),
    );
    let sentinel = T::from_f32(-1234.0);
    let padded = |data: &[T], before: usize| -> Vec<T> {
        let mut v = vec![sentinel; before];
        v.extend_from_slice(data);
        v.extend(std::iter::repeat_n(sentinel, 3));
        v
    };
    let (pa, pb) = (padded(&a, 1), padded(&bm, 3));
    let mut want = c.clone();
    gemm_reference(&spec, &a, &bm, &mut want);
    let expect = padded(&want, 5);
    let (da, db) = (b.alloc_from(&pa)?, b.alloc_from(&pb)?);
    let run = |dc: &WgpuBuffer<T>| {
        b.gemm(
            &spec,
            da.view(1..1 + a_len)?,
            db.view(3..3 + b_len)?,
            dc.view(5..5 + c_len)?,
        )
    };
    let eager = b.alloc_from(&padded(&c, 5))?;
    run(&eager)?;
    assert_eq!(
        bytemuck::cast_slice::<T, u8>(&b.download(&eager)?),
        bytemuck::cast_slice::<T, u8>(&expect),
        "{} eager",
        T::DTYPE
    );
    let replayed = b.alloc_from(&padded(&c, 5))?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || run(&replayed))?;
    g.replay()?;
    assert_eq!(
        bytemuck::cast_slice::<T, u8>(&b.download(&replayed)?),
        bytemuck::cast_slice::<T, u8>(&expect),
        "{} replayed",
        T::DTYPE
    );
    Ok(())
}

fn gemm_16bit_views_at_odd_offsets_keep_their_neighbours(b: &WgpuBackend) -> Result<()> {
    odd_offsets::<bf16>(b)?;
    odd_offsets::<f16>(b)?;
    odd_offsets::<f32>(b)
}

/// `beta = 0`: C is only written, so NaN in it does not reach the result.
fn beta_zero<T: FloatElement>(b: &WgpuBackend) -> Result<()> {
    let spec = Gemm::new(5, 7, 3).transpose_b(true).scalars(2.0, 0.0);
    let mut rng = Lcg(3);
    let a = small_integers::<T>(&mut rng, spec.a_len()?);
    let bm = small_integers::<T>(&mut rng, spec.b_len()?);
    let nan = vec![T::from_f32(f32::NAN); spec.c_len()?];
    check_gemm(b, &spec, &a, &bm, &nan)?;
    let c = b.alloc_from(&nan)?;
    b.gemm(&spec, &b.alloc_from(&a)?, &b.alloc_from(&bm)?, &c)?;
    assert!(b.download(&c)?.iter().all(|x| !x.to_f32().is_nan()));
    Ok(())
}

fn gemm_beta_zero_ignores_c(b: &WgpuBackend) -> Result<()> {
    beta_zero::<f32>(b)?;
    beta_zero::<bf16>(b)?;
    beta_zero::<f16>(b)
}

/// A, B and C as views of one arena (WebGPU cannot bind one buffer read-only and read-write
/// in a dispatch: the kernels read A and B from C's binding): equal to the reference, eager
/// and replayed; a C that overlaps A is refused, the arena untouched.
fn arena<T: FloatElement>(b: &WgpuBackend) -> Result<()> {
    let spec = Gemm::new(9, 6, 4).transpose_a(true).scalars(1.0, -1.0);
    let (al, bl, cl) = (spec.a_len()?, spec.b_len()?, spec.c_len()?);
    let mut rng = Lcg(5);
    let data = small_integers::<T>(&mut rng, 1 + al + bl + cl);
    // C first, then A, then B, at odd places.
    let (c_at, a_at, b_at) = (1, 1 + cl, 1 + cl + al);
    let mut want = data.clone();
    let (a, bm) = (
        data[a_at..a_at + al].to_vec(),
        data[b_at..b_at + bl].to_vec(),
    );
    gemm_reference(&spec, &a, &bm, &mut want[c_at..c_at + cl]);
    let bytes = |v: &[T]| bytemuck::cast_slice::<T, u8>(v).to_vec();
    let run = |x: &WgpuBuffer<T>| {
        b.gemm(
            &spec,
            x.view(a_at..a_at + al)?,
            x.view(b_at..b_at + bl)?,
            x.view(c_at..c_at + cl)?,
        )
    };
    let eager = b.alloc_from(&data)?;
    run(&eager)?;
    assert_eq!(
        bytes(&b.download(&eager)?),
        bytes(&want),
        "{} eager",
        T::DTYPE
    );
    let replayed = b.alloc_from(&data)?;
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || run(&replayed))?;
    g.replay()?;
    assert_eq!(
        bytes(&b.download(&replayed)?),
        bytes(&want),
        "{} replayed",
        T::DTYPE
    );
    // B read from the arena, A from a buffer of its own.
    let own_a = b.alloc_from(&a)?;
    let mixed = b.alloc_from(&data)?;
    b.gemm(
        &spec,
        &own_a,
        mixed.view(b_at..b_at + bl)?,
        mixed.view(c_at..c_at + cl)?,
    )?;
    assert_eq!(
        bytes(&b.download(&mixed)?),
        bytes(&want),
        "{} mixed",
        T::DTYPE
    );
    let overlapping = b.alloc_from(&data)?;
    let err = b
        .gemm(
            &spec,
            overlapping.view(c_at + 1..c_at + 1 + al)?,
            overlapping.view(b_at..b_at + bl)?,
            overlapping.view(c_at..c_at + cl)?,
        )
        .unwrap_err();
    assert!(
        matches!(err, GraphError::OverlappingOperands { op: "gemm", .. }),
        "{err:?}"
    );
    assert_eq!(bytes(&b.download(&overlapping)?), bytes(&data));
    Ok(())
}

fn gemm_operands_in_one_buffer(b: &WgpuBackend) -> Result<()> {
    arena::<f32>(b)?;
    arena::<bf16>(b)?;
    arena::<f16>(b)
}

/// `dst[i] = src[i] + 1` for `i < n`, over two views.
fn add_one(name: &'static str, src: Access, dst: Access) -> Kernel {
    let access = |a: Access| {
        if a == Access::Read {
            "read"
        } else {
            "read_write"
        }
    };
    Kernel::new(name)
        .buffer::<u32>("src", src)
        .buffer::<u32>("dst", dst)
        .scalar::<u32>("n")
        .block([64, 1, 1])
        .wgsl(format!(
            "struct S {{ n: u32 }}
@group(0) @binding(0) var<storage, {}> src: array<u32>;
@group(0) @binding(1) var<storage, {}> dst: array<u32>;
@group(0) @binding(2) var<uniform> s: S;
@compute @workgroup_size(64)
fn {name}(@builtin(global_invocation_id) id: vec3<u32>) {{
    if (id.x < s.n) {{ dst[id.x] = src[id.x] + 1u; }}
}}",
            access(src),
            access(dst)
        ))
}

/// Two views of one buffer: both read-write binds (WebGPU allows one buffer in several
/// read-write bindings); read-only and read-write cannot, and is `Unsupported` naming the
/// parameters, before anything runs.
fn kernel_views_of_one_buffer(b: &WgpuBackend) -> Result<()> {
    let n: usize = 100;
    // The second view starts after the first, where the adapter can bind it.
    let align =
        n.next_multiple_of(b.driver().limits().min_storage_buffer_offset_alignment as usize / 4);
    let data: Vec<u32> = (0..(align + n) as u32).collect();
    let x = b.alloc_from(&data)?;
    let both = add_one("ag_add_one_rw", Access::ReadWrite, Access::Write);
    let args = |src, dst| {
        [
            KernelArg::buffer(src),
            KernelArg::buffer(dst),
            KernelArg::scalar(n as u32),
        ]
    };
    b.launch_kernel(
        &both,
        both.grid_for(n),
        &args(x.view(..n)?, x.view(align..align + n)?),
    )?;
    let mut want = data.clone();
    for i in 0..n {
        want[align + i] = data[i] + 1;
    }
    assert_eq!(b.download(&x)?, want);
    let mixed = add_one("ag_add_one", Access::Read, Access::Write);
    let err = b
        .launch_kernel(
            &mixed,
            mixed.grid_for(n),
            &args(x.view(..n)?, x.view(align..align + n)?),
        )
        .unwrap_err();
    assert!(
        matches!(&err, GraphError::Unsupported { what } if what.contains("src") && what.contains("dst")),
        "{err:?}"
    );
    assert_eq!(b.download(&x)?, want, "a refused launch ran");
    // Read-only views of one buffer (two read-only bindings) are fine, of course.
    let y = b.alloc::<u32>(n)?;
    let two_reads = Kernel::new("ag_sum_views")
        .buffer::<u32>("p", Access::Read)
        .buffer::<u32>("q", Access::Read)
        .buffer::<u32>("out", Access::Write)
        .block([64, 1, 1])
        .wgsl(
            "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn ag_sum_views(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&out)) { out[id.x] = p[id.x] + q[id.x]; }
}",
        );
    b.launch_kernel(
        &two_reads,
        two_reads.grid_for(n),
        &[
            KernelArg::buffer(x.view(..n)?),
            KernelArg::buffer(x.view(align..align + n)?),
            KernelArg::buffer(&y),
        ],
    )?;
    let sums: Vec<u32> = (0..n).map(|i| want[i] + want[align + i]).collect();
    assert_eq!(b.download(&y)?, sums);
    Ok(())
}

/// The binding rules' violations are typed errors at load or launch, and nothing runs: a
/// view off the storage offset alignment, WGSL that does not parse, a workgroup size that is
/// not the block, an access that is not the parameter's, a scalar struct larger than the
/// scalars declared.
fn kernel_binding_mistakes_are_typed_errors(b: &WgpuBackend) -> Result<()> {
    let n = 64;
    let x = b.alloc_from(&vec![1u32; n + 1])?;
    let y = b.alloc_from(&vec![0u32; n + 1])?;
    let good = add_one("ag_add_one", Access::Read, Access::Write);
    let err = b
        .launch_kernel(
            &good,
            good.grid_for(n),
            &[
                KernelArg::buffer(x.view(1..)?),
                KernelArg::buffer(&y),
                KernelArg::scalar(n as u32),
            ],
        )
        .unwrap_err();
    assert!(
        matches!(&err, GraphError::Unsupported { what } if what.contains("min_storage_buffer_offset_alignment")),
        "{err:?}"
    );
    let launch = |k: &Kernel| {
        b.launch_kernel(
            k,
            k.grid_for(n),
            &[
                KernelArg::buffer(&x),
                KernelArg::buffer(&y),
                KernelArg::scalar(n as u32),
            ],
        )
    };
    let failed = |k: Kernel, needle: &str| {
        let err = launch(&k).unwrap_err();
        assert!(
            matches!(&err, GraphError::KernelFailed { message, .. } if message.contains(needle)),
            "{}: expected KernelFailed containing {needle:?}, got {err:?}",
            k.name()
        );
    };
    let source = good.wgsl_source().unwrap_or_default().to_owned();
    failed(
        good.clone().wgsl(source.replace("+ 1u;", "+ ;")),
        "expected",
    );
    failed(good.clone().block([128, 1, 1]), "workgroup_size");
    // `src` declared read-write in WGSL, Access::Read in the kernel.
    failed(
        good.clone()
            .wgsl(source.replacen("storage, read>", "storage, read_write>", 1)),
        "binding",
    );
    // Five u32 fields in the WGSL's struct (20 bytes), one scalar declared (16 bytes).
    failed(
        good.clone().wgsl(source.replace(
            "struct S { n: u32 }",
            "struct S { n: u32, a: u32, b: u32, c: u32, d: u32 }",
        )),
        "binding",
    );
    assert_eq!(b.download(&y)?, vec![0; n + 1], "a refused kernel ran");
    launch(&good)?;
    assert_eq!(b.download(&y)?[..n], vec![2; n]);
    Ok(())
}

/// A 16-bit buffer parameter is bound as words (`array<u32>`: WGSL has no bf16), from the
/// view's first element; an empty view binds (a kernel over none of its elements runs).
fn kernels_on_16bit_and_empty_views(b: &WgpuBackend) -> Result<()> {
    // Negates the bf16 pairs of `words` words: flips both halves' sign bits.
    let negate = Kernel::new("ag_negate_bf16")
        .buffer::<bf16>("x", Access::ReadWrite)
        .scalar::<u32>("words")
        .block([64, 1, 1])
        .wgsl(
            "struct S { words: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<uniform> s: S;
@compute @workgroup_size(64)
fn ag_negate_bf16(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < s.words) { x[id.x] = x[id.x] ^ 0x80008000u; }
}",
        );
    let align = b.driver().limits().min_storage_buffer_offset_alignment as usize / 2;
    let len = align + 10;
    let values: Vec<bf16> = (0..len).map(|i| bf16::from_f32(i as f32)).collect();
    let x = b.alloc_from(&values)?;
    b.launch_kernel(
        &negate,
        [1, 1, 1],
        &[
            KernelArg::buffer(x.view(align..align + 6)?),
            KernelArg::scalar(3u32),
        ],
    )?;
    let got = b.download(&x)?;
    for (i, (g, v)) in got.iter().zip(&values).enumerate() {
        let want = if (align..align + 6).contains(&i) {
            -*v
        } else {
            *v
        };
        assert_eq!(g.to_bits(), want.to_bits(), "element {i}");
    }
    // Empty views, one read and one written, with n = 0: nothing to do, nothing refused.
    let k = add_one("ag_add_one", Access::Read, Access::Write);
    let (e, f) = (b.alloc::<u32>(0)?, b.alloc_from(&[5u32; 4])?);
    b.launch_kernel(
        &k,
        [1, 1, 1],
        &[
            KernelArg::buffer(&e),
            KernelArg::buffer(f.view(4..)?),
            KernelArg::scalar(0u32),
        ],
    )?;
    assert_eq!(b.download(&f)?, vec![5; 4]);
    assert_eq!(x.len(), len);
    Ok(())
}
