//! Bringing your own wgpu device and pipelines: `WgpuBackend::from_device` (requirements,
//! identity and capture domains) and `WgpuBackend::dispatch` (user pipelines eager and in
//! graphs, keep-alive of declared memory, typed errors for what wgpu refuses).
//!
//! Every check opens devices of its own through wgpu (as a user would) on the adapter
//! `WGPU_ADAPTER_NAME` names or else wgpu's high-performance choice; without one every check
//! is reported ignored, with the reason. Each device counts the errors that reach its uncaptured-error handler: a check
//! fails if any does (the backend reports every mistake as a typed error instead).

use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, Gemm, GraphError, GraphOptions, PortableOps, Result,
    gemm_reference,
    kernel::{Access, Kernel, KernelArg},
};
use accel_graph_wgpu::{WgpuBackend, WgpuBuffer, WgpuDispatch};
use libtest_mimic::{Arguments, Failed, Trial};

type Check = fn() -> Result<()>;

const CHECKS: &[(&str, Check)] = &[
    (
        "a_user_device_runs_everything",
        a_user_device_runs_everything,
    ),
    (
        "one_device_is_one_capture_domain",
        one_device_is_one_capture_domain,
    ),
    (
        "a_queue_of_another_device_is_refused",
        a_queue_of_another_device_is_refused,
    ),
    (
        "a_device_without_storage_buffers_is_unavailable",
        a_device_without_storage_buffers_is_unavailable,
    ),
    (
        "user_dispatches_replay_like_eager",
        user_dispatches_replay_like_eager,
    ),
    (
        "declared_memory_is_held_by_the_graph",
        declared_memory_is_held_by_the_graph,
    ),
    (
        "dispatch_mistakes_are_typed_errors",
        dispatch_mistakes_are_typed_errors,
    ),
    (
        "a_destroyed_user_buffer_fails_the_replay",
        a_destroyed_user_buffer_fails_the_replay,
    ),
];

/// Some checks capture on `WgpuBackend::new(0)`'s shared device in `global` mode, which
/// would refuse the unsafe calls of a check running beside it: one check at a time.
static EXCLUSIVE: Mutex<()> = Mutex::new(());

fn exclusive() -> MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The adapter `WGPU_ADAPTER_NAME` names, else wgpu's high-performance choice (a discrete
/// GPU before lavapipe), from a new `wgpu::Instance` each time, as separate users would.
fn adapter() -> std::result::Result<wgpu::Adapter, String> {
    let instance = wgpu::Instance::new(primary_backends(
        wgpu::InstanceDescriptor::new_without_display_handle_from_env(),
    ));
    if let Ok(adapter) =
        pollster::block_on(wgpu::util::initialize_adapter_from_env(&instance, None))
    {
        return Ok(adapter);
    }
    pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| e.to_string())
}

/// A device a user opened, and the count of errors that reached its uncaptured-error handler.
struct UserGpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    uncaptured: Arc<AtomicUsize>,
}

