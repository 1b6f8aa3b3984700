//! `HipBackend`: the backend over a HIP device (the same file with or without the `runtime`
//! feature: without it, `HipDevice::open` says why there is no device), and its interop with
//! an application's own HIP objects (see `docs/INTEROP.md`).

use accel_graph_api::{Backend, DeviceBuffer, Element, GraphError, Result, View};
use accel_graph_driver::{BufferMemory, DriverBackend};

use crate::{HipBuffer, HipDevice, HipStream};

/// How [`HipDevice::open`] treats the process's HIP state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// The backend's own ([`HipBackend::new`]): the device is left current on the calling
    /// thread, and the capture-allocation probe runs (once per process).
    Own,
    /// Inside an application that uses HIP itself ([`HipBackend::from_raw_device`]): the
    /// calling thread's current device is restored afterwards, and no probe runs (it begins a
    /// capture and allocates, which would invalidate a global-mode capture of the
    /// application's).
    Existing,
}

accel_graph_driver::backend_newtype! {
    /// The HIP backend: one device of the HIP runtime (`libamdhip64`). Clones share the
    /// device; separately created backends are independent instances.
    ///
    /// Capture is HIP's own stream capture (`hipStreamBeginCapture`) on the thread's current
    /// stream, so anything issued on that stream is captured: the portable ops, users'
    /// kernels, GEMM, and the user's own kernels and library calls on the stream's raw handle
    /// (see the crate documentation for what the caller must keep alive then, and
    /// [`HipBackend::raw_ptr_for`] for how the backend keeps it alive for you).
    ///
    /// ```no_run
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_hip::HipBackend;
    ///
    /// let backend = HipBackend::new(0)?; // BackendUnavailable without a device
    /// let x = backend.alloc_from(&[0.0; 4])?;
    /// let stream = backend.new_stream()?;
    /// let mut graph = backend.graph(GraphOptions::new())?;
    /// backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
    /// graph.replay()?;
    /// assert_eq!(backend.download(&x)?, vec![1.0; 4]);
    /// # Ok::<(), GraphError>(())
    /// ```
    pub struct HipBackend(HipDevice);
}

impl HipBackend {
    /// Opens HIP device `ordinal`. Without a usable runtime or device (no AMD GPU, driver not
    /// loaded, an ordinal past the device count), or in a build without the `runtime` feature,
    /// the error is [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) saying why
    /// (HIP's error name and text where the runtime refused).
    pub fn new(ordinal: usize) -> Result<Self> {
        Ok(HipBackend(DriverBackend::new(HipDevice::open(
            ordinal,
            Opening::Own,
        )?)))
    }

    /// A backend over device `ordinal` of an application that uses HIP itself: the
    /// application has initialized the runtime and may run its own work — and its own stream
    /// captures — on the device.
    ///
    /// Unlike [`HipBackend::new`], opening leaves the calling thread's current device as it
    /// was, and does not run the probe behind
    /// [`HipDevice::runtime_refuses_capture_alloc`] (it begins a capture and allocates, which
    /// would invalidate a global-mode capture the application is running on another thread;
    /// the answer is the process's if a probe ran before, else `None`). Afterwards, as every
    /// HIP backend, each call makes the device current on the calling thread (HIP's current
    /// device is per thread), selecting its primary context, which holds the backend's memory
    /// and modules: code that switches devices on a thread it shares with the backend selects
    /// its own again after backend calls.
    ///
    /// Errors as [`HipBackend::new`]: [`GraphError::BackendUnavailable`] without a runtime, a
    /// device `ordinal`, or the `runtime` feature.
    ///
    /// # Safety
    ///
    /// The backend keeps its own unsafe calls — frees (`hipFree` waits for the device),
    /// device-wide synchronizations, event queries — out of every capture it knows of: the
    /// ones begun through it. It cannot see the application's. So, for as long as the backend
    /// or anything made from it (buffers, graphs, streams) exists, every stream capture the
    /// application begins itself on any HIP device of the process must either run in
    /// `hipStreamCaptureModeRelaxed`, or never overlap a call of this backend made from
    /// another thread. Otherwise a backend free or synchronization meets that capture in the
    /// runtime: the capture is invalidated, and NVIDIA's driver (under the HIP-on-CUDA shim)
    /// was seen to crash in that race.
    pub unsafe fn from_raw_device(ordinal: usize) -> Result<Self> {
        Ok(HipBackend(DriverBackend::new(HipDevice::open(
            ordinal,
            Opening::Existing,
        )?)))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.driver().ordinal()
    }

    /// `hipRuntimeGetVersion` of the loaded runtime (e.g. 50221153 for ROCm 5.2).
    pub fn runtime_version(&self) -> i32 {
        self.driver().runtime_version()
    }

