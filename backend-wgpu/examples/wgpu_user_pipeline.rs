//! Bring your own wgpu: a device you opened, a compute pipeline of your own WGSL, and
//! accel-graph's portable ops, a portable kernel and GEMM, captured into one graph.
//!
//! The program is run eagerly three times on one set of buffers, and captured once on
//! another set whose buffers are dropped before the graph is replayed three times; the
//! replays must equal the eager runs bit for bit (they run the same pipelines in the same
//! order), and the eager result the host's arithmetic within rounding. Prints an `OK` line
//! per check and exits non-zero on the first failure.
//!
//! ```text
//! XDG_RUNTIME_DIR=/tmp cargo run -p accel-graph-wgpu --example wgpu_user_pipeline
//! ```
//! `WGPU_ADAPTER_NAME` (a substring of the adapter's name) picks the adapter; otherwise wgpu's
//! high-performance choice (a discrete GPU before lavapipe).

use std::process::ExitCode;

use accel_graph_api::{
    AcceleratorGraph, Backend, Gemm, GraphOptions, PortableOps, gemm_reference,
    kernel::{Access, Kernel, KernelArg},
};
use accel_graph_wgpu::{WgpuBackend, WgpuBuffer, WgpuDispatch};
use wgpu::util::DeviceExt as _;

/// Elements of the vectors; also a 16 x 16 matrix for the GEMM.
const N: usize = 256;

/// The user's own pipeline: `v[i] = v[i] / (1 + |v[i]|) * p.gain`, with `p` a uniform buffer
/// of the user's.
const SOFTSIGN: &str = "
struct P { gain: f32 }
@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64)
fn softsign(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&v)) { v[id.x] = v[id.x] / (1.0 + abs(v[id.x])) * p.gain; }
}";

/// A portable kernel: `out[i] = a * x[i] + y[i]` (its WGSL follows the backend's binding
/// rules: buffers at bindings 0.., the scalars in one uniform struct after them).
fn axpby() -> Kernel {
    Kernel::new("axpby")
        .buffer::<f32>("out", Access::Write)
        .buffer::<f32>("x", Access::Read)
        .buffer::<f32>("y", Access::Read)
        .scalar::<f32>("a")
        .block([64, 1, 1])
        .wgsl(
            "struct S { a: f32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<uniform> s: S;
@compute @workgroup_size(64)
fn axpby(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&out)) { out[id.x] = s.a * x[id.x] + y[id.x]; }
}",
        )
}

/// What the user opened with wgpu, before accel-graph sees it.
struct UserWgpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
}

fn open_user_wgpu() -> Result<UserWgpu, String> {
    let instance = wgpu::Instance::new(primary_backends(
        wgpu::InstanceDescriptor::new_without_display_handle_from_env(),
    ));
    let adapter = match pollster::block_on(wgpu::util::initialize_adapter_from_env(&instance, None))
    {
        Ok(adapter) => adapter,
        Err(_) => pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        }))
        .map_err(|e| format!("no wgpu adapter: {e}"))?,
    };
    let info = adapter.get_info();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("my device"),
        required_features: wgpu::Features::empty(),
        required_limits: wgpu::Limits::default(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| format!("request_device: {e}"))?;
    Ok(UserWgpu {
        device,
        queue,
        info,
    })
}

/// The program's buffers: `x`, `y` and the 16 x 16 weights `w` in, `out` and `prod` out.
struct Buffers {
    x: WgpuBuffer,
    y: WgpuBuffer,
    w: WgpuBuffer,
    out: WgpuBuffer,
    prod: WgpuBuffer,
}

fn inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let x = (0..N).map(|i| (i % 17) as f32 - 8.0).collect();
    let y = (0..N).map(|i| (i % 5) as f32 * 0.25).collect();
    let w = (0..N).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    (x, y, w)
}

fn buffers(b: &WgpuBackend) -> accel_graph_api::Result<Buffers> {
    let (x, y, w) = inputs();
    Ok(Buffers {
        x: b.alloc_from(&x)?,
        y: b.alloc_from(&y)?,
        w: b.alloc_from(&w)?,
        out: b.alloc_from(&[0.0f32; N])?,
        prod: b.alloc_from(&[0.0f32; N])?,
    })
}

/// One round: `x *= 0.5`; the user's softsign on `x`; `out = 1.5 x + y` (the kernel); `y +=
/// 0.125`; `prod = out · w` (16 x 16).
fn round(
    b: &WgpuBackend,
    pipeline: &wgpu::ComputePipeline,
    gain: &wgpu::Buffer,
    kernel: &Kernel,
    v: &Buffers,
) -> accel_graph_api::Result<()> {
    b.scale(&v.x, 0.5)?;
    b.dispatch(
        &WgpuDispatch::new(pipeline, [(N / 64) as u32, 1, 1])
            .label("softsign")
            .buffer(0, 0, &v.x, Access::ReadWrite)
            .resource(0, 1, gain.as_entire_binding()),
    )?;
    b.launch_kernel(
        kernel,
        kernel.grid_for(N),
        &[
            KernelArg::buffer(&v.out),
            KernelArg::buffer(&v.x),
            KernelArg::buffer(&v.y),
            KernelArg::scalar(1.5f32),
        ],
    )?;
    b.add_scalar(&v.y, 0.125)?;
    b.gemm(&Gemm::new(16, 16, 16), &v.out, &v.w, &v.prod)
}