impl UserGpu {
    fn open(limits: wgpu::Limits) -> UserGpu {
        let adapter = adapter().expect("an adapter (checked before the checks run)");
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("user device"),
            required_features: wgpu::Features::empty(),
            required_limits: limits,
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .expect("request_device");
        let uncaptured = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            eprintln!("uncaptured wgpu error: {e}");
            count.fetch_add(1, Ordering::SeqCst);
        }));
        UserGpu {
            device,
            queue,
            uncaptured,
        }
    }

    fn default() -> UserGpu {
        UserGpu::open(wgpu::Limits::default())
    }

    fn backend(&self) -> Result<WgpuBackend> {
        WgpuBackend::from_device(self.device.clone(), self.queue.clone())
    }

    /// A compute pipeline of the user's, with the layout its WGSL implies.
    fn pipeline(&self, wgsl: &str, entry: &str) -> wgpu::ComputePipeline {
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(entry),
                source: wgpu::ShaderSource::Wgsl(wgsl.into()),
            });
        self.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
    }

    fn check_no_uncaptured_errors(&self) {
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        assert_eq!(
            self.uncaptured.load(Ordering::SeqCst),
            0,
            "errors reached the uncaptured-error handler"
        );
    }
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let available = adapter();
    if let Err(e) = &available {
        println!("skipped: {e}");
    }
    let trials = CHECKS
        .iter()
        .map(|&(name, check)| match &available {
            Ok(_) => Trial::test(name, move || {
                let _exclusive = exclusive();
                check().map_err(|e| Failed::from(e.to_string()))
            }),
            Err(e) => Trial::test(name, move || Ok(()))
                .with_ignored_flag(true)
                .with_kind(format!("no wgpu adapter: {e}")),
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// `v[i] = v[i] * 2 + w[i]` over `arrayLength(&v)` elements: group 0 holds `v` (read-write),
/// group 1 holds `w` (read-only).
const TWICE_PLUS: &str = "
@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@group(1) @binding(0) var<storage, read> w: array<f32>;
@compute @workgroup_size(64)
fn twice_plus(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&v)) { v[id.x] = v[id.x] * 2.0 + w[id.x]; }
}";

/// `out[i] = src[i] + 0.5`.
fn half_more() -> Kernel {
    Kernel::new("ag_half_more")
        .buffer::<f32>("out", Access::Write)
        .buffer::<f32>("src", Access::Read)
        .block([64, 1, 1])
        .wgsl(
            "@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@compute @workgroup_size(64)
fn ag_half_more(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&out)) { out[id.x] = src[id.x] + 0.5; }
}",
        )
}

