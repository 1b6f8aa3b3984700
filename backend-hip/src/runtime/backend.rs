//! `HipBackend`: the `Backend` implementation over the HIP runtime.

use std::{ffi::c_void, sync::Arc};

use accel_graph_api::{
    Backend, BackendKind, Capabilities, GraphError, GraphOptions, HostCallback, MemoryStats,
    Result, pools::OwnedAllocation,
};

use super::{
    HipGraph,
    device::Device,
    ffi,
    graph::HipGraphImpl,
    host,
    kernels::Kernel,
    memory::{HipBuffer, RelaxedCaptureMode},
    stream::{HipEvent, HipStream},
};

/// Why host callbacks are missing on runtimes without `hipLaunchHostFunc`.
const NO_HOST_FUNC: &str = "host_callback: this HIP runtime exports no hipLaunchHostFunc (ROCm \
    5.2 lacks it; hipStreamAddCallback cannot be captured)";

/// The HIP backend: one device of the HIP runtime (`libamdhip64`). Clones share the device
/// context; separately created backends are independent instances.
#[derive(Clone)]
pub struct HipBackend {
    device: Arc<Device>,
}

impl std::fmt::Debug for HipBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipBackend")
            .field("device", &self.device.ordinal)
            .field("name", &self.device.name)
            .field("runtime_version", &self.device.runtime_version)
            .finish()
    }
}

