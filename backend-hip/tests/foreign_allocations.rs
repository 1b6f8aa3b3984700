//! Work of the user's own that allocates inside a capture: `hipMallocAsync` and `hipFreeAsync`
//! on the capturing stream become the graph's allocation and free nodes. A forward of 128 raw
//! copies, each into memory it allocates, each freeing its input, its result outliving the
//! capture: replays equal the eager forward, the result keeps its address and holds each
//! replay's answer (the graph is instantiated to free on relaunch what the last launch left),
//! device memory stays flat, and the result freed between replays leaves the graph replaying.
//!
//! Without a device the test prints why and checks nothing more (the backend's own answer
//! without a device is `interop.rs`'s and `unavailable.rs`'s).

#[cfg(feature = "runtime")]
mod on_a_device {
    use std::ffi::c_void;

    use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions, Result};
    use accel_graph_hip::{HipBackend, hip_sys::hiprt as ffi};

    // The stream-ordered allocator (HIP 5.1 on), which hip-sys does not bind: declared as a
    // user of the runtime would.
    #[link(name = "amdhip64")]
    unsafe extern "C" {
        fn hipMallocAsync(
            ptr: *mut *mut c_void,
            size: usize,
            stream: ffi::hipStream_t,
        ) -> ffi::hipError_t;
        fn hipFreeAsync(ptr: *mut c_void, stream: ffi::hipStream_t) -> ffi::hipError_t;
    }

    const LEN: usize = 4096;
    const BYTES: usize = LEN * 4;
    const OPS: usize = 128;

    fn ok(err: ffi::hipError_t, what: &str) {
        assert_eq!(err, ffi::hipError_t::hipSuccess, "{what}");
    }

    /// The user's forward: a copy of `x` into memory it allocates, then `OPS` steps, each
    /// allocating its output, copying its input there, setting element `i % LEN` to `i`, and
    /// freeing its input. Returns the result, which outlives the call.
    ///
    /// # Safety
    /// `x` is device memory of `LEN` floats while the forward (or a graph captured from it)
    /// can run.
    unsafe fn forward(x: *mut f32, stream: ffi::hipStream_t) -> *mut c_void {
        let alloc = || {
            let mut p = std::ptr::null_mut();
            // SAFETY: a local out-parameter; the stream is live.
            ok(
                unsafe { hipMallocAsync(&mut p, BYTES, stream) },
                "hipMallocAsync",
            );
            p
        };
        let copy = |dst: *mut c_void, src: *const c_void| {
            // SAFETY: both hold `BYTES` bytes of device memory in stream order.
            let err = unsafe {
                ffi::hipMemcpyAsync(
                    dst,
                    src,
                    BYTES,
                    ffi::hipMemcpyKind::hipMemcpyDeviceToDevice,
                    stream,
                )
            };
            ok(err, "hipMemcpyAsync");
        };
        let mut current = alloc();
        copy(current, x.cast::<c_void>().cast_const());
        for i in 0..OPS {
            let next = alloc();
            copy(next, current.cast_const());
            let element = next.cast::<f32>().wrapping_add(i % LEN).cast::<c_void>();
            // SAFETY: one float of `next`, in stream order.
            let err =
                unsafe { ffi::hipMemsetD32Async(element, (i as f32).to_bits() as i32, 1, stream) };
            ok(err, "hipMemsetD32Async");
            // SAFETY: allocated above in stream order; nothing uses it after this point.
            ok(unsafe { hipFreeAsync(current, stream) }, "hipFreeAsync");
            current = next;
        }
        current
    }

    fn read(p: *mut c_void, stream: ffi::hipStream_t) -> Vec<u32> {
        let mut host = vec![0u32; LEN];
        // SAFETY: `p` holds `BYTES` bytes; the host vector too; synchronized below.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                host.as_mut_ptr().cast(),
                p.cast_const(),
                BYTES,
                ffi::hipMemcpyKind::hipMemcpyDeviceToHost,
                stream,
            )
        };
        ok(err, "hipMemcpyAsync (download)");
        // SAFETY: a live stream.
        ok(
            unsafe { ffi::hipStreamSynchronize(stream) },
            "hipStreamSynchronize",
        );
        host
    }

    fn free_memory() -> usize {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: local out-parameters.
        ok(
            unsafe { ffi::hipMemGetInfo(&mut free, &mut total) },
            "hipMemGetInfo",
        );
        free
    }

    #[test]
    fn allocations_inside_a_capture_become_graph_memory() -> Result<()> {
        let backend = match HipBackend::new(0) {
            Ok(backend) => backend,
            Err(e) => {
                eprintln!("skipped: no HIP device to capture on ({e})");
                return Ok(());
            }
        };
        let stream = backend.new_stream()?;
        let _current = backend.use_stream(&stream)?;
        let raw = backend.current_raw_stream();
        let host: Vec<f32> = (0..LEN).map(|i| (i % 97) as f32 * 0.25).collect();
        let x = backend.alloc_from(&host)?;
        let x_ptr = backend.raw_ptr_for(&x, &stream)?;

        // SAFETY: `x` lives to the end of the test, after every replay.
        let eager_result = unsafe { forward(x_ptr, raw) };
        let eager = read(eager_result, raw);
        // SAFETY: allocated by the eager forward; nothing uses it any more.
        ok(unsafe { hipFreeAsync(eager_result, raw) }, "hipFreeAsync");

        let mut graph = backend.graph(GraphOptions::new())?;
        graph.capture_begin()?;
        // SAFETY: as above.
        let result = unsafe { forward(x_ptr, raw) };
        graph.capture_end()?;

        let replays = 1000;
        let mut free_after_first = 0;
        for r in 0..replays {
            graph.replay()?;
            if r == 0 || r + 1 == replays {
                assert_eq!(
                    read(result, raw),
                    eager,
                    "replay {} differs from eager",
                    r + 1
                );
            }
            if r == 0 {
                free_after_first = free_memory();
            }
        }
        assert_eq!(
            free_memory(),
            free_after_first,
            "memory grew over {replays} replays"
        );

        // The result freed between replays: in stream order, after the replays before it; the
        // next replay allocates it again.
        // SAFETY: the graph's allocation, used by nothing queued after this point but the
        // replays below, which allocate it anew.
        ok(
            unsafe { hipFreeAsync(result, raw) },
            "hipFreeAsync (the result)",
        );
        graph.replay()?;
        graph.replay()?;
        backend.synchronize()?;
        drop(graph);
        backend.synchronize()?;
        Ok(())
    }
}
