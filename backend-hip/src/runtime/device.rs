//! `Device`: what one backend instance's clones and graphs share — the device ordinal, memory
//! pools, current streams, captures in progress and the op kernels.

use std::{
    ffi::{CStr, c_char, c_int},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use accel_graph_api::{CurrentStream, GraphError, Result, pools::MemoryPools};

use super::{
    captures::{ActiveCapture, Captures, KeepAlive},
    error::{self, CallSite},
    ffi,
    kernels::Kernels,
    memory::HipAllocator,
    stream::HipStream,
};

/// Instance ids of HIP backends: a tag in the top byte keeps them apart from other backends'.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);
const INSTANCE_TAG: u64 = 0x48 << 56;

/// The shared core of a [`super::HipBackend`].
pub(crate) struct Device {
    pub(crate) instance: u64,
    pub(crate) ordinal: i32,
    pub(crate) name: String,
    /// `hipRuntimeGetVersion` (e.g. 50221153 for 5.2.21153).
    pub(crate) runtime_version: i32,
    /// The runtime refuses hipMalloc during a capture (probed at start).
    pub(crate) runtime_refuses_capture_alloc: bool,
    pub(crate) captures: Arc<Captures>,
    pub(crate) pools: Arc<MemoryPools<HipAllocator>>,
    pub(crate) current: CurrentStream<HipStream>,
    kernels: Mutex<Option<Arc<Kernels>>>,
    /// Host callbacks of graphs reset since the last synchronize: a launch in flight may still
    /// call them.
    pub(crate) retired_callbacks: Mutex<Vec<KeepAlive>>,
}

/// Turns a failed start-up call into `BackendUnavailable` with HIP's name and text.
fn unavailable(err: ffi::hipError_t, call: &str) -> GraphError {
    GraphError::BackendUnavailable {
        backend: error::BACKEND,
        reason: format!(
            "{call} failed: {} ({}): {}",
            error::name_of(err),
            error::code_of(err),
            error::text_of(err)
        ),
    }
}

impl Device {
    /// Initializes HIP and opens device `ordinal`.
    pub(crate) fn open(ordinal: i32) -> Result<Self> {
        // SAFETY: plain runtime initialization.
        let err = unsafe { ffi::hipInit(0) };
        if !error::is_success(err) {
            return Err(unavailable(err, "hipInit"));
        }
        let mut count: c_int = 0;
        // SAFETY: valid out-pointer.
        let err = unsafe { ffi::hipGetDeviceCount(&mut count) };
        if !error::is_success(err) {
            return Err(unavailable(err, "hipGetDeviceCount"));
        }
        if ordinal < 0 || ordinal >= count {
            return Err(GraphError::BackendUnavailable {
                backend: error::BACKEND,
                reason: format!("no HIP device {ordinal}: the runtime reports {count} device(s)"),
            });
        }
        // SAFETY: `ordinal` is a valid device index.
        let err = unsafe { ffi::hipSetDevice(ordinal) };
        if !error::is_success(err) {
            return Err(unavailable(err, "hipSetDevice"));
        }
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds 256 bytes, as passed.
        let err = unsafe { ffi::hipDeviceGetName(name.as_mut_ptr(), 256, ordinal) };
        let name = if error::is_success(err) {
            // Guarantee termination whatever the runtime wrote.
            name[255] = 0;
            // SAFETY: the buffer is NUL-terminated (last byte set above).
            unsafe { CStr::from_ptr(name.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("HIP device {ordinal}")
        };
        let mut runtime_version: c_int = 0;
        // SAFETY: valid out-pointer.
        let err = unsafe { ffi::hipRuntimeGetVersion(&mut runtime_version) };
        if !error::is_success(err) {
            return Err(unavailable(err, "hipRuntimeGetVersion"));
        }
        let instance = INSTANCE_TAG | NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let captures = Arc::new(Captures::default());
        let runtime_refuses_capture_alloc = super::probe::runtime_refuses_capture_alloc()?;
        Ok(Device {
            instance,
            ordinal,
            name,
            runtime_version,
            runtime_refuses_capture_alloc,
            pools: MemoryPools::new(HipAllocator::new(Arc::clone(&captures))),
            captures,
            current: CurrentStream::new(HipStream::null(instance)),
            kernels: Mutex::new(None),
            retired_callbacks: Mutex::new(Vec::new()),
        })
    }

    /// Makes this device current on the calling thread (HIP's current device is per thread).
    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: the ordinal was validated at open.
        let err = unsafe { ffi::hipSetDevice(self.ordinal) };
        if error::is_success(err) {
            Ok(())
        } else {
            Err(error::driver(err, "hipSetDevice"))
        }
    }

    /// Maps a failed call made during `operation`.
    pub(crate) fn error(&self, err: ffi::hipError_t, operation: &str, bytes: usize) -> GraphError {
        error::map(
            err,
            CallSite {
                operation,
                mode: self.captures.forbidding_mode(),
                requested_bytes: bytes,
            },
        )
    }

    /// `Ok` for hipSuccess, else the mapped error.
    pub(crate) fn check(&self, err: ffi::hipError_t, operation: &str) -> Result<()> {
        if error::is_success(err) {
            Ok(())
        } else {
            Err(self.error(err, operation, 0))
        }
    }

    /// The calling thread's current stream, checked to be ours.
    pub(crate) fn current_stream(&self) -> Result<HipStream> {
        let stream = self.current.get();
        stream.check(self.instance)?;
        Ok(stream)
    }

    /// The runtime's capture status of `stream`: `None` if it is not capturing, else the
    /// runtime's capture id (the null stream is never capturing).
    pub(crate) fn capture_id(&self, stream: &HipStream) -> Result<Option<u64>> {
        if stream.is_default() {
            return Ok(None);
        }
        let mut status = ffi::hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        let mut id: std::ffi::c_ulonglong = 0;
        // SAFETY: valid stream, valid out-pointers.
        let err = unsafe { ffi::hipStreamGetCaptureInfo(stream.raw(), &mut status, &mut id) };
        self.check(err, "hipStreamGetCaptureInfo")?;
        Ok(match status {
            ffi::hipStreamCaptureStatus::hipStreamCaptureStatusNone => None,
            _ => Some(id),
        })
    }

    /// The capture `stream` takes part in, if it is one of ours.
    pub(crate) fn capture_of(&self, stream: &HipStream) -> Result<Option<ActiveCapture>> {
        Ok(self
            .capture_id(stream)?
            .and_then(|id| self.captures.get(id)))
    }

    /// The op kernels, compiled and loaded on first use. A first use inside a capture loads
    /// the module in relaxed mode: loading is no stream work, and must not disturb the capture.
    pub(crate) fn kernels(&self) -> Result<Arc<Kernels>> {
        let mut slot = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = slot.as_ref() {
            return Ok(Arc::clone(k));
        }
        let _relaxed = super::memory::RelaxedCaptureMode::enter()?;
        let kernels = Arc::new(Kernels::load()?);
        *slot = Some(Arc::clone(&kernels));
        Ok(kernels)
    }

    /// Waits for all work on the device (the caller has checked that no capture runs).
    pub(crate) fn wait_all(&self) -> Result<()> {
        // SAFETY: plain device-wide wait.
        let err = unsafe { ffi::hipDeviceSynchronize() };
        self.check(err, "synchronize (hipDeviceSynchronize)")?;
        // Every launch has finished: host callbacks of reset graphs can go.
        self.retired_callbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Host callbacks of reset graphs may still be queued; wait before they are freed.
        if !self
            .retired_callbacks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            // SAFETY: plain device-wide wait.
            unsafe { ffi::hipDeviceSynchronize() };
        }
        self.pools.raw().flush_deferred();
    }
}