/// The device's limits, features and adapter are the backend's; ops, kernels, GEMM and
/// graphs run on it; without `TIMESTAMP_QUERY` events do not time.
fn a_user_device_runs_everything() -> Result<()> {
    let gpu = UserGpu::open(wgpu::Limits::downlevel_defaults());
    let b = gpu.backend()?;
    assert!(b.device() == &gpu.device);
    assert_eq!(
        b.driver().limits().max_storage_buffer_binding_size,
        wgpu::Limits::downlevel_defaults().max_storage_buffer_binding_size
    );
    assert_eq!(b.adapter_info().name, gpu.device.adapter_info().name);
    assert!(!b.capabilities().event_timing);
    let x = b.alloc_from(&[1.0f32, 2.0, 3.0, 4.0])?;
    let (y, z) = (b.alloc::<f32>(4)?, b.alloc_from(&[0.0f32; 4])?);
    let k = half_more();
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.scale(&x, 2.0)?;
        b.launch_kernel(
            &k,
            [1, 1, 1],
            &[KernelArg::buffer(&y), KernelArg::buffer(&x)],
        )?;
        b.gemm(&Gemm::new(2, 2, 2), &x, &y, &z)
    })?;
    assert_eq!(b.download(&x)?, vec![1.0, 2.0, 3.0, 4.0], "capture ran");
    g.replay()?;
    // x = [2 4; 6 8], y = x + 0.5, z = x · y.
    let (xs, ys) = ([2.0f32, 4.0, 6.0, 8.0], [2.5f32, 4.5, 6.5, 8.5]);
    let mut want = [0.0f32; 4];
    gemm_reference(&Gemm::new(2, 2, 2), &xs, &ys, &mut want);
    assert_eq!(b.download(&z)?, want);
    let timing = accel_graph_api::EventOptions::new().enable_timing(true);
    let (e1, e2) = (b.new_event_with(timing)?, b.new_event_with(timing)?);
    b.record_event(&e1)?;
    b.record_event(&e2)?;
    assert!(matches!(
        b.elapsed_time(&e1, &e2),
        Err(GraphError::Unsupported { .. })
    ));
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// Instances on one device share its capture domain (a `global` capture through one forbids
/// unsafe calls through the other); another user device is a domain of its own; a backend's
/// own device brought back shares that backend's domain.
fn one_device_is_one_capture_domain() -> Result<()> {
    let (gpu, other) = (UserGpu::default(), UserGpu::default());
    let (b1, b2, b3) = (gpu.backend()?, gpu.backend()?, other.backend()?);
    assert_ne!(b1.instance_id(), b2.instance_id());
    let refused = |r: Result<()>| matches!(r, Err(GraphError::UnsafeDuringCapture { .. }));
    // The refused call also invalidates the capture, as CUDA's global mode does.
    let invalidated = |r: Result<()>| matches!(r, Err(GraphError::CaptureInvalidated { .. }));
    let x = b1.alloc_from(&[0.0f32; 8])?;
    let s = b1.new_stream()?;
    let mut g = b1.graph(GraphOptions::new())?;
    let captured = b1.capture_on(&s, &mut g, || {
        b1.add_scalar(&x, 1.0)?;
        assert!(b3.synchronize().is_ok(), "another device");
        assert!(refused(b2.synchronize()), "same device, other instance");
        Ok(())
    });
    assert!(invalidated(captured), "one device");
    let shared = WgpuBackend::new(0)?;
    let brought = WgpuBackend::from_device(shared.device().clone(), shared.queue().clone())?;
    assert!(brought.device() == shared.device());
    let y = shared.alloc_from(&[0.0f32; 8])?;
    let s = shared.new_stream()?;
    let mut g = shared.graph(GraphOptions::new())?;
    let captured = shared.capture_on(&s, &mut g, || {
        shared.add_scalar(&y, 1.0)?;
        assert!(b1.synchronize().is_ok(), "a user device");
        assert!(refused(brought.synchronize()), "a backend's own device");
        Ok(())
    });
    assert!(invalidated(captured), "a backend's own device");
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// A queue that is not the device's is `ArgumentMismatch`, for a device already in use and
/// for a new one. (The check is best effort: it sees a queue that has submitted work the
/// device never did, as here, where the other queue has submitted and the devices not.)
/// wgpu's `==` may call the two devices equal (its ids repeat across instances): the backend
/// still tells them apart.
fn a_queue_of_another_device_is_refused() -> Result<()> {
    let (gpu, other, third) = (UserGpu::default(), UserGpu::default(), UserGpu::default());
    if gpu.device == other.device {
        println!("note: wgpu's == calls devices of two instances equal");
    }
    let _b = gpu.backend()?;
    other.queue.submit([]);
    for device in [&gpu.device, &third.device] {
        match WgpuBackend::from_device(device.clone(), other.queue.clone()) {
            Err(GraphError::ArgumentMismatch(m)) => assert!(m.contains("queue"), "{m}"),
            other => panic!("expected ArgumentMismatch, got {other:?}"),
        }
    }
    // The pairs themselves are accepted, each its own device.
    let (b2, b3) = (other.backend()?, third.backend()?);
    assert!(b2.device() == &other.device && b3.device() == &third.device);
    Ok(())
}

/// WebGL2's limits have no storage buffers in compute shaders: the backend cannot run there,
/// and says which limit is missing.
fn a_device_without_storage_buffers_is_unavailable() -> Result<()> {
    let gpu = UserGpu::open(wgpu::Limits::downlevel_webgl2_defaults());
    match gpu.backend() {
        Err(GraphError::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "wgpu");
            assert!(
                reason.contains("max_storage_buffers_per_shader_stage"),
                "{reason}"
            );
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// A program mixing portable ops, a user kernel, GEMM and a user pipeline (one bind group
/// built by the backend from a view, one built by the user): the capture runs nothing, and
/// replays equal eager rounds, with the graph's buffers dropped before the replays.
fn user_dispatches_replay_like_eager() -> Result<()> {
    let gpu = UserGpu::default();
    let b = gpu.backend()?;
    let pipeline = gpu.pipeline(TWICE_PLUS, "twice_plus");
    let n = 200usize;
    let groups = [n.div_ceil(64) as u32, 1, 1];
    let k = half_more();
    let start: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
    let round = |v: &WgpuBuffer, w: &WgpuBuffer, m: &WgpuBuffer| -> Result<()> {
        b.add_scalar(v, 1.0)?;
        let group1 = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("w"),
            layout: &pipeline.get_bind_group_layout(1),
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: w.block().buffer().as_entire_binding(),
            }],
        });
        b.dispatch(
            &WgpuDispatch::new(&pipeline, groups)
                .label("twice_plus")
                .buffer(0, 0, v, Access::ReadWrite)
                .bind_group(1, &group1)
                .touch(w, Access::Read),
        )?;
        b.launch_kernel(
            &k,
            k.grid_for(n),
            &[KernelArg::buffer(w), KernelArg::buffer(v)],
        )?;
        // m = v (as a 10x20 matrix) times w (20x10, its first 200 elements).
        b.gemm(&Gemm::new(10, 10, 20), v, w, m.view(..100)?)
    };
    let (ev, ew, em) = (
        b.alloc_from(&start)?,
        b.alloc_from(&vec![0.25f32; n])?,
        b.alloc::<f32>(n)?,
    );
    for _ in 0..3 {
        round(&ev, &ew, &em)?;
    }
    let want = (b.download(&ev)?, b.download(&em)?);
    let (out_v, out_m) = (b.alloc::<f32>(n)?, b.alloc::<f32>(n)?);
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    {
        let (v, w, m) = (
            b.alloc_from(&start)?,
            b.alloc_from(&vec![0.25f32; n])?,
            b.alloc_from(&vec![0.0f32; n])?,
        );
        b.capture_on(&s, &mut g, || {
            for _ in 0..3 {
                round(&v, &w, &m)?;
            }
            b.copy(&out_v, &v)?;
            b.copy(&out_m, &m)
        })?;
        assert_eq!(b.download(&v)?, start, "the capture ran");
    }
    g.replay()?;
    assert_eq!((b.download(&out_v)?, b.download(&out_m)?), want);
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// `y[i] = 9` and `out[i] = 7`: a user pipeline writing two buffers.
const MARK: &str = "
@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn mark(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = 9u; out[id.x] = 7u; }
}";

