//! `HipDevice`: one device of the HIP runtime as a [`Driver`].

use std::ffi::{CStr, c_char, c_int};

use accel_graph_api::{BackendKind, Capabilities, GraphError, Result};
use accel_graph_driver::{Driver, DriverResult};

use crate::{
    error::{BACKEND, check, unavailable},
    ffi,
    ops::Kernels,
    probe,
};

/// The HIP driver of a [`crate::HipBackend`]: one device, and the portable ops' kernels
/// loaded on it.
pub struct HipDevice {
    /// First: the module is unloaded (with the device current, see `Drop`) before the rest.
    pub(crate) kernels: Kernels,
    ordinal: usize,
    /// `ordinal` as the runtime takes it (checked to fit when the device opened).
    raw_ordinal: c_int,
    name: String,
    runtime_version: i32,
    runtime_refuses_capture_alloc: Option<bool>,
}

/// `Ok` for `hipSuccess`, else `BackendUnavailable` naming the failed start-up `call`.
fn started(err: ffi::hipError_t, call: &str) -> Result<()> {
    if err == ffi::hipError_t::hipSuccess {
        Ok(())
    } else {
        Err(unavailable(err, call))
    }
}

impl HipDevice {
    /// Initializes HIP and opens device `ordinal`. Without a usable runtime or device the
    /// error is [`GraphError::BackendUnavailable`] carrying HIP's error name and text.
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        // SAFETY: plain runtime initialization.
        started(unsafe { ffi::hipInit(0) }, "hipInit")?;
        let mut count: c_int = 0;
        started(
            // SAFETY: `count` is a local out-parameter.
            unsafe { ffi::hipGetDeviceCount(&mut count) },
            "hipGetDeviceCount",
        )?;
        // Compared as the runtime's `int`: an ordinal that does not fit one is no device
        // either (never a wrap to a negative or small index).
        let raw_ordinal = c_int::try_from(ordinal)
            .ok()
            .filter(|&o| o < count)
            .ok_or_else(|| GraphError::BackendUnavailable {
                backend: BACKEND,
                reason: format!("no HIP device {ordinal}: the runtime reports {count} device(s)"),
            })?;
        // SAFETY: `raw_ordinal` is a valid device index.
        started(unsafe { ffi::hipSetDevice(raw_ordinal) }, "hipSetDevice")?;
        let mut name: [c_char; 256] = [0; 256];
        // SAFETY: `name` holds 256 bytes, as passed.
        let err = unsafe { ffi::hipDeviceGetName(name.as_mut_ptr(), 256, raw_ordinal) };
        let name = if err == ffi::hipError_t::hipSuccess {
            // Terminated whatever the runtime wrote.
            name[255] = 0;
            // SAFETY: the buffer is NUL-terminated (last byte set above).
            unsafe { CStr::from_ptr(name.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("HIP device {ordinal}")
        };
        let mut runtime_version: c_int = 0;
        started(
            // SAFETY: `runtime_version` is a local out-parameter.
            unsafe { ffi::hipRuntimeGetVersion(&mut runtime_version) },
            "hipRuntimeGetVersion",
        )?;
        let runtime_refuses_capture_alloc = probe::runtime_refuses_capture_alloc();
        let kernels = Kernels::load(ordinal).map_err(|e| GraphError::BackendUnavailable {
            backend: BACKEND,
            reason: format!("loading the portable ops' kernels failed: {e}"),
        })?;
        Ok(HipDevice {
            kernels,
            ordinal,
            raw_ordinal,
            name,
            runtime_version,
            runtime_refuses_capture_alloc,
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// `hipRuntimeGetVersion` of the loaded runtime (e.g. 50221153 for ROCm 5.2).
    pub fn runtime_version(&self) -> i32 {
        self.runtime_version
    }

    /// Whether the runtime itself refuses `hipMalloc` on the thread of a capture that is not
    /// relaxed, as CUDA does (probed once per process; `None` if the probe could not run).
    ///
    /// The backend's own calls follow CUDA's capture-mode rules either way (the driver layer
    /// applies them); this tells whether your own native calls during a capture are refused
    /// by the runtime too.
    pub fn runtime_refuses_capture_alloc(&self) -> Option<bool> {
        self.runtime_refuses_capture_alloc
    }
}

impl Driver for HipDevice {
    const KIND: BackendKind = BackendKind::Hip;

    fn capabilities(&self) -> Capabilities {
        let optional = ffi::optional();
        // Capture modes count as enforced: the driver layer applies the rules to every call
        // the backend makes, whatever the runtime does itself (see
        // `runtime_refuses_capture_alloc`).
        let mut caps = Capabilities::native_capture(self.name.clone());
        caps.host_callbacks = optional.launch_host_func.is_some();
        caps.graph_upload = optional.graph_upload.is_some();
        // Executable update and child-graph nodes exist in ROCm 5.2; conditional nodes do
        // not exist in HIP at all.
        caps.graph_update = true;
        caps.child_graphs = true;
        caps
    }

    /// HIP's global capture mode spans the process, as CUDA's does: one domain for every HIP
    /// instance.
    fn capture_domain(&self) -> u64 {
        0
    }

    /// Makes the device current on this thread (HIP's current device is per thread).
    #[inline]
    fn bind(&self) -> DriverResult<()> {
        // SAFETY: the ordinal was validated at open.
        check(
            unsafe { ffi::hipSetDevice(self.raw_ordinal) },
            "hipSetDevice",
        )
    }

    fn synchronize(&self) -> DriverResult<()> {
        // SAFETY: plain device-wide wait.
        check(
            unsafe { ffi::hipDeviceSynchronize() },
            "hipDeviceSynchronize",
        )
    }
}

impl Drop for HipDevice {
    fn drop(&mut self) {
        // The module unload that follows (`kernels`) belongs to this device.
        let _ = self.bind();
    }
}

impl std::fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipDevice")
            .field("name", &self.name)
            .field("ordinal", &self.ordinal)
            .field("runtime_version", &self.runtime_version)
            .field(
                "runtime_refuses_capture_alloc",
                &self.runtime_refuses_capture_alloc,
            )
            .finish()
    }
}