impl HipBackend {
    /// Opens HIP device `device`. Without a usable runtime or device (no AMD GPU, driver not
    /// loaded) this is [`GraphError::BackendUnavailable`] naming HIP's error.
    pub fn new(device: i32) -> Result<Self> {
        Ok(HipBackend {
            device: Arc::new(Device::open(device)?),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> i32 {
        self.device.ordinal
    }

    /// `hipRuntimeGetVersion` of the loaded runtime.
    pub fn runtime_version(&self) -> i32 {
        self.device.runtime_version
    }

    /// The raw `hipStream_t` of this thread's current stream (null: the default stream), for
    /// native work that should be captured with the backend's ops.
    pub fn current_raw_stream(&self) -> ffi::hipStream_t {
        self.device.current.get().raw()
    }

    fn check_buffer(&self, b: &HipBuffer) -> Result<()> {
        b.check(self.device.instance)
    }

    fn same_len(op: &'static str, a: &HipBuffer, b: &HipBuffer) -> Result<()> {
        if a.len == b.len {
            Ok(())
        } else {
            Err(GraphError::LengthMismatch {
                op,
                expected: a.len,
                got: b.len,
            })
        }
    }

    /// Issues a kernel over `n` elements on the current stream.
    fn launch(&self, kernel: Kernel, n: usize, args: &mut [*mut c_void]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.device.bind()?;
        let stream = self.device.current_stream()?;
        self.ensure_capture_valid(&stream)?;
        let kernels = self.device.kernels()?;
        kernels
            .launch(kernel, n, stream.raw(), args)
            .map_err(|err| self.device.error(err, kernel.op(), 0))
    }

    /// Work issued into a capture the backend's rules invalidated fails as the driver's would.
    fn ensure_capture_valid(&self, stream: &HipStream) -> Result<()> {
        if let Some(capture) = self.device.capture_of(stream)? {
            self.device.captures.ensure_valid(&capture)?;
        }
        Ok(())
    }

    /// The blocking calls' common prologue: the capture-mode rules, and no capturing stream.
    fn blocking_call(&self, operation: &str, stream: &HipStream) -> Result<()> {
        self.device.captures.check_unsafe_call(operation)?;
        if let Some(capture) = self.device.capture_of(stream)? {
            // Waiting on a capturing stream can never finish: CUDA invalidates the capture.
            self.device
                .captures
                .invalidate(&capture, format!("{operation} on the capturing stream"));
            return Err(GraphError::UnsafeDuringCapture {
                operation: format!("{operation} on a capturing stream"),
                mode: capture.mode,
            });
        }
        Ok(())
    }
}

impl Backend for HipBackend {
    type Stream = HipStream;
    type Event = HipEvent;
    type Buffer = HipBuffer;
    type Graph = HipGraph;

    fn kind(&self) -> BackendKind {
        BackendKind::Hip
    }

    fn instance_id(&self) -> u64 {
        self.device.instance
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            device_name: self.device.name.clone(),
            native_graphs: true,
            host_callbacks: ffi::optional().launch_host_func.is_some(),
            multi_stream_capture: true,
            uncapturable_default_stream: true,
            capture_modes_enforced: self.device.runtime_refuses_capture_alloc,
            graph_upload: ffi::optional().graph_upload.is_some(),
            native_work_capture: true,
        }
    }

    fn default_stream(&self) -> HipStream {
        self.device.current.default_stream().clone()
    }

    fn new_stream(&self) -> Result<HipStream> {
        self.device.bind()?;
        HipStream::create(self.device.instance)
    }

    fn current_stream(&self) -> HipStream {
        self.device.current.get()
    }

    fn set_current_stream(&self, stream: &HipStream) -> HipStream {
        self.device.current.set(stream.clone())
    }

    fn synchronize(&self) -> Result<()> {
        // A device-wide wait would include the capturing streams: it conflicts with every
        // capture, whatever its mode or thread.
        self.device
            .captures
            .check_device_synchronize("synchronize")?;
        self.device.bind()?;
        self.device.wait_all()
    }

    fn stream_synchronize(&self, stream: &HipStream) -> Result<()> {
        stream.check(self.device.instance)?;
        self.blocking_call("stream_synchronize", stream)?;
        // SAFETY: valid stream of ours, not capturing.
        let err = unsafe { ffi::hipStreamSynchronize(stream.raw()) };
        self.device
            .check(err, "stream_synchronize (hipStreamSynchronize)")
    }

    fn is_capturing(&self, stream: &HipStream) -> Result<bool> {
        stream.check(self.device.instance)?;
        Ok(self.device.capture_id(stream)?.is_some())
    }

    fn new_event(&self) -> Result<HipEvent> {
        self.device.bind()?;
        HipEvent::create(self.device.instance)
    }

    fn record_event(&self, event: &HipEvent) -> Result<()> {
        event.check(self.device.instance)?;
        let stream = self.device.current_stream()?;
        // SAFETY: valid event and stream.
        let err = unsafe { ffi::hipEventRecord(event.raw(), stream.raw()) };
        self.device.check(err, "record_event (hipEventRecord)")
    }

    fn wait_event(&self, event: &HipEvent) -> Result<()> {
        event.check(self.device.instance)?;
        let stream = self.device.current_stream()?;
        // SAFETY: valid event and stream.
        let err = unsafe { ffi::hipStreamWaitEvent(stream.raw(), event.raw(), 0) };
        self.device.check(err, "wait_event (hipStreamWaitEvent)")
    }

    fn event_synchronize(&self, event: &HipEvent) -> Result<()> {
        event.check(self.device.instance)?;
        self.device
            .captures
            .check_unsafe_call("event_synchronize")?;
        // SAFETY: valid event.
        let err = unsafe { ffi::hipEventSynchronize(event.raw()) };
        self.device
            .check(err, "event_synchronize (hipEventSynchronize)")
    }

    fn alloc(&self, len: usize) -> Result<HipBuffer> {
        self.device.bind()?;
        let bytes = len
            .checked_mul(std::mem::size_of::<f32>())
            .ok_or(GraphError::OutOfMemory {
                backend: "hip",
                requested_bytes: usize::MAX,
            })?;
        let stream = self.device.current_stream()?;
        let allocation = match self.device.capture_of(&stream)? {
            // Inside a capture: the capture's pool, allocated in relaxed mode as PyTorch's
            // allocator does, so the capture stays valid.
            Some(capture) => {
                let _relaxed = RelaxedCaptureMode::enter()?;
                self.device.pools.alloc_in(capture.pool, bytes)?
            }
            // Elsewhere: a real hipMalloc, so the runtime applies its capture-mode rules.
            None => self.device.pools.alloc_plain(bytes)?,
        };
        Ok(HipBuffer {
            memory: OwnedAllocation::new(&self.device.pools, allocation),
            len,
            instance: self.device.instance,
        })
    }

    fn upload(&self, dst: &HipBuffer, src: &[f32]) -> Result<()> {
        self.check_buffer(dst)?;
        if dst.len != src.len() {
            return Err(GraphError::LengthMismatch {
                op: "upload",
                expected: dst.len,
                got: src.len(),
            });
        }
        let stream = self.device.current_stream()?;
        self.blocking_call("upload", &stream)?;
        if src.is_empty() {
            return Ok(());
        }
        self.device.bind()?;
        // SAFETY: `dst` holds `src.len()` f32; the copy is waited for before `src` is released.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                dst.device_ptr(),
                src.as_ptr().cast(),
                std::mem::size_of_val(src),
                ffi::hipMemcpyKind::hipMemcpyHostToDevice,
                stream.raw(),
            )
        };
        self.device.check(err, "upload (hipMemcpyAsync)")?;
        // SAFETY: valid stream, not capturing.
        let err = unsafe { ffi::hipStreamSynchronize(stream.raw()) };
        self.device.check(err, "upload (hipStreamSynchronize)")
    }