    /// The device pointer of `view`'s first element, for the caller's own work on `stream`
    /// through its raw handle (your kernels, a library call), with that use recorded so the
    /// memory stays valid for it:
    ///
    /// * if `stream` takes part in a capture of this backend (begun on it, or forked into it
    ///   by an event wait — through the backend or through raw calls), the capture's graph
    ///   keeps the buffer's memory until it is reset or dropped, as for the backend's own ops
    ///   ([`BufferMemory::track_raw_use`]);
    /// * the buffer is [`record_stream`](Backend::record_stream)ed onto `stream`: dropped, its
    ///   memory is handed out again only after the work queued on `stream` so far is done.
    ///
    /// Call it for each launch that uses the memory, on the stream the launch goes to, before
    /// or after issuing it but while the capture is still running; the pointer is valid
    /// for `view.len()` elements. Errors: [`GraphError::ForeignObject`] for a buffer or stream
    /// of another backend instance, [`GraphError::Unsupported`] for a stream capturing into a
    /// capture this backend did not begin (nothing would keep the memory alive for that
    /// graph).
    ///
    /// ```no_run
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_hip::HipBackend;
    ///
    /// let backend = HipBackend::new(0)?;
    /// let x = backend.alloc_from(&[1.0f32; 1024])?;
    /// let stream = backend.new_stream()?;
    /// let mut graph = backend.graph(GraphOptions::new())?;
    /// backend.capture_on(&stream, &mut graph, || {
    ///     let ptr: *mut f32 = backend.raw_ptr_for(x.view(256..512)?, &stream)?;
    ///     // ... launch your own kernel on `stream.raw().raw()` over `ptr` (256 elements) ...
    ///     # let _ = ptr;
    ///     Ok(())
    /// })?;
    /// drop(x); // the graph keeps the memory its raw work uses
    /// graph.replay()?;
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn raw_ptr_for<'a, T: Element>(
        &self,
        view: impl Into<View<'a, HipBuffer<T>>>,
        stream: &HipStream,
    ) -> Result<*mut T> {
        let view = view.into();
        let buffer = view.buffer();
        if buffer.instance_id() != self.instance_id() {
            return Err(GraphError::ForeignObject { what: "buffer" });
        }
        if stream.instance_id() != self.instance_id() {
            return Err(GraphError::ForeignObject { what: "stream" });
        }
        AsRef::<BufferMemory<HipDevice>>::as_ref(buffer).track_raw_use(stream.raw())?;
        self.record_stream(buffer, stream)?;
        Ok(buffer
            .block()
            .device_ptr()
            .wrapping_byte_add(view.byte_offset())
            .cast())
    }
}

#[cfg(feature = "runtime")]
impl HipBackend {
    /// The raw `hipStream_t` of this thread's current stream (null: the default stream), for
    /// native work that should be captured with the backend's ops. Using it is `unsafe` FFI;
    /// its contract is [`crate::HStream::raw`]'s.
    pub fn current_raw_stream(&self) -> hip_sys::hiprt::hipStream_t {
        accel_graph_api::Backend::current_stream(self).raw().raw()
    }

    /// A stream of this backend over the application's stream `raw`: the backend's ops,
    /// kernels and captures run on it like on its own streams (make it current with
    /// `use_stream`, capture with `capture_on`); the backend never destroys it.
    ///
    /// Errors: [`GraphError::ArgumentMismatch`] for the null stream (the backend's
    /// [`default_stream`](Backend::default_stream) is that stream), and
    /// [`GraphError::Unsupported`] for a stream that is capturing now (a capture begun
    /// outside the backend, whose memory it could not keep alive).
    ///
    /// Prefer a stream created with `hipStreamNonBlocking`, as the backend's own streams are:
    /// work on the null stream waits for a blocking stream, and during a capture on a
    /// blocking stream, such work invalidates the capture.
    ///
    /// # Safety
    ///
    /// * `raw` is a live stream of this backend's device.
    /// * It stays valid — the caller does not destroy it — for as long as this backend
    ///   instance exists (every clone of it, and its buffers, graphs and streams): the
    ///   backend may still order work after it once your handles of it are gone (a buffer
    ///   recorded on it waits for it before its memory is reused).
    /// * Each raw stream is adopted at most once per backend instance, and the returned stream
    ///   (and its clones) stands for it in every backend call: the backend tracks the
    ///   captures a stream takes part in on its stream object, so a second object over the
    ///   same handle would not know the first one's capture, and the memory of ops issued
    ///   through it would not be kept alive. For the same reason, `raw` is not a stream the
    ///   backend made (`new_stream`).
    /// * Captures on it are begun and ended through the backend (`capture_begin`/`capture_end`
    ///   or `capture_on`, with this stream current), and it joins another capture only by a
    ///   backend `wait_event` — not by raw `hipStreamBeginCapture`, `hipStreamEndCapture` or
    ///   `hipStreamWaitEvent` on an event recorded in a capture. Raw work on it during a
    ///   backend capture is captured as usual; get its memory's pointers with
    ///   [`HipBackend::raw_ptr_for`].
    pub unsafe fn stream_from_raw(&self, raw: hip_sys::hiprt::hipStream_t) -> Result<HipStream> {
        let stream = crate::HStream::borrowed(raw).ok_or_else(|| {
            GraphError::ArgumentMismatch(
                "stream_from_raw: the null stream is the backend's default stream \
                 (default_stream())"
                    .to_owned(),
            )
        })?;
        self.wrap_stream(stream)
    }
}
