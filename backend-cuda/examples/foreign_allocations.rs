//! cudarc code that allocates and frees per op, captured as it is: every step of the user's
//! "forward" allocates its output with cudarc (`cuMemAllocAsync`) and drops its input
//! (`cuMemFreeAsync`), and the forward's result outlives the capture. In an accel-graph
//! capture those become the graph's allocation and free nodes; the result keeps one address
//! across replays and holds each replay's answer, which must equal the eager forward's bit for
//! bit for 10,000 replays with device memory flat. Checked for the three ways a cudarc
//! context can stand: event tracking on with one stream (candle's default device), tracking
//! off, and tracking on with several streams.
//!
//! Prints one `OK`/`FAILED` line per check and a `foreign_allocations:` summary line; exits
//! non-zero on any failure.
//!
//! Run: `cargo run --release -p accel-graph-cuda --example foreign_allocations [replays]`
//! (needs an NVIDIA GPU, and NVRTC on the loader path).

use std::{error::Error, process::ExitCode, sync::Arc, time::Instant};

use accel_graph_api::{GraphError, NodeKind, prelude::*};
use accel_graph_cuda::{
    CudaBackend,
    cudarc::{
        driver::{
            CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg, sys,
        },
        nvrtc::compile_ptx,
    },
};

type Outcome<T> = Result<T, Box<dyn Error>>;

/// Elements of each op's output, and the ops of one forward (each allocates one output and
/// frees one input).
const N: usize = 4096;
const OPS: usize = 128;

/// The user's kernel: `out = in * a + b`.
const AXPB: &str = r#"
extern "C" __global__ void axpb(float* out, const float* in, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * a + b;
}
"#;

/// The user's forward, written with cudarc only: a copy of the input, then `OPS` steps, each
/// allocating its output and dropping its input.
fn forward(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    x: &CudaSlice<f32>,
) -> Outcome<CudaSlice<f32>> {
    let mut current = stream.clone_dtod(x)?;
    for i in 0..OPS {
        // SAFETY: every element is written by the launch below before anything reads it.
        let mut next = unsafe { stream.alloc::<f32>(N) }?;
        let (a, b) = (if i % 2 == 0 { 0.5f32 } else { 1.75 }, (i % 7) as f32);
        let n = N as u32;
        let mut launch = stream.launch_builder(f);
        launch.arg(&mut next).arg(&current).arg(&a).arg(&b).arg(&n);
        // SAFETY: the kernel's parameters are as pushed; `next` and `current` hold `N` floats.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
        current = next;
    }
    Ok(current)
}

