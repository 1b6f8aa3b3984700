//! What capture costs at start-up, from a fresh process: the first capture + instantiate of a
//! chain of kernels (accel-graph, or the same done with cudarc alone), and a serving system's
//! pre-capture of many batch-size buckets through [`BucketedGraphCache`]. Run once per process
//! by `examples/bench/capture_startup.sh`, which compares with PyTorch
//! (`examples/bench/torch_capture_startup.py`) in the same run.
//!
//! ```text
//! capture_startup --mode accel  --kernels 1000 [--backend cuda]   # the layer
//! capture_startup --mode cudarc --kernels 1000                    # cudarc alone (CUDA)
//! capture_startup --mode buckets --buckets 32 --ops 1000 [--threads 4] [--trace] [--progress]
//! capture_startup --mode anatomy --ops 1000                       # one bucket's instantiation
//! ```
//!
//! Lines printed: `startup: mode=M kernels=K capture_us=.. instantiate_us=.. total_us=..
//! first_replay_us=.. steady_replay_us=..` and `startup-set: buckets=N ops=K total_ms=..
//! reserved_mib=.. device_used_mib=..`. `--trace` prints accel-graph's tracing spans as they
//! close (capture, instantiate, upload, precapture), with their durations.

use std::time::{Duration, Instant};

use accel_graph::{
    AcceleratorGraph, Backend, CaptureExt, DeviceBuffer, GraphOptions, Result,
    utils::{BucketedCacheOptions, BucketedGraphCache, CaptureSizes},
};
use accel_graph_examples::{BackendArg, backend_label};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// The first capture of a kernel chain through accel-graph.
    Accel,
    /// The same chain captured with cudarc alone (CUDA only).
    Cudarc,
    /// The pre-capture of a serving set of bucket graphs.
    Buckets,
    /// Where one bucket's instantiation goes: the serving step captured as the set does, with
    /// its temporaries made outside the capture, and without its copies.
    Anatomy,
}

#[derive(Debug, Parser)]
#[command(about = "Capture cost at start-up, from a fresh process")]
struct Args {
    #[command(flatten)]
    backend: BackendArg,
    #[arg(long, value_enum, default_value_t = Mode::Accel)]
    mode: Mode,
    /// Kernels in the chain (modes accel and cudarc).
    #[arg(long, default_value_t = 1000)]
    kernels: usize,
    /// Buckets of the serving set (mode buckets): sizes 1, 2, 4, then every 8 up.
    #[arg(long, default_value_t = 32)]
    buckets: usize,
    /// Ops per step of the serving set.
    #[arg(long, default_value_t = 1000)]
    ops: usize,
    /// Elements per row of the serving set's activations.
    #[arg(long, default_value_t = 1024)]
    width: usize,
    /// Capture the buckets on this many threads, each with its own cache and stream
    /// (thread-local capture mode), sharing one pool per thread.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print tracing spans with their durations as they close.
    #[arg(long)]
    trace: bool,
    /// Show a progress bar while pre-capturing (mode buckets).
    #[arg(long)]
    progress: bool,
    /// Eager warm-up runs before each bucket's capture (mode buckets; vLLM's and the PyTorch
    /// side's: one).
    #[arg(long, default_value_t = 1)]
    warmup_iters: usize,
    /// Instantiate each bucket in line instead of on a second thread (mode buckets).
    #[arg(long)]
    in_line: bool,
}

/// This process's minor page faults so far (Linux; 0 elsewhere): a first capture's cost is
/// partly the driver's and the layer's fresh host memory being touched.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which may hold spaces), from the third on.
            let rest = stat.rsplit_once(')')?.1;
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Capture sizes like vLLM's: 1, 2, 4, then multiples of 8.
fn bucket_sizes(n: usize) -> Vec<usize> {
    let mut sizes = vec![1, 2, 4];
    let mut next = 8;
    while sizes.len() < n {
        sizes.push(next);
        next += 8;
    }
    sizes.truncate(n);
    sizes
}