/// The host's arithmetic for `rounds` rounds: `(out, prod)`.
fn host(rounds: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut x, mut y, w) = inputs();
    let mut out = vec![0.0f32; N];
    let mut prod = vec![0.0f32; N];
    for _ in 0..rounds {
        for v in &mut x {
            *v *= 0.5;
            *v = *v / (1.0 + v.abs()) * 3.0;
        }
        for i in 0..N {
            out[i] = 1.5 * x[i] + y[i];
        }
        for v in &mut y {
            *v += 0.125;
        }
        gemm_reference(&Gemm::new(16, 16, 16), &out, &w, &mut prod);
    }
    (out, prod)
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.iter()
        .zip(want)
        .all(|(g, w)| (g - w).abs() <= 1e-4 * (1.0 + w.abs()))
}

fn run() -> Result<(), String> {
    let user = open_user_wgpu()?;
    println!(
        "adapter: {} ({:?}, {:?})",
        user.info.name, user.info.backend, user.info.device_type
    );
    let b = WgpuBackend::from_device(user.device.clone(), user.queue.clone())
        .map_err(|e| format!("from_device: {e}"))?;
    println!("OK from_device: {}", b.capabilities().device_name);

    let module = user
        .device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("softsign"),
            source: wgpu::ShaderSource::Wgsl(SOFTSIGN.into()),
        });
    let pipeline = user
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("softsign"),
            layout: None,
            module: &module,
            entry_point: Some("softsign"),
            compilation_options: Default::default(),
            cache: None,
        });
    let gain = user
        .device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("gain"),
            contents: bytemuck::bytes_of(&[3.0f32, 0.0, 0.0, 0.0]),
            usage: wgpu::BufferUsages::UNIFORM,
        });
    let kernel = axpby();
    let e = |what: &'static str| move |err: accel_graph_api::GraphError| format!("{what}: {err}");

    let eager = buffers(&b).map_err(e("alloc"))?;
    for _ in 0..3 {
        round(&b, &pipeline, &gain, &kernel, &eager).map_err(e("eager round"))?;
    }
    let want = (
        b.download(&eager.out).map_err(e("download"))?,
        b.download(&eager.prod).map_err(e("download"))?,
    );
    let reference = host(3);
    if !(close(&want.0, &reference.0) && close(&want.1, &reference.1)) {
        return Err(format!(
            "eager differs from the host: out {:?}... vs {:?}...",
            &want.0[..4],
            &reference.0[..4]
        ));
    }
    println!("OK eager rounds equal the host's arithmetic (within 1e-4)");

    let (out, prod) = (
        b.alloc::<f32>(N).map_err(e("alloc"))?,
        b.alloc::<f32>(N).map_err(e("alloc"))?,
    );
    let stream = b.new_stream().map_err(e("new_stream"))?;
    let mut graph = b
        .graph(GraphOptions::new().keep_graph(true))
        .map_err(e("graph"))?;
    {
        let captured = buffers(&b).map_err(e("alloc"))?;
        b.capture_on(&stream, &mut graph, || {
            for _ in 0..3 {
                round(&b, &pipeline, &gain, &kernel, &captured)?;
            }
            b.copy(&out, &captured.out)?;
            b.copy(&prod, &captured.prod)
        })
        .map_err(e("capture"))?;
        if b.download(&captured.x).map_err(e("download"))? != inputs().0 {
            return Err("the capture ran the program".to_owned());
        }
        println!(
            "OK captured without running: {} nodes",
            graph.raw_graph().map_err(e("raw_graph"))?.len()
        );
        // `captured`'s buffers are dropped here; the graph keeps their memory.
    }
    let held = b.memory_stats().graph_held_bytes;
    if held < 5 * N * 4 {
        return Err(format!(
            "the graph holds {held} bytes of dropped buffers, expected at least {}",
            5 * N * 4
        ));
    }
    println!("OK buffers dropped before replay; the graph holds their {held} bytes");

    graph.replay().map_err(e("replay"))?;
    b.synchronize().map_err(e("synchronize"))?;
    let got = (
        b.download(&out).map_err(e("download"))?,
        b.download(&prod).map_err(e("download"))?,
    );
    if got != want {
        return Err(format!(
            "replay differs from eager: out {:?}... vs {:?}...",
            &got.0[..4],
            &want.0[..4]
        ));
    }
    println!("OK replay == eager, bit for bit ({N} + {N} elements)");
    // A replay continues from the state the previous one left, as eager rounds do.
    graph.replay().map_err(e("replay"))?;
    for _ in 0..3 {
        round(&b, &pipeline, &gain, &kernel, &eager).map_err(e("eager round"))?;
    }
    let (again, eager_again) = (
        b.download(&out).map_err(e("download"))?,
        b.download(&eager.out).map_err(e("download"))?,
    );
    if again != eager_again {
        return Err("a second replay differs from three more eager rounds".to_owned());
    }
    println!("OK second replay == three more eager rounds");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("OK wgpu_user_pipeline");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("FAILED: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The descriptor's backends narrowed to Vulkan, Metal and DX12 unless `WGPU_BACKEND` names
/// some: probing GL (EGL) on a machine without a GL driver prints errors of its own.
fn primary_backends(mut descriptor: wgpu::InstanceDescriptor) -> wgpu::InstanceDescriptor {
    if wgpu::Backends::from_env().is_none() {
        descriptor.backends = wgpu::Backends::PRIMARY;
    }
    descriptor
}