fn graph_memory_in_use(ctx: &CudaContext) -> Outcome<u64> {
    let mut used = 0u64;
    // SAFETY: an out-parameter of the attribute's type (a 64-bit count of bytes).
    let rc = unsafe {
        sys::cuDeviceGetGraphMemAttribute(
            ctx.cu_device(),
            sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
            (&mut used as *mut u64).cast(),
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDeviceGetGraphMemAttribute: {rc:?}").into());
    }
    Ok(used)
}

struct Checks {
    failed: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            println!("OK      {what}");
        } else {
            println!("FAILED  {what}");
            self.failed += 1;
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// How the user's cudarc context stands.
#[derive(Clone, Copy, Debug)]
enum Tracking {
    /// Tracking on, one stream (cudarc's per-thread stream): candle's default device.
    OnOneStream,
    /// Tracking switched off by the user, a stream of its own.
    Off,
    /// Tracking on, a stream made with `new_stream` (cudarc's multi-stream mode).
    OnManyStreams,
}

fn run(tracking: Tracking, replays: usize, checks: &mut Checks) -> Outcome<()> {
    let ctx = CudaContext::new(0)?;
    let stream = match tracking {
        Tracking::OnOneStream => ctx.per_thread_stream(),
        Tracking::Off => {
            // SAFETY: this program orders its slices itself (one stream).
            unsafe { ctx.disable_event_tracking() };
            ctx.new_stream()?
        }
        Tracking::OnManyStreams => ctx.new_stream()?,
    };
    let module = ctx.load_module(compile_ptx(AXPB)?)?;
    let f = module.load_function("axpb")?;
    let host: Vec<f32> = (0..N).map(|i| (i % 97) as f32 * 0.25).collect();
    let x = stream.clone_htod(&host)?;
    let eager = forward(&stream, &f, &x)?;
    let eager = stream.clone_dtoh(&eager)?;
    stream.synchronize()?;

    let backend = CudaBackend::from_context(Arc::clone(&ctx))?;
    let s = backend.adopt_stream(Arc::clone(&stream))?;
    let _current = backend.use_stream(&s)?;
    let mut graph = backend.graph(GraphOptions::new().keep_graph(true))?;
    graph.capture_begin()?;
    let captured = forward(&stream, &f, &x);
    let ended = graph.capture_end();
    let out = match (captured, ended) {
        (Ok(out), Ok(())) => out,
        (captured, ended) => {
            // With cudarc's tracking on and several streams, cudarc waits inside the capture
            // on the events it recorded on the input before it: CUDA refuses such waits and
            // invalidates the capture (the documented rule), which must come back typed.
            let expected = matches!(tracking, Tracking::OnManyStreams)
                && matches!(ended, Err(GraphError::CaptureInvalidated { .. }));
            checks.check(
                expected,
                &format!(
                    "{tracking:?}: capture: forward {:?}, capture_end {ended:?}",
                    captured.err()
                ),
            );
            let _ = ctx.check_err();
            return Ok(());
        }
    };
    let nodes = graph.nodes()?;
    checks.check(
        nodes.count(NodeKind::MemAlloc) == OPS + 1 && nodes.count(NodeKind::MemFree) == OPS,
        &format!(
            "{tracking:?}: the graph holds the forward's allocations and frees ({} nodes: {} \
             allocations, {} frees, {} kernels)",
            nodes.len(),
            nodes.count(NodeKind::MemAlloc),
            nodes.count(NodeKind::MemFree),
            nodes.count(NodeKind::Kernel)
        ),
    );
    let address = {
        use accel_graph_cuda::cudarc::driver::DevicePtr;
        let (ptr, _sync) = out.device_ptr(&stream);
        ptr
    };
    let start = Instant::now();
    let mut free_after_first = 0;
    let mut graph_mem_after_first = 0;
    let mut equal = true;
    for r in 0..replays {
        graph.replay()?;
        if r == 0 || r + 1 == replays || r % 1000 == 999 {
            let got = stream.clone_dtoh(&out)?;
            stream.synchronize()?;
            equal &= bits(&got) == bits(&eager);
            if r == 0 {
                free_after_first = backend.mem_get_info()?.0;
                graph_mem_after_first = graph_memory_in_use(&ctx)?;
            }
        }
    }
    let elapsed = start.elapsed();
    checks.check(
        !matches!(tracking, Tracking::OnOneStream) || !ctx.is_in_multi_stream_mode(),
        &format!("{tracking:?}: the backend left cudarc's stream mode as the user had it"),
    );
    let (free_end, graph_mem_end) = (backend.mem_get_info()?.0, graph_memory_in_use(&ctx)?);
    checks.check(
        equal,
        &format!("{tracking:?}: {replays} replays equal the eager forward bit for bit"),
    );
    checks.check(
        free_end == free_after_first && graph_mem_end == graph_mem_after_first,
        &format!(
            "{tracking:?}: device memory flat over the replays (free {free_after_first} -> \
             {free_end} bytes, graph memory {graph_mem_after_first} -> {graph_mem_end} bytes)"
        ),
    );
    println!(
        "foreign_allocations: {tracking:?} {replays} replays of {} allocations + {OPS} frees in \
         {:.1} ms ({:.2} us/replay), result at {address:#x}",
        OPS + 1,
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / replays as f64
    );
    // The result dropped between replays: freed in stream order; the next replay allocates it
    // again.
    drop(out);
    for _ in 0..3 {
        graph.replay()?;
    }
    stream.synchronize()?;
    checks.check(
        ctx.check_err().is_ok(),
        &format!("{tracking:?}: the result dropped between replays, three more replays: no error"),
    );
    drop(graph);
    stream.synchronize()?;
    checks.check(
        ctx.check_err().is_ok(),
        &format!("{tracking:?}: the graph dropped: no error"),
    );

    // The result dropped before the first replay.
    let mut early = backend.graph(GraphOptions::new())?;
    early.capture_begin()?;
    let out = forward(&stream, &f, &x)?;
    early.capture_end()?;
    drop(out);
    let dropped = ctx.check_err();
    for _ in 0..3 {
        early.replay()?;
    }
    stream.synchronize()?;
    let replayed = ctx.check_err();
    println!(
        "foreign_allocations: {tracking:?} result dropped before the first replay: drop {dropped:?}, \
         replays {replayed:?}"
    );
    drop(early);

    // A pageable upload inside a capture: the driver records it as a copy from the vector's
    // address, which the capture's end refuses.
    let mut upload = backend.graph(GraphOptions::new())?;
    upload.capture_begin()?;
    let uploaded = stream.clone_htod(&host.clone());
    let ended = upload.capture_end();
    checks.check(
        matches!(ended, Err(GraphError::CaptureInvalidated { .. })),
        &format!(
            "{tracking:?}: a pageable clone_htod in a capture ({}) is refused at \
             capture_end: {ended:?}",
            if uploaded.is_ok() {
                "issued"
            } else {
                "refused"
            }
        ),
    );
    // The slice the refused capture allocated was never backed: its free is refused by CUDA
    // (`CUDA_ERROR_INVALID_VALUE` in cudarc's error state), as for a result dropped before
    // its graph's first replay.
    drop((uploaded, upload));
    let _ = stream.synchronize();
    let _ = ctx.check_err();
    Ok(())
}

fn main() -> ExitCode {
    let replays = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000usize);
    let mut checks = Checks { failed: 0 };
    for tracking in [
        Tracking::OnOneStream,
        Tracking::Off,
        Tracking::OnManyStreams,
    ] {
        if let Err(e) = run(tracking, replays, &mut checks) {
            checks.check(false, &format!("{tracking:?}: {e}"));
        }
    }
    println!("foreign_allocations: {} failed", checks.failed);
    if checks.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