/// The first capture + instantiate of `kernels` portable ops in this process (the ops' kernels
/// already loaded by one eager op, as any program has run before it captures), then its first
/// replay and a steady-state one.
fn accel_chain<B: Backend>(b: &B, kernels: usize) -> Result<()> {
    let x = b.alloc_from(&vec![0.0f32; 1024])?;
    let stream = b.new_stream()?;
    {
        let _s = b.use_stream(&stream)?;
        b.add_scalar(&x, 1.0)?;
    }
    b.synchronize()?;
    // The chain, captured into `g` on the current stream (the first time and once more warm).
    let record = |g: &mut B::Graph| -> Result<()> {
        g.capture_begin()?;
        for _ in 0..kernels {
            b.add_scalar(&x, 1.0)?;
        }
        g.capture_end().map(drop)
    };
    let faults = minor_faults();
    let start = Instant::now();
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    {
        let _s = b.use_stream(&stream)?;
        record(&mut g)?;
    }
    let captured = start.elapsed();
    let capture_faults = minor_faults().saturating_sub(faults);
    {
        let _s = b.use_stream(&stream)?;
        g.instantiate()?;
    }
    b.stream_synchronize(&stream)?;
    let total = start.elapsed();
    let instantiate_faults = minor_faults().saturating_sub(faults + capture_faults);
    let replay = |g: &mut B::Graph| -> Result<Duration> {
        let t = Instant::now();
        let _s = b.use_stream(&stream)?;
        g.replay()?;
        drop(_s);
        b.stream_synchronize(&stream)?;
        Ok(t.elapsed())
    };
    let first = replay(&mut g)?;
    let mut steady: Vec<Duration> = (0..9).map(|_| replay(&mut g)).collect::<Result<_>>()?;
    steady.sort();
    // The capture alone once more, warm (the layer's own cost per op, next to cudarc's).
    let warm = {
        let mut again = b.graph(GraphOptions::new().keep_graph(true))?;
        let _s = b.use_stream(&stream)?;
        let t = Instant::now();
        record(&mut again)?;
        t.elapsed()
    };
    println!(
        "startup: mode=accel kernels={kernels} capture_us={:.1} instantiate_us={:.1} \
         total_us={:.1} first_replay_us={:.1} steady_replay_us={:.1} warm_capture_us={:.1} \
         capture_faults={capture_faults} instantiate_faults={instantiate_faults}",
        micros(captured),
        micros(total - captured),
        micros(total),
        micros(first),
        micros(steady[4]),
        micros(warm)
    );
    Ok(())
}

/// The same chain with cudarc alone: the same PTX kernel, launched through cudarc's launch
/// builder into a raw stream capture, instantiated with the same flags and uploaded.
fn cudarc_chain(kernels: usize) -> std::result::Result<(), String> {
    use accel_graph::cuda::cudarc::{
        self,
        driver::{CudaContext, LaunchConfig, PushKernelArg, sys},
    };
    let e = |what: &'static str| move |err: cudarc::driver::DriverError| format!("{what}: {err}");
    let ctx = CudaContext::new(0).map_err(e("context"))?;
    // SAFETY: nothing here uses a slice on two streams.
    unsafe { ctx.disable_event_tracking() };
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(
            accel_graph::cuda::portable_ops_ptx(),
        ))
        .map_err(e("module"))?;
    let f = module
        .load_function("accel_graph_add_scalar")
        .map_err(e("function"))?;
    let stream = ctx.new_stream().map_err(e("stream"))?;
    let x = stream.alloc_zeros::<f32>(1024).map_err(e("alloc"))?;
    let (a, n) = (1.0f32, 1024u64);
    let cfg = LaunchConfig {
        grid_dim: (4, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let launch = || {
        let mut builder = stream.launch_builder(&f);
        builder.arg(&x).arg(&a).arg(&x).arg(&n);
        // SAFETY: the kernel's signature is (u64 y, f32 a, u64 x, u64 n) over 1024 elements.
        unsafe { builder.launch(cfg) }.map(drop)
    };
    launch().map_err(e("warm-up"))?;
    stream.synchronize().map_err(e("sync"))?;
    // The chain's launches into a capture begun on the stream (the first time and once more
    // warm); the caller ends it.
    let record = || -> std::result::Result<(), String> {
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
            .map_err(e("begin"))?;
        for _ in 0..kernels {
            launch().map_err(e("launch"))?;
        }
        Ok(())
    };
    let faults = minor_faults();
    let start = Instant::now();
    record()?;
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(
            accel_graph::cuda::INSTANTIATE_FLAGS as _,
        ))
        .map_err(e("end"))?
        .ok_or("empty capture")?;
    let captured = start.elapsed();
    graph.upload().map_err(e("upload"))?;
    stream.synchronize().map_err(e("sync"))?;
    let total = start.elapsed();
    let faults = minor_faults().saturating_sub(faults);
    let replay = || -> std::result::Result<Duration, String> {
        let t = Instant::now();
        graph.launch().map_err(e("launch graph"))?;
        stream.synchronize().map_err(e("sync"))?;
        Ok(t.elapsed())
    };
    let first = replay()?;
    let mut steady: Vec<Duration> = (0..9)
        .map(|_| replay())
        .collect::<std::result::Result<_, _>>()?;
    steady.sort();
    // The capture alone once more, warm: ended through the driver without instantiating
    // (cudarc's `end_capture` instantiates).
    let t = Instant::now();
    record()?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: ends the capture begun just above on this stream into a local.
    let ended = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut raw) };
    let warm = t.elapsed();
    if !raw.is_null() {
        // SAFETY: the graph just returned, owned here, destroyed once.
        unsafe { sys::cuGraphDestroy(raw) };
    }
    if ended != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("end of the warm capture: {ended:?}"));
    }
    println!(
        "startup: mode=cudarc kernels={kernels} capture_us={:.1} instantiate_us={:.1} \
         total_us={:.1} first_replay_us={:.1} steady_replay_us={:.1} warm_capture_us={:.1} \
         faults={faults}",
        micros(captured),
        micros(total - captured),
        micros(total),
        micros(first),
        micros(steady[4]),
        micros(warm)
    );
    Ok(())
}

