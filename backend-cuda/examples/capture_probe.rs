//! What the CUDA driver itself does with unsafe calls during stream capture, measured with raw
//! driver calls (no accel-graph in between): the reference the mock backend's capture-mode
//! rules are checked against. Prints one line per scenario: the call's result, whether the
//! capture is still active afterwards, and what ending it returns.
//!
//! Run: `cargo run -p accel-graph-cuda --example capture_probe` (needs an NVIDIA GPU).

use std::{ptr, sync::Arc, thread};

use accel_graph_cuda::cudarc::driver::{CudaContext, DriverError, sys};

type R = sys::CUresult;

fn name(rc: R) -> String {
    if rc == R::CUDA_SUCCESS {
        return "CUDA_SUCCESS".to_owned();
    }
    DriverError(rc)
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{rc:?}"))
}

fn status(stream: sys::CUstream) -> &'static str {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: live stream, local out-parameter.
    let rc = unsafe { sys::cuStreamIsCapturing(stream, &mut st) };
    if rc != R::CUDA_SUCCESS {
        return "query-failed";
    }
    match st {
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => "active",
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => "invalidated",
        _ => "none",
    }
}

fn end(stream: sys::CUstream) -> R {
    let mut g = ptr::null_mut();
    // SAFETY: ends the capture on a live stream; the graph (if any) is destroyed at once.
    unsafe {
        let rc = sys::cuStreamEndCapture(stream, &mut g);
        if !g.is_null() {
            sys::cuGraphDestroy(g);
        }
        rc
    }
}

fn begin(stream: sys::CUstream, mode: sys::CUstreamCaptureMode) {
    // SAFETY: live stream.
    let rc = unsafe { sys::cuStreamBeginCapture_v2(stream, mode) };
    assert_eq!(rc, R::CUDA_SUCCESS, "begin capture");
}

/// A call that is unsafe during capture, made on the stream `other` (never the capturing one).
#[derive(Clone, Copy, Debug)]
enum Unsafe {
    MemAlloc,
    CtxSynchronize,
    OtherStreamSynchronize,
    PageableCopyOnOtherStream,
    LegacyStreamSynchronize,
}

fn do_unsafe(call: Unsafe, other: sys::CUstream, dev: sys::CUdeviceptr) -> R {
    let mut host = [0f32; 4];
    // SAFETY: plain driver calls on live handles; `host` outlives the synchronous copy.
    unsafe {
        match call {
            Unsafe::MemAlloc => {
                let mut p = 0;
                let rc = sys::cuMemAlloc_v2(&mut p, 1 << 20);
                if rc == R::CUDA_SUCCESS {
                    sys::cuMemFree_v2(p);
                }
                rc
            }
            Unsafe::CtxSynchronize => sys::cuCtxSynchronize(),
            Unsafe::OtherStreamSynchronize => sys::cuStreamSynchronize(other),
            Unsafe::PageableCopyOnOtherStream => {
                let rc = sys::cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), dev, 16, other);
                if rc != R::CUDA_SUCCESS {
                    return rc;
                }
                sys::cuStreamSynchronize(other)
            }
            Unsafe::LegacyStreamSynchronize => sys::cuStreamSynchronize(ptr::null_mut()),
        }
    }
}

fn main() -> Result<(), DriverError> {
    let ctx: Arc<CudaContext> = CudaContext::new(0)?;
    // SAFETY: the probe orders its own streams.
    unsafe { ctx.disable_event_tracking() };
    let s = ctx.new_stream()?;
    let t = ctx.new_stream()?;
    let (sc, tc) = (s.cu_stream() as usize, t.cu_stream() as usize);
    let mut dev = 0;
    // SAFETY: plain allocation.
    unsafe { sys::cuMemAlloc_v2(&mut dev, 1 << 20) }.result()?;
    use sys::CUstreamCaptureMode as M;
    let modes = [
        ("global", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
        ("thread_local", M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        ("relaxed", M::CU_STREAM_CAPTURE_MODE_RELAXED),
    ];
    let calls = [
        Unsafe::MemAlloc,
        Unsafe::CtxSynchronize,
        Unsafe::OtherStreamSynchronize,
        Unsafe::PageableCopyOnOtherStream,
        Unsafe::LegacyStreamSynchronize,
    ];
    println!("probe: scenario | mode | call | result | capture after | end_capture");
    for (mode_name, mode) in modes {
        for call in calls {
            for other_thread in [true, false] {
                let stream = sc as sys::CUstream;
                begin(stream, mode);
                // SAFETY: one memset node so the capture is non-empty.
                unsafe { sys::cuMemsetD32Async(dev, 0, 4, stream) };
                let rc = if other_thread {
                    let ctx2 = Arc::clone(&ctx);
                    thread::spawn(move || {
                        ctx2.bind_to_thread().expect("bind");
                        do_unsafe(call, tc as sys::CUstream, dev)
                    })
                    .join()
                    .expect("probe thread")
                } else {
                    do_unsafe(call, tc as sys::CUstream, dev)
                };
                let after = status(stream);
                let end_rc = end(stream);
                println!(
                    "probe: unsafe-call {} | {mode_name} | {call:?} | {} | {after} | {}",
                    if other_thread {
                        "other-thread"
                    } else {
                        "same-thread"
                    },
                    name(rc),
                    name(end_rc)
                );
            }
        }
    }
    for (mode_name, mode) in modes {
        let stream = sc as sys::CUstream;
        begin(stream, mode);
        // SAFETY: one memset node.
        unsafe { sys::cuMemsetD32Async(dev, 0, 4, stream) };
        let ctx2 = Arc::clone(&ctx);
        let rc = thread::spawn(move || {
            ctx2.bind_to_thread().expect("bind");
            let mut g = ptr::null_mut();
            // SAFETY: ends the capture from the wrong thread; graph destroyed if returned.
            unsafe {
                let rc = sys::cuStreamEndCapture(sc as sys::CUstream, &mut g);
                let got_graph = !g.is_null();
                if got_graph {
                    sys::cuGraphDestroy(g);
                }
                (rc, got_graph)
            }
        })
        .join()
        .expect("probe thread");
        let (rc, got_graph) = rc;
        let after = status(stream);
        let end_again = if after == "none" {
            "not capturing: nothing to end".to_owned()
        } else {
            name(end(stream))
        };
        println!(
            "probe: end-from-other-thread | {mode_name} | cuStreamEndCapture | {} (graph \
             returned: {got_graph}) | {after} | {end_again}",
            name(rc)
        );
    }
    // Fork never joined back.
    let ev = ctx.new_event(None)?;
    let stream = sc as sys::CUstream;
    begin(stream, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
    // SAFETY: event fork onto the second stream, one memset there, never joined.
    unsafe {
        sys::cuMemsetD32Async(dev, 0, 4, stream);
        sys::cuEventRecord(ev.cu_event(), stream);
        sys::cuStreamWaitEvent(tc as sys::CUstream, ev.cu_event(), 0);
        sys::cuMemsetD32Async(dev + 64, 0, 4, tc as sys::CUstream);
    }
    let rc = end(stream);
    println!(
        "probe: unjoined-fork | global | cuStreamEndCapture | {} | origin {} side {} | -",
        name(rc),
        status(stream),
        status(tc as sys::CUstream)
    );
    // SAFETY: the allocation above, freed once.
    unsafe { sys::cuMemFree_v2(dev) };
    println!("probe: done");
    Ok(())
}
