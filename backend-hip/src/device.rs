//! `HipDevice`: one device of the HIP runtime as a [`Driver`].

use std::ffi::{CStr, c_char, c_int};

use accel_graph_api::{BackendKind, Capabilities, GraphError, LaunchLimits, Result};
use accel_graph_driver::{Driver, DriverResult};

use crate::{
    backend::Opening,
    code_cache::Target,
    error::{BACKEND, check, unavailable},
    ffi,
    ops::Kernels,
    probe, rtc,
};

/// The HIP driver of a [`crate::HipBackend`]: one device, and the built-in kernels (portable
/// ops and GEMM) loaded on it.
pub struct HipDevice {
    pub(crate) kernels: Kernels,
    ordinal: usize,
    /// `ordinal` as the runtime takes it (checked to fit when the device opened).
    pub(crate) raw_ordinal: c_int,
    name: String,
    runtime_version: i32,
    /// What code is compiled for here: the kernel cache's key.
    pub(crate) target: Target,
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
    pub(crate) fn open(ordinal: usize, opening: Opening) -> Result<Self> {
        // SAFETY: plain runtime initialization (idempotent).
        started(unsafe { ffi::hipInit(0) }, "hipInit")?;
        let previous = match opening {
            Opening::Own => None,
            Opening::Existing => {
                let mut device: c_int = 0;
                // SAFETY: `device` is a local out-parameter.
                started(unsafe { ffi::hipGetDevice(&mut device) }, "hipGetDevice")?;
                Some(device)
            }
        };
        let opened = Self::open_device(ordinal, opening);
        if let Some(device) = previous {
            // SAFETY: the device the runtime reported current on this thread.
            let restored = started(unsafe { ffi::hipSetDevice(device) }, "hipSetDevice");
            // A backend that opened but cannot give the thread its device back is refused:
            // the caller relies on that state.
            return opened.and_then(|d| restored.map(|()| d));
        }
        opened
    }

    fn open_device(ordinal: usize, opening: Opening) -> Result<Self> {
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
        let target = target_of(raw_ordinal, runtime_version);
        let runtime_refuses_capture_alloc = match opening {
            Opening::Own => probe::runtime_refuses_capture_alloc(),
            Opening::Existing => probe::known_answer(),
        };
        let kernels =
            Kernels::load(raw_ordinal, &target).map_err(|e| GraphError::BackendUnavailable {
                backend: BACKEND,
                reason: format!("loading the built-in kernels (portable ops, GEMM) failed: {e}"),
            })?;
        Ok(HipDevice {
            kernels,
            ordinal,
            raw_ordinal,
            name,
            runtime_version,
            target,
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

    /// The device's architecture as code is compiled for it: `gcnArchName` (e.g.
    /// `gfx90a:sramecc+:xnack-`; `sm_90` under the HIP-on-CUDA shim), or a placeholder naming
    /// the ordinal where the runtime did not report one (compiled code is then not cached on
    /// disk).
    pub fn arch(&self) -> &str {
        &self.target.arch
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

/// What code is compiled for on device `raw_ordinal`: its `gcnArchName` and the compiler's
/// versions.
fn target_of(raw_ordinal: c_int, runtime_version: i32) -> Target {
    // SAFETY: `hipDeviceProp_t` is plain data (integers, arrays, raw pointers): all zeros is
    // a value of it.
    let mut props: ffi::hipDeviceProp_t = unsafe { std::mem::zeroed() };
    // SAFETY: `props` has the runtime's layout (checked in `ffi.rs`); a valid device index.
    let err = unsafe { ffi::hipGetDeviceProperties(&mut props, raw_ordinal) };
    // Terminated whatever the runtime wrote.
    if let Some(last) = props.gcnArchName.last_mut() {
        *last = 0;
    }
    // SAFETY: the array is NUL-terminated (last element set above).
    let arch = unsafe { CStr::from_ptr(props.gcnArchName.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let known = err == ffi::hipError_t::hipSuccess && !arch.is_empty();
    Target {
        arch: if known {
            arch
        } else {
            format!("device {raw_ordinal} of an unreported architecture")
        },
        rtc_version: rtc::version(),
        runtime_version,
        persistent: known,
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
        // CUDA's, which AMD's GPUs accept and the HIP-on-CUDA platform enforces.
        caps.launch_limits = LaunchLimits::CUDA;
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

impl std::fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipDevice")
            .field("name", &self.name)
            .field("ordinal", &self.ordinal)
            .field("runtime_version", &self.runtime_version)
            .field("arch", &self.target.arch)
            .field(
                "runtime_refuses_capture_alloc",
                &self.runtime_refuses_capture_alloc,
            )
            .finish()
    }
}