/// How a dispatch's buffer is made known to the backend.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Declare {
    /// Bound through `WgpuDispatch::buffer`.
    Bound,
    /// In a bind group of the user's, declared with `touch`.
    Touched,
    /// In a bind group of the user's, not declared.
    Not,
}

/// The dispatch of `MARK` over `y` and `out`, with `y` declared as `declare` says (`out` is
/// always declared).
fn mark<'a>(
    gpu: &UserGpu,
    pipeline: &'a wgpu::ComputePipeline,
    y: &'a WgpuBuffer<u32>,
    out: &'a WgpuBuffer<u32>,
    declare: Declare,
) -> WgpuDispatch<'a> {
    let work = WgpuDispatch::new(pipeline, [1, 1, 1]).label("mark");
    if declare == Declare::Bound {
        return work
            .buffer(0, 0, y, Access::Write)
            .buffer(0, 1, out, Access::Write);
    }
    let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: y.block().buffer().as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: out.block().buffer().as_entire_binding(),
            },
        ],
    });
    let work = work.bind_group(0, &group).touch(out, Access::Write);
    if declare == Declare::Touched {
        work.touch(y, Access::Write)
    } else {
        work
    }
}

/// A buffer a captured user dispatch writes, dropped after the capture. Declared (bound
/// through the builder, or touched), the graph holds its block as it holds the portable ops'
/// operands: the books show it held (`GraphHeld`) until the graph is reset. Undeclared, the
/// books release it at once; the memory lives on all the same (the recorded bind group holds
/// the wgpu buffer), replays run without error, and a new allocation is other memory, which
/// replays leave alone. In a pool shared by two graphs a declared block goes back to the pool
/// for the next capture into it, as any buffer's does (graphs sharing a pool replay in
/// capture order).
fn declared_memory_is_held_by_the_graph() -> Result<()> {
    let gpu = UserGpu::default();
    let b = gpu.backend()?;
    let pipeline = gpu.pipeline(MARK, "mark");
    let n = 64usize;
    let block_at = |address: u64| {
        b.memory_snapshot()
            .into_iter()
            .find(|block| block.address == address)
    };
    for declare in [Declare::Bound, Declare::Touched, Declare::Not] {
        let out = b.alloc_from(&vec![0u32; n])?;
        let y = b.alloc::<u32>(n)?;
        let address = y.device_address();
        let s = b.new_stream()?;
        let mut g = b.graph(GraphOptions::new())?;
        b.capture_on(&s, &mut g, || {
            b.dispatch(&mark(&gpu, &pipeline, &y, &out, declare))
        })?;
        drop(y);
        let block = block_at(address);
        if declare == Declare::Not {
            assert!(block.is_none(), "undeclared, yet in the books: {block:?}");
        } else {
            let block = block.unwrap_or_else(|| panic!("{declare:?}: the block was released"));
            assert_eq!(
                (block.state, block.graph_holds),
                (accel_graph_api::BlockState::GraphHeld, 1),
                "{declare:?}"
            );
        }
        let z = b.alloc_from(&vec![1u32; n])?;
        assert_ne!(z.device_address(), address);
        g.replay()?;
        assert_eq!(b.download(&out)?, vec![7; n], "{declare:?}: the replay ran");
        assert_eq!(
            b.download(&z)?,
            vec![1; n],
            "{declare:?}: the replay wrote z"
        );
        g.reset();
        assert!(block_at(address).is_none(), "{declare:?}: kept after reset");
    }
    // A shared pool: the declared block returns to the pool for the next capture into it.
    let pool = b.graph_pool_handle();
    let out = b.alloc_from(&vec![0u32; n])?;
    let s = b.new_stream()?;
    let (mut first, mut second) = (
        b.graph(GraphOptions::new().pool(pool))?,
        b.graph(GraphOptions::new().pool(pool))?,
    );
    let mut address = 0;
    b.capture_on(&s, &mut first, || {
        let y = b.alloc::<u32>(n)?;
        address = y.device_address();
        b.dispatch(&mark(&gpu, &pipeline, &y, &out, Declare::Bound))
    })?;
    let mut reused = None;
    b.capture_on(&s, &mut second, || {
        let z = b.alloc::<u32>(n)?;
        reused = Some(z.device_address() == address);
        Ok(())
    })?;
    assert_eq!(reused, Some(true), "the pool did not reuse the block");
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// Mistakes are typed errors, and none reaches the device's uncaptured-error handler: a
/// buffer of another instance, a bind group set twice, a view off the storage alignment, too
/// many workgroups, a bind group that does not fit the pipeline, a missing bind group, a
/// binding the layout lacks.
fn dispatch_mistakes_are_typed_errors() -> Result<()> {
    let gpu = UserGpu::default();
    let (b, other) = (gpu.backend()?, gpu.backend()?);
    let pipeline = gpu.pipeline(TWICE_PLUS, "twice_plus");
    let (v, w) = (b.alloc_from(&[1.0f32; 64])?, b.alloc_from(&[1.0f32; 64])?);
    let foreign = other.alloc_from(&[1.0f32; 64])?;
    let base = || {
        WgpuDispatch::new(&pipeline, [1, 1, 1])
            .buffer(0, 0, &v, Access::ReadWrite)
            .buffer(1, 0, &w, Access::Read)
    };
    b.dispatch(&base())?;
    let err = |work: WgpuDispatch<'_>| b.dispatch(&work).unwrap_err();
    let e = err(WgpuDispatch::new(&pipeline, [1, 1, 1])
        .buffer(0, 0, &v, Access::ReadWrite)
        .buffer(1, 0, &foreign, Access::Read));
    assert!(matches!(e, GraphError::ForeignObject { .. }), "{e:?}");
    let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(1),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: w.block().buffer().as_entire_binding(),
        }],
    });
    let e = err(base().bind_group(1, &group));
    assert!(matches!(e, GraphError::ArgumentMismatch(_)), "{e:?}");
    let bytes = b.alloc_from(&[0u8; 64])?;
    let e = err(WgpuDispatch::new(&pipeline, [1, 1, 1])
        .buffer(0, 0, bytes.view(1..)?, Access::ReadWrite)
        .bind_group(1, &group));
    assert!(matches!(e, GraphError::Unsupported { .. }), "{e:?}");
    let e = err(WgpuDispatch::new(&pipeline, [u32::MAX, 1, 1]));
    assert!(matches!(e, GraphError::Unsupported { .. }), "{e:?}");
    // Group 1's layout where group 0's goes (read-only where read-write is declared).
    let e = err(WgpuDispatch::new(&pipeline, [1, 1, 1])
        .bind_group(0, &group)
        .bind_group(1, &group));
    assert!(matches!(e, GraphError::KernelFailed { .. }), "{e:?}");
    // No group 1.
    let e = err(WgpuDispatch::new(&pipeline, [1, 1, 1]).buffer(0, 0, &v, Access::ReadWrite));
    assert!(matches!(e, GraphError::KernelFailed { .. }), "{e:?}");
    // A binding group 0's layout does not have.
    let e = err(base().buffer(0, 5, &w, Access::Read));
    assert!(matches!(e, GraphError::KernelFailed { .. }), "{e:?}");
    // Refused in a capture too, before anything is recorded; the capture goes on.
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    b.capture_on(&s, &mut g, || {
        let e = b
            .dispatch(&WgpuDispatch::new(&pipeline, [1, 1, 1]).buffer(0, 0, &v, Access::ReadWrite))
            .unwrap_err();
        assert!(matches!(e, GraphError::KernelFailed { .. }), "{e:?}");
        b.dispatch(&base())
    })?;
    assert_eq!(g.raw_graph()?.labels(), ["dispatch grid=(1,1,1)"]);
    g.replay()?;
    // v: 1 → 3 (eager) → 7 (replay).
    assert_eq!(b.download(&v)?, vec![7.0; 64]);
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// A graph recording a bind group of the user's whose buffer the user then destroys: the
/// replay is a typed error (wgpu refuses the submit), not an uncaptured one.
fn a_destroyed_user_buffer_fails_the_replay() -> Result<()> {
    let gpu = UserGpu::default();
    let b = gpu.backend()?;
    let pipeline = gpu.pipeline(TWICE_PLUS, "twice_plus");
    let v = b.alloc_from(&[1.0f32; 64])?;
    let mine = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("mine"),
        size: 256,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(1),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: mine.as_entire_binding(),
        }],
    });
    let s = b.new_stream()?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&s, &mut g, || {
        b.dispatch(
            &WgpuDispatch::new(&pipeline, [1, 1, 1])
                .buffer(0, 0, &v, Access::ReadWrite)
                .bind_group(1, &group),
        )
    })?;
    g.replay()?;
    assert_eq!(b.download(&v)?, vec![2.0; 64]);
    mine.destroy();
    let e = g.replay().unwrap_err();
    assert!(matches!(e, GraphError::KernelFailed { .. }), "{e:?}");
    gpu.check_no_uncaptured_errors();
    Ok(())
}

/// The descriptor's backends narrowed to Vulkan, Metal and DX12 unless `WGPU_BACKEND` names
/// some: probing GL (EGL) on a machine without a GL driver prints errors of its own.
fn primary_backends(mut descriptor: wgpu::InstanceDescriptor) -> wgpu::InstanceDescriptor {
    if wgpu::Backends::from_env().is_none() {
        descriptor.backends = wgpu::Backends::PRIMARY;
    }
    descriptor
}
