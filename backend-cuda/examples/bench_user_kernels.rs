//! What user kernels cost in a replayed graph: the GPU time per replayed node of a chain of
//! 1000 launches of an NVRTC element-wise kernel, divided by that of a chain of 1000 portable
//! ops doing the same work (`y[i] += a`), in the same run (target ≤ 1.05). The user kernel is
//! launched two ways: through accel-graph's portable kernel API (`Backend::launch_kernel`,
//! compiled by the backend's NVRTC path) and through cudarc's launch builder on the user's own
//! stream with a lent buffer.
//!
//! Prints `bench_user_kernels:` lines (a table, then `PASS`/`MISS` per ratio) and exits with
//! status 2 if a target is missed.
//!
//! Run: `cargo run --release -p accel-graph-cuda --example bench_user_kernels` (needs an
//! NVIDIA GPU and NVRTC on the loader path).

use std::{error::Error, process::ExitCode, sync::Arc, sync::LazyLock};

use accel_graph_api::{
    EventOptions,
    kernel::{Access, Kernel, KernelArg},
    prelude::*,
};
use accel_graph_cuda::{
    CudaBackend, CudaBuffer, CudaGraph, CudaStreamHandle,
    cudarc::{
        driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg},
        nvrtc::compile_ptx,
    },
};

type Outcome<T> = Result<T, Box<dyn Error>>;

const ELEMS: usize = 1024;
const CHAIN: usize = 1000;
const REPS: usize = 60;
const TARGET: f64 = 1.05;

/// The portable ops' `add_scalar` as a user kernel: same work, same block size.
const ADD_SOURCE: &str = r#"extern "C" __global__ void user_add(float* y, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a;
}"#;

static USER_ADD: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("user_add")
        .buffer::<f32>("y", Access::ReadWrite)
        .scalar::<f32>("a")
        .scalar::<u32>("n")
        .cuda(ADD_SOURCE)
});

/// The three ways of issuing one node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chain {
    PortableOp,
    PortableKernel,
    CudarcLaunch,
}

impl Chain {
    const ALL: [Chain; 3] = [
        Chain::PortableOp,
        Chain::PortableKernel,
        Chain::CudarcLaunch,
    ];

    fn name(self) -> &'static str {
        match self {
            Chain::PortableOp => "portable op add_scalar",
            Chain::PortableKernel => "NVRTC kernel, Backend::launch_kernel",
            Chain::CudarcLaunch => "NVRTC kernel, cudarc launch builder + lend",
        }
    }
}

struct Setup {
    backend: CudaBackend,
    stream: Arc<CudaStream>,
    adopted: CudaStreamHandle,
    user_add: CudaFunction,
    x: CudaBuffer,
}

