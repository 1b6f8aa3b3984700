//! A cudarc user's own objects in an accel-graph graph: their context and stream, their
//! `CudaSlice<f32>` and `CudaSlice<bf16>`, an NVRTC kernel launched with cudarc's launch
//! builder and a cuBLAS GEMM through cudarc's wrapper, captured together with accel-graph's
//! GEMM, a portable kernel and portable ops in one graph. The user's slices are adopted and
//! the backend's buffers lent to cudarc, so the graph keeps every buffer its work touches
//! alive: the program drops them all before replaying, with no `unsafe` keep-alive. Replay
//! must equal the eager run bit for bit (and the host's arithmetic), with cudarc's event
//! tracking on and off.
//!
//! Prints one `OK` line per check and exits non-zero on any failure.
//!
//! Run: `cargo run --release -p accel-graph-cuda --example cudarc_interop` (needs an NVIDIA
//! GPU, and NVRTC and cuBLAS on the loader path).

use std::{error::Error, process::ExitCode, sync::Arc, sync::LazyLock};

use accel_graph_api::{
    Gemm, GraphError, NodeKind,
    half::bf16,
    kernel::{Access, Kernel, KernelArg},
    prelude::*,
};
use accel_graph_cuda::{
    CudaBackend, CudaBuffer,
    cudarc::{
        cublas::{CudaBlas, Gemm as _, GemmConfig, sys::cublasOperation_t},
        driver::{
            CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
            sys::CUstreamCaptureMode,
        },
        nvrtc::compile_ptx,
    },
};

type Outcome<T> = Result<T, Box<dyn Error>>;

/// Rows of the activations, their width, the first and second layers' widths.
const M: usize = 64;
const K: usize = 32;
const N: usize = 48;
const N2: usize = 40;
const ROUNDS: usize = 3;

/// The user's own kernel, compiled with cudarc's NVRTC wrapper: `xb = bf16(relu(x))`, rounded
/// to nearest even (the inputs are finite).
const RELU_TO_BF16: &str = r#"
extern "C" __global__ void relu_to_bf16(const float* x, unsigned short* xb, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned u = __float_as_uint(fmaxf(x[i], 0.0f));
        u += 0x7fffu + ((u >> 16) & 1u);
        xb[i] = (unsigned short)(u >> 16);
    }
}
"#;

/// A portable kernel of accel-graph (compiled by the backend's NVRTC path): `out = f32(z)`.
static BF16_TO_F32: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("ag_bf16_to_f32")
        .buffer::<f32>("out", Access::Write)
        .buffer::<bf16>("z", Access::Read)
        .scalar::<u32>("n")
        .cuda(
            r#"extern "C" __global__ void ag_bf16_to_f32(float* out, const unsigned short* z,
                                                      unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __uint_as_float(((unsigned)z[i]) << 16);
}"#,
        )
});

/// Small integers, seeded: every product and sum below is exact in f32, and the first GEMM's
/// results exact in bf16, so the device must equal the host bit for bit in any order.
fn integers(len: usize, seed: u64, span: i64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) as i64 % (2 * span + 1) - span) as f32
        })
        .collect()
}

fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// The host's arithmetic of `rounds` rounds.
fn host_reference(x: &[f32], w: &[bf16], w2: &[bf16], rounds: usize) -> Vec<f32> {
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v.max(0.0))).collect();
    let mut y = vec![bf16::ZERO; M * N];
    accel_graph_api::gemm_reference(&Gemm::new(M, N, K), &xb, w, &mut y);
    let mut z = vec![bf16::ZERO; M * N2];
    accel_graph_api::gemm_reference(&Gemm::new(M, N2, N), &y, w2, &mut z);
    let mut out2 = vec![0.0f32; M * N2];
    for _ in 0..rounds {
        for (o, z) in out2.iter_mut().zip(&z) {
            *o = 0.5 * *o + z.to_f32();
        }
    }
    out2
}

/// One round's buffers: the user's adopted slices, the backend's own.
struct Buffers {
    x: CudaBuffer<f32>,
    w: CudaBuffer<bf16>,
    w2: CudaBuffer<bf16>,
    xb: CudaBuffer<bf16>,
    y: CudaBuffer<bf16>,
    z: CudaBuffer<bf16>,
    out: CudaBuffer<f32>,
}

struct Program<'a> {
    backend: &'a CudaBackend,
    stream: &'a Arc<CudaStream>,
    relu: &'a CudaFunction,
    blas: &'a CudaBlas,
}

