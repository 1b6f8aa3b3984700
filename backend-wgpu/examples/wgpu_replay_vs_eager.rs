//! Replay of a 1000-dispatch software graph against the same portable ops issued eagerly (one
//! submit each), and against hand-built wgpu: the same dispatches encoded directly into one
//! encoder and one submit, with bind groups built once (the floor a software graph can reach)
//! and built every time (eager work batched by hand).
//!
//! ```text
//! cargo run --release -p accel-graph-wgpu --example wgpu_replay_vs_eager -- [ops] [elements] [iterations]
//! ```
//! Every timing includes waiting for the GPU to finish; the median of the iterations is printed.

use std::time::{Duration, Instant};

use accel_graph_api::{
    AcceleratorGraph, Backend, DeviceBuffer, GraphError, GraphOptions, PortableOps, Result,
};
use accel_graph_wgpu::{PORTABLE_OPS_WGSL, WgpuBackend, WgpuBuffer, dispatch_size};
use wgpu::util::DeviceExt as _;

/// The op mix: op `i` of the program.
#[derive(Clone, Copy)]
enum Op {
    AddScalar(f32),
    Scale(f32),
    Axpy(f32),
}

fn op(i: usize) -> Op {
    match i % 3 {
        0 => Op::AddScalar(0.5),
        1 => Op::Scale(0.999),
        _ => Op::Axpy(0.001),
    }
}

fn issue(b: &WgpuBackend, y: &WgpuBuffer, x: &WgpuBuffer, ops: usize) -> Result<()> {
    for i in 0..ops {
        match op(i) {
            Op::AddScalar(c) => b.add_scalar(y, c)?,
            Op::Scale(a) => b.scale(y, a)?,
            Op::Axpy(a) => b.axpy(y, a, x)?,
        }
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time(iterations: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    f()?; // warm-up
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed());
    }
    Ok(median(samples))
}

/// The first `size` bytes of `buffer` as a storage binding.
fn storage(buffer: &WgpuBuffer, size: Option<wgpu::BufferSize>) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: buffer.block().buffer(),
        offset: 0,
        size,
    })
}

/// The same dispatches, encoded straight into wgpu.
struct HandBuilt {
    pipelines: [wgpu::ComputePipeline; 3],
}

impl HandBuilt {
    fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("bench"),
            source: wgpu::ShaderSource::Wgsl(PORTABLE_OPS_WGSL.into()),
        });
        let make = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        HandBuilt {
            pipelines: [make("add_scalar"), make("scale"), make("axpy")],
        }
    }

    fn bind_groups(
        &self,
        device: &wgpu::Device,
        y: &WgpuBuffer,
        x: &WgpuBuffer,
        ops: usize,
    ) -> Vec<(usize, wgpu::BindGroup)> {
        let n = y.len();
        (0..ops)
            .map(|i| {
                let (which, a) = match op(i) {
                    Op::AddScalar(c) => (0, c),
                    Op::Scale(a) => (1, a),
                    Op::Axpy(a) => (2, a),
                };
                // The shader's `Params`: n, a, then zero, the views' first elements and
                // padding (all 0 here: whole buffers), 32 bytes in all.
                let mut params = [0u8; 32];
                params[..4].copy_from_slice(&(n as u32).to_le_bytes());
                params[4..8].copy_from_slice(&a.to_le_bytes());
                let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: None,
                    contents: &params,
                    usage: wgpu::BufferUsages::UNIFORM,
                });
                let size = wgpu::BufferSize::new(y.num_bytes() as u64);
                // Bindings 0, 1 (and 2 for axpy): the parameters, `y` (and `x`).
                let mut resources = vec![uniform.as_entire_binding(), storage(y, size)];
                if which == 2 {
                    resources.push(storage(x, size));
                }
                let entries: Vec<_> = (0..)
                    .zip(resources)
                    .map(|(binding, resource)| wgpu::BindGroupEntry { binding, resource })
                    .collect();
                let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &self.pipelines[which].get_bind_group_layout(0),
                    entries: &entries,
                });
                (which, group)
            })
            .collect()
    }

    fn submit(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        groups: &[(usize, wgpu::BindGroup)],
        grid: (u32, u32),
    ) -> Result<()> {
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for (which, group) in groups {
                pass.set_pipeline(&self.pipelines[*which]);
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(grid.0, grid.1, 1);
            }
        }
        let index = queue.submit([encoder.finish()]);
        device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| GraphError::Driver {
                backend: "wgpu",
                code: -1,
                name: "PollError".into(),
                message: e.to_string(),
            })?;
        Ok(())
    }
}

fn main() -> Result<()> {
    let args = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse::<usize>().map_err(|_| {
                GraphError::ArgumentMismatch(format!(
                    "'{a}' is not a count; arguments: [ops] [elements] [iterations]"
                ))
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let ops = args.first().copied().unwrap_or(1000);
    let len = args.get(1).copied().unwrap_or(1024);
    let iterations = args.get(2).copied().unwrap_or(20).max(1);

    let b = WgpuBackend::new(0)?;
    println!("adapter: {}", b.capabilities().device_name);
    println!(
        "program: {ops} portable ops (add_scalar, scale, axpy) on {len} f32; median of {iterations}"
    );
    let y = b.alloc_from(&vec![1.0; len])?;
    let x = b.alloc_from(&vec![0.5; len])?;
    let stream = b.new_stream()?;
    let _current = b.use_stream(&stream)?;

    let eager = time(iterations, || {
        issue(&b, &y, &x, ops)?;
        b.synchronize()
    })?;

    let t = Instant::now();
    let mut graph = b.graph(GraphOptions::new())?;
    graph.capture_begin()?;
    issue(&b, &y, &x, ops)?;
    graph.capture_end()?;
    let capture = t.elapsed();
    let replay = time(iterations, || {
        graph.replay()?;
        b.synchronize()
    })?;

    let hand = HandBuilt::new(b.device());
    let grid = dispatch_size(len);
    let prebuilt = hand.bind_groups(b.device(), &y, &x, ops);
    let hand_prebuilt = time(iterations, || {
        hand.submit(b.device(), b.queue(), &prebuilt, grid)
    })?;
    let hand_batched = time(iterations, || {
        let groups = hand.bind_groups(b.device(), &y, &x, ops);
        hand.submit(b.device(), b.queue(), &groups, grid)
    })?;

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let per = |d: Duration| us(d) / ops as f64;
    println!(
        "{:<44} {:>12} {:>12} {:>10}",
        "variant", "total_us", "us_per_op", "vs_replay"
    );
    for (name, d) in [
        ("graph replay (1 encoder, 1 submit)", replay),
        ("eager per op (1 submit each)", eager),
        ("hand-built, bind groups prebuilt, 1 submit", hand_prebuilt),
        ("hand-built, bind groups per run, 1 submit", hand_batched),
    ] {
        println!(
            "{:<44} {:>12.1} {:>12.3} {:>9.2}x",
            name,
            us(d),
            per(d),
            us(d) / us(replay)
        );
    }
    println!("capture + instantiate of {ops} ops: {:.1} us", us(capture));
    let speedup = us(eager) / us(replay);
    println!(
        "replay speed-up over eager per-op: {speedup:.2}x (target >= 2x where launches, not \
         memory traffic, dominate): {}",
        if speedup >= 2.0 { "MET" } else { "NOT MET" }
    );
    Ok(())
}