impl Setup {
    /// One node of `chain` on the current stream (the adopted one).
    fn issue(&self, chain: Chain) -> Outcome<()> {
        let b = &self.backend;
        match chain {
            Chain::PortableOp => b.add_scalar(&self.x, 1.0)?,
            Chain::PortableKernel => b.launch_kernel(
                &USER_ADD,
                USER_ADD.grid_for(ELEMS),
                &[
                    KernelArg::buffer(&self.x),
                    KernelArg::scalar(1.0f32),
                    KernelArg::scalar(ELEMS as u32),
                ],
            )?,
            Chain::CudarcLaunch => {
                let (y, a, n) = (b.lend(&self.x, &self.stream)?, 1.0f32, ELEMS as u32);
                let mut launch = self.stream.launch_builder(&self.user_add);
                launch.arg(&y).arg(&a).arg(&n);
                let cfg = LaunchConfig {
                    grid_dim: (ELEMS.div_ceil(256) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: the arguments match `user_add(float*, float, unsigned)`; `x` holds
                // `n` elements.
                unsafe { launch.launch(cfg) }?;
            }
        }
        Ok(())
    }

    fn graph(&self, chain: Chain) -> Outcome<CudaGraph> {
        let mut graph = self.backend.graph(GraphOptions::new())?;
        graph.capture_begin()?;
        let issued = (0..CHAIN).try_for_each(|_| self.issue(chain));
        graph.capture_end()?;
        issued?;
        Ok(graph)
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn run() -> Outcome<bool> {
    // SAFETY: only tries to load the libraries, before cudarc's loaders (which panic if they
    // are absent).
    let (cuda, nvrtc) = unsafe {
        (
            accel_graph_cuda::cudarc::driver::sys::is_culib_present(),
            accel_graph_cuda::cudarc::nvrtc::sys::is_culib_present(),
        )
    };
    if !(cuda && nvrtc) {
        println!("bench_user_kernels: skipped: CUDA driver present {cuda}, NVRTC present {nvrtc}");
        return Ok(true);
    }
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let backend = CudaBackend::from_context(Arc::clone(&ctx))?;
    let adopted = backend.adopt_stream(Arc::clone(&stream))?;
    let user_add = ctx
        .load_module(compile_ptx(ADD_SOURCE)?)?
        .load_function("user_add")?;
    let x = backend.alloc_from(&[0.0f32; ELEMS])?;
    let setup = Setup {
        backend,
        stream,
        adopted,
        user_add,
        x,
    };
    let b = &setup.backend;
    let _current = b.use_stream(&setup.adopted)?;
    println!(
        "bench_user_kernels: device {}",
        b.capabilities().device_name
    );
    b.prepare_kernel(&USER_ADD)?;
    // Every chain adds 1.0 a thousand times per replay: the same work, checked below.
    let mut graphs = Vec::new();
    for chain in Chain::ALL {
        // Eager once first, so no launch in the capture loads anything.
        setup.issue(chain)?;
        graphs.push((chain, setup.graph(chain)?));
    }
    b.synchronize()?;
    let timing = || b.new_event_with(EventOptions::new().enable_timing(true));
    let (start, end) = (timing()?, timing()?);
    let mut per_node: Vec<Vec<f64>> = vec![Vec::new(); graphs.len()];
    for rep in 0..REPS {
        for i in 0..graphs.len() {
            // Rotate the order so no chain always follows the same one.
            let j = (i + rep) % graphs.len();
            b.record_event(&start)?;
            graphs[j].1.replay()?;
            b.record_event(&end)?;
            b.event_synchronize(&end)?;
            let ms = f64::from(b.elapsed_time(&start, &end)?);
            per_node[j].push(ms * 1e6 / CHAIN as f64);
        }
    }
    // Warm-up replays excluded.
    let medians: Vec<f64> = per_node
        .iter_mut()
        .map(|v| median(&mut v[4..].to_vec()))
        .collect();

    // Each chain added 1.0 once eagerly and CHAIN times per replay, to one buffer in stream
    // order (integers: exact in f32).
    let expected = (Chain::ALL.len() * (1 + REPS * CHAIN)) as f32;
    let got = b.download(&setup.x)?;
    if !got.iter().all(|&v| v == expected) {
        return Err(format!(
            "the chains did not do the same work: {:?}..., expected {expected}",
            &got[..4]
        )
        .into());
    }
    println!("bench_user_kernels: OK every chain did the same work");

    let base = medians[0];
    let mut pass = true;
    println!(
        "bench_user_kernels: {:<46} {:>14} {:>8} {:>8}",
        "chain of 1000 nodes, GPU time per replayed node", "ns/node", "ratio", "target"
    );
    for (chain, ns) in Chain::ALL.iter().zip(&medians) {
        let ratio = ns / base;
        let verdict = if *chain == Chain::PortableOp {
            ""
        } else if ratio <= TARGET {
            "PASS"
        } else {
            pass = false;
            "MISS"
        };
        println!(
            "bench_user_kernels: {:<46} {:>11.1} ns {:>8.3} {:>8} {verdict}",
            chain.name(),
            ns,
            ratio,
            if *chain == Chain::PortableOp {
                "-".to_owned()
            } else {
                format!("<={TARGET:.2}")
            }
        );
    }
    Ok(pass)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("bench_user_kernels: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