/// One serving step of `ops` element-wise ops on a batch: temporaries from the capture's
/// pool, as a model's activations are.
fn serving_step<B: Backend>(
    b: &B,
    inputs: &[&B::Buffer<f32>],
    ops: usize,
) -> Result<Vec<B::Buffer<f32>>> {
    let x = inputs[0];
    let h = b.alloc::<f32>(x.len())?;
    b.copy(&h, x)?;
    let mut temps = Vec::new();
    for i in 0..ops.saturating_sub(2) {
        match i % 4 {
            0 => b.scale(&h, 0.5)?,
            1 => b.add_scalar(&h, 1.0)?,
            2 => b.axpy(&h, 0.25, x)?,
            _ => {
                // Every 4th op makes a temporary (and frees the one before): pool traffic.
                let t = b.alloc::<f32>(x.len())?;
                b.copy(&t, &h)?;
                temps.push(t);
                if temps.len() > 2 {
                    temps.remove(0);
                }
            }
        }
    }
    let out = b.alloc::<f32>(x.len())?;
    b.copy(&out, &h)?;
    Ok(vec![out])
}

/// Pre-captures the serving set: `buckets` graphs of a `ops`-op step, largest first into one
/// shared pool (vLLM's order), on `threads` threads.
fn bucket_set<B: Backend>(b: &B, args: &Args) -> Result<()> {
    let sizes = bucket_sizes(args.buckets);
    let (ops, width) = (args.ops, args.width);
    let (free_before, _) = device_memory(b);
    let start = Instant::now();
    let chunks: Vec<Vec<usize>> = (0..args.threads)
        .map(|t| {
            sizes
                .iter()
                .copied()
                .enumerate()
                .filter(|(i, _)| i % args.threads == t)
                .map(|(_, s)| s)
                .collect()
        })
        .collect();
    let bar = args.progress.then(|| {
        let bar = indicatif::ProgressBar::new(sizes.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "pre-capture {bar:40} {pos}/{len} buckets, {elapsed_precise} (bucket {msg})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let caches = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .filter(|c| !c.is_empty())
            .map(|chunk| {
                let bar = bar.clone();
                scope.spawn(move || -> Result<_> {
                    let step =
                        move |b: &B, inputs: &[&B::Buffer<f32>]| serving_step(b, inputs, ops);
                    let mode = if args.threads > 1 {
                        accel_graph::CaptureErrorMode::ThreadLocal
                    } else {
                        accel_graph::CaptureErrorMode::Global
                    };
                    let mut cache = BucketedGraphCache::new(
                        b,
                        step,
                        CaptureSizes::new(chunk.iter().copied())?,
                        vec![width],
                        BucketedCacheOptions::new()
                            .capture_error_mode(mode)
                            .warmup_iters(args.warmup_iters)
                            .background_instantiate(!args.in_line),
                    )?;
                    cache.capture_all_with_progress(|p| {
                        if let Some(bar) = &bar {
                            bar.set_message(p.bucket.to_string());
                            bar.inc(1);
                        }
                    })?;
                    Ok(cache)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Result<Vec<_>>>()
    })?;
    b.synchronize()?;
    let total = start.elapsed();
    if let Some(bar) = bar {
        bar.finish();
    }
    let (free_after, _) = device_memory(b);
    let stats = b.memory_stats();
    println!(
        "startup-set: buckets={} ops={ops} width={width} threads={} warmup_iters={} \
         background={} total_ms={:.2} reserved_mib={:.1} device_used_mib={:.1}",
        sizes.len(),
        args.threads,
        args.warmup_iters,
        !args.in_line,
        total.as_secs_f64() * 1e3,
        stats.reserved_bytes as f64 / (1 << 20) as f64,
        free_before.saturating_sub(free_after) as f64 / (1 << 20) as f64,
    );
    // The graphs replay what the step computes: each cache's largest bucket against an eager
    // run of the same batch.
    for mut cache in caches {
        let size = cache.sizes().largest();
        let input: Vec<f32> = (0..size * width).map(|i| (i % 13) as f32).collect();
        let x = b.alloc_from(&input)?;
        let want = b.download(&serving_step(b, &[&x], ops)?[0])?;
        let got = cache.run(&[&input])?.download(0)?;
        if got != want {
            return Err(accel_graph::GraphError::ArgumentMismatch(format!(
                "bucket {size}: the replay differs from the eager step"
            )));
        }
    }
    Ok(())
}

/// Instantiation of one bucket's step, four ways, each captured and instantiated 3 times:
/// `pool` as the set captures it (temporaries from the graph's pool), `preallocated` (the
/// temporaries made before the capture), `no-copies` (copies left out), and as `pool` but
/// instantiated by `capture_end` (`keep_graph(false)`, as the set does; its capture time then
/// includes the instantiation).
fn anatomy<B: Backend>(b: &B, args: &Args) -> Result<()> {
    let n = args.width * 8;
    let x = b.alloc_from(&vec![1.0f32; n])?;
    let h = b.alloc::<f32>(n)?;
    // As many as the step keeps alive at once, taken in turn.
    let temps = (0..3)
        .map(|_| b.alloc::<f32>(n))
        .collect::<Result<Vec<_>>>()?;
    let stream = b.new_stream()?;
    for variant in [
        "pool",
        "preallocated",
        "no-copies",
        "pool-instantiated-at-end",
    ] {
        for round in 0..3 {
            let at_end = variant == "pool-instantiated-at-end";
            let mut g = b.graph(GraphOptions::new().keep_graph(!at_end))?;
            let t0 = Instant::now();
            {
                let _s = b.use_stream(&stream)?;
                g.capture(|| match variant {
                    "pool" | "pool-instantiated-at-end" => {
                        serving_step(b, &[&x], args.ops).map(|_| ())
                    }
                    _ => {
                        for i in 0..args.ops.saturating_sub(2) {
                            match i % 4 {
                                0 => b.scale(&h, 0.5)?,
                                1 => b.add_scalar(&h, 1.0)?,
                                2 => b.axpy(&h, 0.25, &x)?,
                                _ if variant == "preallocated" => {
                                    b.copy(&temps[i / 4 % temps.len()], &h)?
                                }
                                _ => b.add_scalar(&h, 0.0)?,
                            }
                        }
                        Ok(())
                    }
                })?;
            }
            let t1 = Instant::now();
            if !at_end {
                let _s = b.use_stream(&stream)?;
                g.instantiate()?;
            }
            let t2 = Instant::now();
            b.stream_synchronize(&stream)?;
            println!(
                "anatomy: variant={variant} round={round} nodes={} capture_us={:.1} \
                 instantiate_us={:.1} upload_sync_us={:.1}",
                g.nodes().map_or(0, |t| t.nodes.len()),
                micros(t1 - t0),
                micros(t2 - t1),
                micros(t2.elapsed())
            );
        }
    }
    Ok(())
}

/// `(free, total)` device bytes where the backend reports them (CUDA), else zeros.
fn device_memory<B: Backend>(b: &B) -> (usize, usize) {
    let any: &dyn std::any::Any = b;
    any.downcast_ref::<accel_graph::cuda::CudaBackend>()
        .and_then(|c| c.mem_get_info().ok())
        .unwrap_or((0, 0))
}

struct Job(Args);

impl accel_graph::BackendJob for Job {
    type Output = Result<()>;

    fn run<B: Backend>(self, b: &B) -> Result<()> {
        eprintln!("backend: {}", backend_label(b));
        match self.0.mode {
            Mode::Accel => accel_chain(b, self.0.kernels),
            Mode::Buckets => bucket_set(b, &self.0),
            Mode::Anatomy => anatomy(b, &self.0),
            Mode::Cudarc => unreachable!("handled without a backend"),
        }
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.trace {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .try_init();
    } else {
        accel_graph_examples::init_logging();
    }
    let outcome = if args.mode == Mode::Cudarc {
        cudarc_chain(args.kernels).map_err(|e| e.to_string())
    } else {
        match args.backend.choice() {
            Ok(choice) => match accel_graph::run_on(choice, Job(args)) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) | Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        }
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