impl Program<'_> {
    /// The user's slices, made on their stream, adopted by the backend.
    fn buffers(&self, x: &[f32], w: &[bf16], w2: &[bf16]) -> Outcome<Buffers> {
        let x: CudaSlice<f32> = self.stream.clone_htod(x)?;
        let w: CudaSlice<bf16> = self.stream.clone_htod(w)?;
        let w2: CudaSlice<bf16> = self.stream.clone_htod(w2)?;
        let b = self.backend;
        Ok(Buffers {
            x: b.adopt_slice(x)?,
            w: b.adopt_slice(w)?,
            w2: b.adopt_slice(w2)?,
            xb: b.alloc(M * K)?,
            y: b.alloc(M * N)?,
            z: b.alloc(M * N2)?,
            out: b.alloc(M * N2)?,
        })
    }

    /// One round, all on the user's stream (the backend's current stream):
    /// xb = bf16(relu(x)) (user kernel), y = xb·w (user cuBLAS), z = y·w2 (accel-graph GEMM),
    /// out = f32(z) (portable kernel), out2 = 0.5·out2 + out (portable ops).
    fn round(&self, buf: &Buffers, out2: &CudaBuffer<f32>) -> Outcome<()> {
        let (b, s) = (self.backend, self.stream);
        let n = (M * K) as u32;
        {
            let (x, xb) = (b.lend(&buf.x, s)?, b.lend(&buf.xb, s)?);
            let mut launch = s.launch_builder(self.relu);
            launch.arg(&x).arg(&xb).arg(&n);
            // SAFETY: the arguments match `relu_to_bf16(const float*, unsigned short*,
            // unsigned)`, and both buffers hold `n` elements.
            unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
        }
        {
            // Row-major y[M×N] = xb[M×K] · w[K×N] is column-major yᵀ = wᵀ · xbᵀ.
            let cfg = GemmConfig {
                transa: cublasOperation_t::CUBLAS_OP_N,
                transb: cublasOperation_t::CUBLAS_OP_N,
                m: N as i32,
                n: M as i32,
                k: K as i32,
                alpha: bf16::ONE,
                lda: N as i32,
                ldb: K as i32,
                beta: bf16::ZERO,
                ldc: N as i32,
            };
            let (w, xb, mut y) = (b.lend(&buf.w, s)?, b.lend(&buf.xb, s)?, b.lend(&buf.y, s)?);
            // SAFETY: the shapes and leading dimensions match the buffers' lengths.
            unsafe { self.blas.gemm(cfg, &w, &xb, &mut y) }?;
        }
        b.gemm(&Gemm::new(M, N2, N), &buf.y, &buf.w2, &buf.z)?;
        b.launch_kernel(
            &BF16_TO_F32,
            BF16_TO_F32.grid_for(M * N2),
            &[
                KernelArg::buffer(&buf.out),
                KernelArg::buffer(&buf.z),
                KernelArg::scalar((M * N2) as u32),
            ],
        )?;
        b.scale(out2, 0.5)?;
        b.axpy(out2, 1.0, &buf.out)?;
        Ok(())
    }
}

/// Counts failed checks and prints each check's line.
struct Checks {
    tag: String,
    failed: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            println!("cudarc_interop: OK {}: {what}", self.tag);
        } else {
            self.failed += 1;
            println!("cudarc_interop: FAILED {}: {what}", self.tag);
        }
    }
}

