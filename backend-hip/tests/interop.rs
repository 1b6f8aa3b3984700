//! Bringing your own HIP device and stream (`HipBackend::from_raw_device`,
//! `HipBackend::stream_from_raw`) and raw pointers for your own work
//! (`HipBackend::raw_ptr_for`).
//!
//! Without a device the constructors report why (in both builds); with one (or the HIP-on-CUDA
//! shim) the test checks what the documentation promises: the caller's current device is left
//! as it was, an adopted stream captures like the backend's own, memory that only raw work on
//! it uses is kept alive by the graph, and misuse is a typed error.

use accel_graph_api::GraphError;
use accel_graph_hip::HipBackend;

#[test]
fn from_raw_device_without_such_a_device_is_unavailable() {
    for ordinal in [usize::MAX, i32::MAX as usize + 1] {
        // SAFETY: no backend is made (there is no such device), so nothing can meet a capture.
        let err = unsafe { HipBackend::from_raw_device(ordinal) }.expect_err("no such device");
        assert!(
            matches!(err, GraphError::BackendUnavailable { backend: "hip", .. }),
            "{ordinal}: {err}"
        );
    }
}

#[cfg(not(feature = "runtime"))]
#[test]
fn without_the_runtime_feature_from_raw_device_names_the_feature() {
    // SAFETY: as above: this build opens no device.
    match unsafe { HipBackend::from_raw_device(0) } {
        Err(GraphError::BackendUnavailable { reason, .. }) => {
            assert!(reason.contains("`runtime` feature"), "{reason}");
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
}

#[cfg(feature = "runtime")]
mod on_a_device {
    use std::ffi::c_void;

    use accel_graph_api::{
        AcceleratorGraph, Backend, DeviceBuffer, GraphError, GraphOptions, PortableOps, Result,
    };
    use accel_graph_hip::{HipBackend, hip_sys::hiprt as ffi};

    /// A non-blocking stream of the caller's own, destroyed on drop.
    struct RawStream(ffi::hipStream_t);

    impl RawStream {
        fn new() -> Self {
            let mut raw = std::ptr::null_mut();
            // SAFETY: a local out-parameter.
            let err = unsafe { ffi::hipStreamCreateWithFlags(&mut raw, ffi::hipStreamNonBlocking) };
            assert_eq!(err, ffi::hipError_t::hipSuccess);
            RawStream(raw)
        }
    }

    impl Drop for RawStream {
        fn drop(&mut self) {
            // SAFETY: created above, destroyed once, after every backend that adopted it.
            unsafe { ffi::hipStreamDestroy(self.0) };
        }
    }

    /// `f`'s result, run while `raw` captures in relaxed mode (begun and ended through the raw
    /// API, behind the backend's back, to check that the backend refuses such a stream).
    fn during_raw_capture<T>(raw: ffi::hipStream_t, f: impl FnOnce() -> T) -> T {
        let relaxed = ffi::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        // SAFETY: a live stream; relaxed, so no other thread's calls are affected.
        let err = unsafe { ffi::hipStreamBeginCapture(raw, relaxed) };
        assert_eq!(err, ffi::hipError_t::hipSuccess);
        let out = f();
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; its graph is destroyed at once.
        let err = unsafe { ffi::hipStreamEndCapture(raw, &mut graph) };
        assert_eq!(err, ffi::hipError_t::hipSuccess);
        // SAFETY: the graph the capture made, destroyed once.
        unsafe { ffi::hipGraphDestroy(graph) };
        out
    }

    fn current_device() -> i32 {
        let mut device = -1;
        // SAFETY: a local out-parameter.
        let err = unsafe { ffi::hipGetDevice(&mut device) };
        assert_eq!(err, ffi::hipError_t::hipSuccess);
        device
    }

    /// A device-to-device copy of `bytes` bytes issued on `stream` through the raw API.
    ///
    /// # Safety
    /// Both pointers are device memory of at least `bytes` bytes while the copy (or a graph
    /// captured from it) can run.
    unsafe fn raw_copy(dst: *mut f32, src: *mut f32, bytes: usize, stream: ffi::hipStream_t) {
        // SAFETY: the caller's contract.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                dst.cast::<c_void>(),
                src.cast::<c_void>().cast_const(),
                bytes,
                ffi::hipMemcpyKind::hipMemcpyDeviceToDevice,
                stream,
            )
        };
        assert_eq!(err, ffi::hipError_t::hipSuccess);
    }

    #[test]
    fn adopted_streams_and_raw_pointers_capture_and_keep_memory_alive() -> Result<()> {
        let mut devices = 0;
        // SAFETY: a local out-parameter.
        let err = unsafe { ffi::hipGetDeviceCount(&mut devices) };
        if err != ffi::hipError_t::hipSuccess || devices == 0 {
            // No device: `from_raw_device_without_such_a_device_is_unavailable` checks the
            // backend's answer.
            return Ok(());
        }
        // The streams outlive the backends (dropped after them: declared first).
        let (raw, capturing_raw) = (RawStream::new(), RawStream::new());
        let before = current_device();
        // SAFETY: this test begins no capture of its own outside the backend while backend
        // calls run on another thread (it is single-threaded; the raw captures below are
        // relaxed).
        let backend = unsafe { HipBackend::from_raw_device(0) }?;
        assert_eq!(
            current_device(),
            before,
            "opening changed the thread's device"
        );

        // The null stream is the default stream; a capturing stream is refused.
        // SAFETY: refused before use.
        let null = unsafe { backend.stream_from_raw(std::ptr::null_mut()) };
        assert!(
            matches!(null, Err(GraphError::ArgumentMismatch(_))),
            "{null:?}"
        );
        let refused = during_raw_capture(capturing_raw.0, || {
            // SAFETY: refused before use (the stream is capturing); it outlives the backend.
            unsafe { backend.stream_from_raw(capturing_raw.0) }
        });
        assert!(
            matches!(refused, Err(GraphError::Unsupported { .. })),
            "{refused:?}"
        );

        // SAFETY: a live non-blocking stream of device 0, adopted once, outliving the backend,
        // its captures begun through the backend only.
        let stream = unsafe { backend.stream_from_raw(raw.0) }?;
        let n = 1000usize;
        let bytes = n * size_of::<f32>();
        let values: Vec<f32> = (0..n).map(|i| i as f32 - 300.0).collect();

        // Eager: a raw copy on the adopted stream, then a backend op on it.
        let (x, y) = (backend.alloc_from(&values)?, backend.alloc::<f32>(n)?);
        let (xp, yp) = (
            backend.raw_ptr_for(&x, &stream)?,
            backend.raw_ptr_for(&y, &stream)?,
        );
        // SAFETY: both buffers hold `n` f32s and live until after the synchronization.
        unsafe { raw_copy(yp, xp, bytes, raw.0) };
        {
            let _on = backend.use_stream(&stream)?;
            backend.scale(&y, 2.0)?;
        }
        backend.stream_synchronize(&stream)?;
        let doubled: Vec<f32> = values.iter().map(|v| v * 2.0).collect();
        assert_eq!(backend.download(&y)?, doubled);

        // Captured: the source is used only by the raw copy, and both buffers are dropped
        // before the replays.
        let out = backend.alloc_from(&vec![-1.0f32; n])?;
        let mut graph = backend.graph(GraphOptions::new())?;
        {
            let x = backend.alloc_from(&values)?;
            let y = backend.alloc::<f32>(n)?;
            backend.capture_on(&stream, &mut graph, || {
                // Half of the source through a view: pointers of views start at their
                // first element.
                let (lo, hi) = (x.view(..n / 2)?, x.view(n / 2..)?);
                let (ylo, yhi) = (y.view(..n / 2)?, y.view(n / 2..)?);
                // SAFETY: each view holds n / 2 f32s; the graph keeps the memory (raw_ptr_for).
                unsafe {
                    raw_copy(
                        backend.raw_ptr_for(ylo, &stream)?,
                        backend.raw_ptr_for(lo, &stream)?,
                        bytes / 2,
                        raw.0,
                    );
                    raw_copy(
                        backend.raw_ptr_for(yhi, &stream)?,
                        backend.raw_ptr_for(hi, &stream)?,
                        bytes / 2,
                        raw.0,
                    );
                }
                backend.scale(&y, 2.0)?;
                backend.copy(&out, &y)
            })?;
        }
        backend.synchronize()?;
        assert_eq!(backend.download(&out)?, vec![-1.0; n], "the capture ran");
        for _ in 0..3 {
            backend.fill(&out, 0.0)?;
            graph.replay()?;
            backend.synchronize()?;
            assert_eq!(backend.download(&out)?, doubled);
        }

        // Another instance's buffer or stream is refused; so is a stream capturing into a
        // capture this backend did not begin.
        let other = HipBackend::new(0)?;
        let theirs = other.alloc::<f32>(4)?;
        let their_stream = other.new_stream()?;
        let foreign = [
            ("buffer", backend.raw_ptr_for(&theirs, &stream)),
            ("stream", backend.raw_ptr_for(&out, &their_stream)),
        ];
        for (object, result) in foreign {
            assert!(
                matches!(result, Err(GraphError::ForeignObject { what }) if what == object),
                "a foreign {object}: {result:?}"
            );
        }
        let own = backend.new_stream()?;
        let refused = during_raw_capture(own.raw().raw(), || backend.raw_ptr_for(&out, &own));
        assert!(
            matches!(refused, Err(GraphError::Unsupported { .. })),
            "{refused:?}"
        );
        drop((graph, stream, own, other, their_stream, theirs));
        drop(backend);
        Ok(())
    }
}
