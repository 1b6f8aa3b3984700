//! One CUDA graph holding a cuBLAS SGEMM, the user's own NVRTC-compiled kernel and the
//! portable ops, all captured natively from the current stream; its replay is checked
//! against the same program run eagerly. The user's work goes through the raw path (the
//! `unsafe` accessors): the buffers it touches are kept alive by this program, not by the
//! graph.
//!
//! Run: `cargo run -p accel-graph-cuda --example cublas_user_kernel` (needs an NVIDIA GPU,
//! cuBLAS and NVRTC libraries on the loader path).

use std::process::ExitCode;

use accel_graph_api::prelude::*;
use accel_graph_cuda::{
    CudaBackend, CudaBuffer,
    cudarc::{
        cublas::{CudaBlas, result::sgemm, sys as blas},
        driver::{CudaFunction, LaunchConfig, PushKernelArg},
        nvrtc::compile_ptx,
    },
};

/// The user's own kernel: `c[i] = max(c[i], 0) + 0.25`.
const USER_KERNEL: &str = r#"
extern "C" __global__ void relu_shift(float* c, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = fmaxf(c[i], 0.0f) + 0.25f;
}
"#;

const N: usize = 128; // square matrices N x N

struct Program<'a> {
    backend: &'a CudaBackend,
    blas: &'a CudaBlas,
    user: &'a CudaFunction,
    a: &'a CudaBuffer,
    b: &'a CudaBuffer,
    c: &'a CudaBuffer,
    d: &'a CudaBuffer,
}

impl Program<'_> {
    /// c = a·b (cuBLAS), c = relu(c) + 0.25 (user kernel), c += 2·d, c *= 0.5, d = c.
    fn run(&self) -> Result<(), Box<dyn std::error::Error>> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let n = N as i32;
        // SAFETY: a, b, c are N×N device matrices of this context; the handle's stream is
        // the current stream.
        unsafe {
            sgemm(
                *self.blas.handle(),
                blas::cublasOperation_t::CUBLAS_OP_N,
                blas::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                n,
                &alpha,
                self.a.block().device_ptr() as *const f32,
                n,
                self.b.block().device_ptr() as *const f32,
                n,
                &beta,
                self.c.block().device_ptr() as *mut f32,
                n,
            )?;
        }
        // SAFETY: the user kernel touches only `c`, which outlives every replay below, and the
        // stream's captures are begun through the backend.
        let stream = unsafe { self.backend.current_cuda_stream() };
        let (ptr, len) = (self.c.block().device_ptr(), (N * N) as u64);
        let mut launch = stream.launch_builder(self.user);
        launch.arg(&ptr).arg(&len);
        // SAFETY: the arguments match `relu_shift(float*, unsigned long long)`.
        unsafe { launch.launch(LaunchConfig::for_num_elems((N * N) as u32)) }?;
        self.backend.axpy(self.c, 2.0, self.d)?;
        self.backend.scale(self.c, 0.5)?;
        self.backend.copy(self.d, self.c)?;
        Ok(())
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cublas_user_kernel: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            println!("cublas_user_kernel: skipped: {e}");
            return Ok(());
        }
    };
    // SAFETY: probing for the libraries before cudarc's loaders (which panic if absent).
    let (has_blas, has_nvrtc) = unsafe {
        (
            accel_graph_cuda::cudarc::cublas::sys::is_culib_present(),
            accel_graph_cuda::cudarc::nvrtc::sys::is_culib_present(),
        )
    };
    if !(has_blas && has_nvrtc) {
        println!(
            "cublas_user_kernel: skipped: cuBLAS present {has_blas}, NVRTC present {has_nvrtc}"
        );
        return Ok(());
    }
    let stream = backend.new_stream()?;
    let _current = backend.use_stream(&stream)?;
    // SAFETY: cuBLAS works on `a`, `b`, `c` and the workspace, which all outlive every replay;
    // captures on its stream are begun through the backend.
    let blas = CudaBlas::new(unsafe { backend.current_cuda_stream() })?;
    // A fixed workspace, so cuBLAS never allocates during the capture.
    let workspace = backend.alloc::<f32>(8 << 20)?;
    // SAFETY: the workspace buffer outlives every use of the handle below.
    unsafe {
        blas::cublasSetWorkspace_v2(
            *blas.handle(),
            workspace.block().device_ptr() as *mut _,
            workspace.num_bytes(),
        )
        .result()?;
    }
    let ptx = compile_ptx(USER_KERNEL)?;
    // SAFETY: the context only loads the module; the kernel's memory is the backend's `c`.
    let module = unsafe { backend.driver().context() }.load_module(ptx)?;
    let user = module.load_function("relu_shift")?;

    let a_host: Vec<f32> = (0..N * N)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let b_host: Vec<f32> = (0..N * N)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
        .collect();
    let d_host: Vec<f32> = (0..N * N).map(|i| (i % 3) as f32).collect();
    let a = backend.alloc_from(&a_host)?;
    let b = backend.alloc_from(&b_host)?;
    let c = backend.alloc(N * N)?;
    let d = backend.alloc_from(&d_host)?;
    let program = Program {
        backend: &backend,
        blas: &blas,
        user: &user,
        a: &a,
        b: &b,
        c: &c,
        d: &d,
    };

    const STEPS: usize = 3;
    for _ in 0..STEPS {
        program.run()?;
    }
    let eager = backend.download(&d)?;

    backend.upload(&d, &d_host)?;
    let mut graph = backend.graph(GraphOptions::new().keep_graph(true))?;
    graph.capture_begin()?;
    let captured = program.run();
    graph.capture_end()?;
    captured?;
    let topo = graph.nodes()?;
    println!(
        "cublas_user_kernel: graph has {} nodes ({} kernels, {} memcpy)",
        topo.len(),
        topo.count(accel_graph_api::NodeKind::Kernel),
        topo.count(accel_graph_api::NodeKind::Memcpy)
    );
    for node in &topo.nodes {
        println!("  node {}: {} {}", node.id, node.kind, node.label);
    }
    for _ in 0..STEPS {
        graph.replay()?;
    }
    let replayed = backend.download(&d)?;
    let max_diff = eager
        .iter()
        .zip(&replayed)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let bitwise = eager
        .iter()
        .zip(&replayed)
        .all(|(x, y)| x.to_bits() == y.to_bits());
    println!(
        "cublas_user_kernel: replay vs eager: bitwise equal {bitwise}, max |diff| {max_diff:e}"
    );
    if max_diff > 1e-4 {
        return Err(format!("replay differs from eager by {max_diff}").into());
    }
    println!("cublas_user_kernel: OK");
    Ok(())
}