fn bitwise(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The whole program on a context with cudarc's event tracking `tracking`.
fn run_with(tracking: bool, checks: &mut Checks) -> Outcome<()> {
    let ctx = CudaContext::new(0)?;
    if !tracking {
        // SAFETY: this program orders its cudarc slices itself: each is used on the one
        // stream it was made on until the backend adopts it.
        unsafe { ctx.disable_event_tracking() };
    }
    checks.check(
        ctx.is_event_tracking() == tracking,
        &format!(
            "cudarc event tracking is {}",
            if tracking { "on" } else { "off" }
        ),
    );
    let stream = ctx.new_stream()?;
    let backend = CudaBackend::from_context(Arc::clone(&ctx))?;
    let adopted = backend.adopt_stream(Arc::clone(&stream))?;
    let _current = backend.use_stream(&adopted)?;

    let ptx = compile_ptx(RELU_TO_BF16)?;
    let relu = ctx.load_module(ptx)?.load_function("relu_to_bf16")?;
    let blas = CudaBlas::new(Arc::clone(&stream))?;
    let program = Program {
        backend: &backend,
        stream: &stream,
        relu: &relu,
        blas: &blas,
    };
    let x = integers(M * K, 1, 3);
    let (w, w2) = (
        to_bf16(&integers(K * N, 2, 2)),
        to_bf16(&integers(N * N2, 3, 1)),
    );
    let want = host_reference(&x, &w, &w2, ROUNDS);

    // Eager.
    let eager_out2 = backend.alloc_from(&vec![0.0f32; M * N2])?;
    {
        let buf = program.buffers(&x, &w, &w2)?;
        for _ in 0..ROUNDS {
            program.round(&buf, &eager_out2)?;
        }
    }
    let eager = backend.download(&eager_out2)?;
    checks.check(
        bitwise(&eager, &want),
        "eager run (user kernel, user cuBLAS, accel-graph GEMM, portable kernel and ops) \
         equals the host's arithmetic",
    );

    // Captured, then every buffer but the result dropped before replay.
    let out2 = backend.alloc_from(&vec![0.0f32; M * N2])?;
    let mut graph = backend.graph(GraphOptions::new().keep_graph(true))?;
    {
        let buf = program.buffers(&x, &w, &w2)?;
        graph.capture_begin()?;
        let captured = program.round(&buf, &out2);
        graph.capture_end()?;
        captured?;
    }
    let topo = graph.nodes()?;
    checks.check(
        topo.count(NodeKind::Kernel) >= 5,
        &format!(
            "one graph holds the user's and accel-graph's work ({} nodes, {} kernels)",
            topo.len(),
            topo.count(NodeKind::Kernel)
        ),
    );
    checks.check(
        backend.download(&out2)?.iter().all(|&v| v == 0.0),
        "the capture ran nothing",
    );
    for _ in 0..ROUNDS {
        graph.replay()?;
    }
    let replayed = backend.download(&out2)?;
    checks.check(
        bitwise(&replayed, &eager),
        &format!(
            "{ROUNDS} replays after the adopted slices and lent buffers were dropped equal \
             {ROUNDS} eager rounds, bit for bit"
        ),
    );

    // Misuse is refused with typed errors.
    let other = CudaBackend::new(0)?;
    let foreign = other.alloc::<f32>(4)?;
    checks.check(
        matches!(
            backend.lend(&foreign, &stream),
            Err(GraphError::ForeignObject { what: "buffer" })
        ),
        "lending another backend instance's buffer is ForeignObject",
    );
    let side = ctx.new_stream()?;
    let side_handle = backend.adopt_stream(Arc::clone(&side))?;
    side.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let refused = {
        let _side = backend.use_stream(&side_handle)?;
        backend.add_scalar(&out2, 1.0)
    };
    let lend_refused = backend.lend(&out2, &side);
    // Ends the user's capture (cudarc then instantiates the empty graph; its result does not
    // matter here).
    let _ = side.end_capture(accel_graph_cuda::cudarc::driver::sys::CUgraphInstantiate_flags(0));
    checks.check(
        matches!(refused, Err(GraphError::Unsupported { .. }))
            && matches!(lend_refused, Err(GraphError::Unsupported { .. })),
        "work and lends on an adopted stream inside a capture begun through cudarc are refused",
    );
    checks.check(
        bitwise(&backend.download(&out2)?, &replayed),
        "the refused work changed nothing",
    );
    Ok(())
}

fn run() -> Outcome<usize> {
    // SAFETY: only tries to load the libraries, before cudarc's loaders (which panic if they
    // are absent).
    let (cuda, nvrtc, cublas) = unsafe {
        (
            accel_graph_cuda::cudarc::driver::sys::is_culib_present(),
            accel_graph_cuda::cudarc::nvrtc::sys::is_culib_present(),
            accel_graph_cuda::cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !(cuda && nvrtc && cublas) {
        println!(
            "cudarc_interop: skipped: CUDA driver present {cuda}, NVRTC present {nvrtc}, \
             cuBLAS present {cublas}"
        );
        return Ok(0);
    }
    let mut failed = 0;
    for tracking in [true, false] {
        let mut checks = Checks {
            tag: format!("[tracking {}]", if tracking { "on" } else { "off" }),
            failed: 0,
        };
        if let Err(e) = run_with(tracking, &mut checks) {
            checks.check(false, &format!("the program failed: {e}"));
        }
        failed += checks.failed;
    }
    Ok(failed)
}

fn main() -> ExitCode {
    match run() {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!("cudarc_interop: {failed} checks FAILED");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cudarc_interop: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
