//! Reliability figures on a real GPU, each printed as `reliability: <check>: <figures> OK|FAILED`:
//!
//! 1. **record_stream**: a pool buffer dropped while a long-running kernel on another stream
//!    still reads it is not handed out again before that kernel ends (and the kernel reads
//!    the right values); without `record_stream`, the same drop does reuse the block.
//! 2. **drop orders**: a second backend instance makes graphs (with pool memory) and buffers,
//!    every handle of that instance is dropped first, then the graphs are replayed and
//!    dropped on other threads: device memory (`cuMemGetInfo`) is back to where it was.
//! 3. **frees in host callbacks**: buffers dropped inside host callbacks (eager and in replayed
//!    host nodes, where CUDA permits no `cuMemFree`) are freed after the callbacks: device
//!    memory (`cuMemGetInfo`) is back to where it was.
//! 4. **sticky device fault** (last: it ruins the context for good): the user's own kernel
//!    writes to an illegal address; every later call of the backend returns
//!    `GraphError::DeviceFault` naming `CUDA_ERROR_ILLEGAL_ADDRESS` — no panic, no hang — and
//!    dropping everything afterwards is quiet.
//!
//! Run: `cargo run --release -p accel-graph-cuda --example reliability` (needs a GPU).

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use accel_graph_api::{DeviceBuffer, GraphError, prelude::*};
use accel_graph_cuda::{
    CudaBackend,
    cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg},
};

/// `spin_read(x, out, ns)`: one thread waits `ns` nanoseconds (the GPU's global timer), then
/// copies `x[0]` to `out[0]`; `poke(p)` stores to address `p`.
const KERNELS: &str = r#"
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin_read(.param .u64 p_x, .param .u64 p_out, .param .u64 p_ns)
{
	.reg .pred %p<2>;
	.reg .b64 %rd<8>;
	.reg .f32 %f<2>;
	ld.param.u64 %rd1, [p_x];
	ld.param.u64 %rd2, [p_out];
	ld.param.u64 %rd3, [p_ns];
	mov.u64 %rd4, %globaltimer;
$L_spin:
	mov.u64 %rd5, %globaltimer;
	sub.u64 %rd6, %rd5, %rd4;
	setp.lt.u64 %p1, %rd6, %rd3;
	@%p1 bra $L_spin;
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	ld.global.f32 %f1, [%rd1];
	st.global.f32 [%rd2], %f1;
	ret;
}
.visible .entry poke(.param .u64 p)
{
	.reg .b64 %rd<2>;
	.reg .f32 %f<2>;
	ld.param.u64 %rd1, [p];
	mov.f32 %f1, 0f3F800000;
	st.global.f32 [%rd1], %f1;
	ret;
}
"#;