    fn download(&self, src: &HipBuffer) -> Result<Vec<f32>> {
        self.check_buffer(src)?;
        let stream = self.device.current_stream()?;
        self.blocking_call("download", &stream)?;
        let mut out = vec![0f32; src.len];
        if out.is_empty() {
            return Ok(out);
        }
        self.device.bind()?;
        // SAFETY: `out` holds `src.len` f32; the copy is waited for before `out` is read.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                out.as_mut_ptr().cast(),
                src.device_ptr(),
                std::mem::size_of_val(out.as_slice()),
                ffi::hipMemcpyKind::hipMemcpyDeviceToHost,
                stream.raw(),
            )
        };
        self.device.check(err, "download (hipMemcpyAsync)")?;
        // SAFETY: valid stream, not capturing.
        let err = unsafe { ffi::hipStreamSynchronize(stream.raw()) };
        self.device.check(err, "download (hipStreamSynchronize)")?;
        Ok(out)
    }

    fn memory_stats(&self) -> MemoryStats {
        self.device.pools.stats()
    }

    fn fill(&self, x: &HipBuffer, value: f32) -> Result<()> {
        self.check_buffer(x)?;
        if x.len == 0 {
            return Ok(());
        }
        self.device.bind()?;
        let stream = self.device.current_stream()?;
        self.ensure_capture_valid(&stream)?;
        // SAFETY: `x` holds `x.len` 32-bit words; the pattern is the value's bits.
        let err = unsafe {
            ffi::hipMemsetD32Async(x.device_ptr(), value.to_bits() as i32, x.len, stream.raw())
        };
        self.device.check(err, "fill (hipMemsetD32Async)")
    }

    fn copy(&self, dst: &HipBuffer, src: &HipBuffer) -> Result<()> {
        self.check_buffer(dst)?;
        self.check_buffer(src)?;
        Self::same_len("copy", dst, src)?;
        if dst.len == 0 {
            return Ok(());
        }
        self.device.bind()?;
        let stream = self.device.current_stream()?;
        self.ensure_capture_valid(&stream)?;
        // SAFETY: both buffers hold `len` f32 on the device.
        let err = unsafe {
            ffi::hipMemcpyAsync(
                dst.device_ptr(),
                src.device_ptr(),
                dst.len * std::mem::size_of::<f32>(),
                ffi::hipMemcpyKind::hipMemcpyDeviceToDevice,
                stream.raw(),
            )
        };
        self.device.check(err, "copy (hipMemcpyAsync)")
    }

    fn add_scalar(&self, x: &HipBuffer, c: f32) -> Result<()> {
        self.check_buffer(x)?;
        let (mut ptr, mut c, mut n) = (x.device_ptr(), c, x.len as u64);
        let mut args = [
            (&raw mut ptr).cast(),
            (&raw mut c).cast(),
            (&raw mut n).cast(),
        ];
        self.launch(Kernel::AddScalar, x.len, &mut args)
    }

    fn scale(&self, x: &HipBuffer, a: f32) -> Result<()> {
        self.check_buffer(x)?;
        let (mut ptr, mut a, mut n) = (x.device_ptr(), a, x.len as u64);
        let mut args = [
            (&raw mut ptr).cast(),
            (&raw mut a).cast(),
            (&raw mut n).cast(),
        ];
        self.launch(Kernel::Scale, x.len, &mut args)
    }

    fn axpy(&self, y: &HipBuffer, a: f32, x: &HipBuffer) -> Result<()> {
        self.check_buffer(y)?;
        self.check_buffer(x)?;
        Self::same_len("axpy", y, x)?;
        let (mut yp, mut a, mut xp, mut n) = (y.device_ptr(), a, x.device_ptr(), y.len as u64);
        let mut args = [
            (&raw mut yp).cast(),
            (&raw mut a).cast(),
            (&raw mut xp).cast(),
            (&raw mut n).cast(),
        ];
        self.launch(Kernel::Axpy, y.len, &mut args)
    }

    fn host_callback(&self, f: HostCallback) -> Result<()> {
        let Some(launch_host_func) = ffi::optional().launch_host_func else {
            return Err(GraphError::Unsupported {
                what: NO_HOST_FUNC.to_owned(),
            });
        };
        self.device.bind()?;
        let stream = self.device.current_stream()?;
        let boxed = Box::new(f);
        match self.device.capture_of(&stream)? {
            Some(capture) => {
                self.device.captures.ensure_valid(&capture)?;
                let user = (&*boxed as *const HostCallback).cast_mut().cast::<c_void>();
                // SAFETY: the box is kept in the capture's keep-alive list (below), which the
                // graph holds while its executable can run.
                let err = unsafe { launch_host_func(stream.raw(), Some(host::run_captured), user) };
                self.device
                    .check(err, "host_callback (hipLaunchHostFunc)")?;
                capture
                    .keep_alive
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(boxed);
                Ok(())
            }
            None => {
                let user = Box::into_raw(boxed).cast::<c_void>();
                // SAFETY: `run_once` takes the box back exactly once when the callback runs.
                let err = unsafe { launch_host_func(stream.raw(), Some(host::run_once), user) };
                if let Err(e) = self.device.check(err, "host_callback (hipLaunchHostFunc)") {
                    // SAFETY: the launch failed, so the trampoline never runs: reclaim the box.
                    drop(unsafe { Box::from_raw(user.cast::<HostCallback>()) });
                    return Err(e);
                }
                Ok(())
            }
        }
    }

    fn graph(&self, options: GraphOptions) -> Result<HipGraph> {
        accel_graph_api::Graph::new(HipGraphImpl::new(Arc::clone(&self.device)), options)
    }
}