fn main() -> ExitCode {
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            println!("reliability: skipped: {e}");
            return ExitCode::SUCCESS;
        }
    };
    let mut ok = true;
    for (name, check) in [
        (
            "record_stream",
            record_stream as fn(&CudaBackend) -> Result<String, String>,
        ),
        ("drop orders", drop_orders),
        ("frees in host callbacks", host_callback_frees),
        ("sticky device fault", sticky_fault),
    ] {
        match check(&backend) {
            Ok(figures) => println!("reliability: {name}: {figures} OK"),
            Err(e) => {
                ok = false;
                println!("reliability: {name}: {e} FAILED");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn kernels(b: &CudaBackend) -> Result<(CudaFunction, CudaFunction), String> {
    let ptx = accel_graph_cuda::cudarc::nvrtc::Ptx::from_src(KERNELS);
    // SAFETY: the context only loads the module.
    let module = unsafe { b.driver().context() }
        .load_module(ptx)
        .map_err(|e| format!("loading the test kernels: {e}"))?;
    let spin = module
        .load_function("spin_read")
        .map_err(|e| e.to_string())?;
    let poke = module.load_function("poke").map_err(|e| e.to_string())?;
    Ok((spin, poke))
}

fn e(err: GraphError) -> String {
    err.to_string()
}

/// Launches `spin_read(x, out, ns)` on `stream` (one thread).
fn launch_spin(
    spin: &CudaFunction,
    stream: &accel_graph_cuda::CudaStreamHandle,
    x: u64,
    out: u64,
    ns: u64,
) -> Result<(), String> {
    // SAFETY: the kernel reads one float of `x` and writes one of `out`, both alive until the
    // checks below have synchronized with the stream.
    let cuda_stream = unsafe { stream.raw().cuda_stream() };
    let mut launch = cuda_stream.launch_builder(spin);
    launch.arg(&x).arg(&out).arg(&ns);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match `spin_read(u64, u64, u64)`.
    unsafe { launch.launch(cfg) }
        .map(drop)
        .map_err(|e| format!("launching spin_read: {e}"))
}

fn record_stream(b: &CudaBackend) -> Result<String, String> {
    let (spin, _) = kernels(b)?;
    let main = b.new_stream().map_err(e)?;
    let side = b.new_stream().map_err(e)?;
    let pool = b.graph_pool_handle();
    let mut figures = Vec::new();
    for use_record_stream in [true, false] {
        // A pool buffer (allocated in a capture into `pool`), filled with 42.
        let mut maker = b.graph(GraphOptions::new().pool(pool)).map_err(e)?;
        let x = b
            .capture_on(&main, &mut maker, || {
                let x = b.alloc(1024)?;
                b.fill(&x, 42.0)?;
                Ok(x)
            })
            .map_err(e)?;
        {
            let _s = b.use_stream(&main).map_err(e)?;
            maker.replay().map_err(e)?;
        }
        b.stream_synchronize(&main).map_err(e)?;
        let out = b.alloc_from(&[0.0f32]).map_err(e)?;
        // 300 ms on the side stream before it reads x.
        launch_spin(
            &spin,
            &side,
            x.block().device_ptr(),
            out.block().device_ptr(),
            300_000_000,
        )?;
        let x_address = x.device_address();
        if use_record_stream {
            b.record_stream(&x, &side).map_err(e)?;
        }
        drop(x);
        let t = Instant::now();
        // Another capture into the pool asks for a block of the same size.
        let mut taker = b.graph(GraphOptions::new().pool(pool)).map_err(e)?;
        let y = b
            .capture_on(&main, &mut taker, || {
                let y = b.alloc(1024)?;
                b.fill(&y, -1.0)?;
                Ok(y)
            })
            .map_err(e)?;
        let reused_while_running =
            y.device_address() == x_address && t.elapsed() < Duration::from_millis(250);
        if use_record_stream {
            if reused_while_running {
                return Err("the block was handed out again while the kernel still read it".into());
            }
        } else if !reused_while_running {
            return Err(
                "without record_stream the block was expected to be reused at once (the check \
                 would prove nothing)"
                    .into(),
            );
        }
        b.stream_synchronize(&side).map_err(e)?;
        let read = b.download(&out).map_err(e)?[0];
        if use_record_stream && read != 42.0 {
            return Err(format!("the kernel read {read}, expected 42"));
        }
        figures.push(format!(
            "{}: reused while the kernel ran {reused_while_running}, kernel read {read}",
            if use_record_stream {
                "with record_stream"
            } else {
                "without"
            }
        ));
        drop((y, taker, maker, out));
        b.synchronize().map_err(e)?;
    }
    Ok(figures.join("; "))
}

fn drop_orders(b: &CudaBackend) -> Result<String, String> {
    b.synchronize().map_err(e)?;
    let (free_before, _) = b.mem_get_info().map_err(e)?;
    let other = CudaBackend::new(0).map_err(e)?;
    let stream = other.new_stream().map_err(e)?;
    let mut graphs = Vec::new();
    let mut buffers = Vec::new();
    for k in 0..8 {
        let x = other.alloc_from(&vec![1.0; 1 << 20]).map_err(e)?;
        let mut g = other.graph(GraphOptions::new()).map_err(e)?;
        other
            .capture_on(&stream, &mut g, || {
                let t = other.alloc(1 << 20)?;
                other.copy(&t, &x)?;
                other.axpy(&x, k as f32, &t)
            })
            .map_err(e)?;
        graphs.push(g);
        if k % 2 == 0 {
            buffers.push(x); // kept by the user until the end
        } // else dropped now: the graph keeps it
    }
    drop(stream);
    drop(other); // every handle of the instance goes before its graphs and buffers
    let handles: Vec<_> = graphs
        .into_iter()
        .map(|mut g| {
            std::thread::spawn(move || {
                let r = g.replay();
                drop(g);
                r
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| "a thread panicked".to_owned())?
            .map_err(e)?;
    }
    drop(buffers);
    b.synchronize().map_err(e)?;
    let (free_after, _) = b.mem_get_info().map_err(e)?;
    if free_after != free_before {
        return Err(format!(
            "cuMemGetInfo free memory before {free_before}, after {free_after}"
        ));
    }
    Ok(format!(
        "cuMemGetInfo free memory {free_before} bytes before and after (8 graphs with pool \
         memory and 16 MiB buffers dropped after their instance, replayed and dropped on 8 \
         threads)"
    ))
}

fn host_callback_frees(b: &CudaBackend) -> Result<String, String> {
    use std::sync::{Arc, Mutex};
    const BYTES: usize = 256 << 20;
    b.synchronize().map_err(e)?;
    b.empty_cache().map_err(e)?;
    let (free_before, _) = b.mem_get_info().map_err(e)?;
    let slot = Arc::new(Mutex::new(None));
    let dropper = {
        let slot = Arc::clone(&slot);
        Arc::new(move || drop(slot.lock().unwrap_or_else(|p| p.into_inner()).take()))
    };
    let stream = b.new_stream().map_err(e)?;
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(b.alloc::<f32>(BYTES / 4).map_err(e)?);
    {
        let _current = b.use_stream(&stream).map_err(e)?;
        b.host_callback(dropper.clone()).map_err(e)?;
    }
    let mut g = b.graph(GraphOptions::new()).map_err(e)?;
    b.capture_on(&stream, &mut g, || b.host_callback(dropper))
        .map_err(e)?;
    for _ in 0..4 {
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(b.alloc(BYTES / 4).map_err(e)?);
        let _current = b.use_stream(&stream).map_err(e)?;
        g.replay().map_err(e)?;
    }
    b.synchronize().map_err(e)?;
    drop(g);
    drop(stream);
    b.empty_cache().map_err(e)?;
    let (free_after, _) = b.mem_get_info().map_err(e)?;
    if free_after < free_before {
        return Err(format!(
            "cuMemGetInfo free memory before {free_before}, after {free_after}: {} MiB lost",
            (free_before - free_after) >> 20
        ));
    }
    Ok(format!(
        "5 buffers of 256 MiB dropped in host callbacks (1 eager, 4 replayed): cuMemGetInfo free \
         memory {free_before} bytes before, {free_after} after"
    ))
}

fn sticky_fault(b: &CudaBackend) -> Result<String, String> {
    let (_, poke) = kernels(b)?;
    let x = b.alloc_from(&[0.0; 16]).map_err(e)?;
    let stream = b.new_stream().map_err(e)?;
    let mut g = b.graph(GraphOptions::new()).map_err(e)?;
    b.capture_on(&stream, &mut g, || b.add_scalar(&x, 1.0))
        .map_err(e)?;
    // SAFETY: deliberately unsound: the kernel stores to address 8, to make the device fault.
    let cuda_stream = unsafe { stream.raw().cuda_stream() };
    let mut launch = cuda_stream.launch_builder(&poke);
    let bad: u64 = 8;
    launch.arg(&bad);
    // SAFETY: as above; the argument matches `poke(u64)`.
    unsafe { launch.launch(LaunchConfig::for_num_elems(1)) }.map_err(|e| e.to_string())?;
    let t = Instant::now();
    let sync = b.synchronize();
    let mut named = Vec::new();
    let results: Vec<(&str, Result<(), GraphError>)> = vec![
        ("synchronize", sync),
        ("alloc", b.alloc::<f32>(16).map(drop)),
        ("add_scalar", b.add_scalar(&x, 1.0)),
        ("replay", {
            let _s = b.use_stream(&stream).map_err(e)?;
            g.replay()
        }),
        ("download", b.download(&x).map(drop)),
        ("stream_synchronize", b.stream_synchronize(&stream)),
    ];
    for (call, result) in results {
        match result {
            Err(GraphError::DeviceFault { name, .. }) if name == "CUDA_ERROR_ILLEGAL_ADDRESS" => {
                named.push(call)
            }
            other => {
                return Err(format!(
                    "{call} after the fault: expected DeviceFault, got {other:?}"
                ));
            }
        }
    }
    drop((g, x, stream));
    Ok(format!(
        "every later call returned DeviceFault(CUDA_ERROR_ILLEGAL_ADDRESS): {} ({:.1?} for all); \
         dropping the graph and buffers afterwards: no panic",
        named.join(", "),
        t.elapsed()
    ))
}
