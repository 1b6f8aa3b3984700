//! `CudaDevice`: one device's primary context as a [`Driver`], opened through cudarc with the
//! driver library loaded at run time.

use std::{
    panic::{self, AssertUnwindSafe},
    ptr,
    sync::Arc,
};

use accel_graph_api::{BackendKind, Capabilities, GraphError, Result};
use accel_graph_driver::{Driver, DriverResult};
use cudarc::driver::{CudaContext, sys};

use crate::{
    blas::{Blas, workspace_bytes},
    editing::{ConditionKernel, driver_version, since},
    error::{BACKEND, check, describe},
    ops::Kernels,
};

/// The CUDA driver of a [`crate::CudaBackend`]: a context of the device (its primary context,
/// or the user's), the portable ops' kernels loaded in it, and the cuBLAS state of GEMM.
pub struct CudaDevice {
    /// Before `ctx`: the module is unloaded while the context lives.
    pub(crate) kernels: Kernels,
    /// The kernel that sets conditional nodes' handles (before `ctx`, as `kernels`), or why
    /// conditional nodes are unavailable.
    pub(crate) condition: std::result::Result<ConditionKernel, String>,
    /// `cuDriverGetVersion` (12080 for 12.8).
    pub(crate) driver_version: i32,
    /// Before `ctx`: the handle and workspaces go while the context lives.
    pub(crate) blas: Blas,
    pub(crate) ordinal: usize,
    name: String,
    /// Compute capability `(major, minor)`: what users' kernels are compiled for.
    pub(crate) compute_capability: (i32, i32),
    pub(crate) ctx: Arc<CudaContext>,
}

impl CudaDevice {
    /// Opens device `ordinal`. Without a usable driver or device the error is
    /// [`GraphError::BackendUnavailable`] carrying the loader's or driver's text.
    pub(crate) fn open(ordinal: usize) -> Result<Self> {
        ensure_driver_library()?;
        guard_loader("loading the CUDA driver API", || Self::open_loaded(ordinal))
    }

    fn open_loaded(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable("cuInit/cuDevicePrimaryCtxRetain", e))?;
        // This context object is the backend's own (not the user's): the accessors handing it
        // out are `unsafe`, and tracking stays off so that safe-looking cudarc code on it
        // cannot record cudarc's events into a capture. A user who wants cudarc's tracking
        // brings their own context (`CudaBackend::from_context`).
        // SAFETY: ordering across streams is the driver layer's job (events, capture joins).
        unsafe { ctx.disable_event_tracking() };
        Self::on_context(ctx)
    }

    /// A driver on `ctx`, a context the user made (primary or not): it is bound on every call;
    /// no other context is made. Its event tracking is left as the user set it.
    pub(crate) fn with_context(ctx: Arc<CudaContext>) -> Result<Self> {
        guard_loader("loading the CUDA driver API", || {
            ctx.bind_to_thread()
                .map_err(|e| unavailable("cuCtxSetCurrent", e))?;
            Self::on_context(ctx)
        })
    }

    /// The driver on `ctx`, which is current on this thread.
    fn on_context(ctx: Arc<CudaContext>) -> Result<Self> {
        let name = ctx.name().map_err(|e| unavailable("cuDeviceGetName", e))?;
        let compute_capability = ctx
            .compute_capability()
            .map_err(|e| unavailable("cuDeviceGetAttribute", e))?;
        let kernels = Kernels::load().map_err(|e| GraphError::BackendUnavailable {
            backend: BACKEND,
            reason: format!("loading the portable ops' kernels failed: {e}"),
        })?;
        let driver_version = driver_version();
        // Loaded now, outside any capture: conditional nodes launch it inside captures.
        let condition = if driver_version >= since::CONDITIONAL {
            ConditionKernel::load()
        } else {
            Err(format!(
                "conditional nodes need a CUDA 12.4 driver, this one is {}.{}",
                driver_version / 1000,
                driver_version % 1000 / 10
            ))
        };
        Ok(CudaDevice {
            kernels,
            condition,
            driver_version,
            blas: Blas::new(workspace_bytes(compute_capability.0)),
            ordinal: ctx.ordinal(),
            name,
            compute_capability,
            ctx,
        })
    }

    /// The device's compute capability `(major, minor)`.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Device memory `(free, total)` in bytes, from `cuMemGetInfo`.
    pub fn mem_get_info(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(|e| GraphError::Driver {
            backend: BACKEND,
            code: e.0 as i64,
            name: describe(e.0).0,
            message: "cuMemGetInfo".to_owned(),
        })
    }

    /// The cudarc context: the device's primary context for [`crate::CudaBackend::new`], the
    /// user's for [`crate::CudaBackend::from_context`].
    ///
    /// # Safety
    /// On the context [`crate::CudaBackend::new`] makes, cudarc's per-slice event tracking is
    /// disabled (its events recorded into a capture break it). Safe cudarc code that relies on
    /// it — a `CudaSlice` used on two streams — loses the ordering cudarc promises: order such
    /// work with events yourself. Captures must be begun, and streams joined to captures,
    /// through the backend only, and memory your own work touches in a captured graph must
    /// outlive every replay. (With your own context, [`crate::CudaBackend::from_context`],
    /// adopted streams and lent buffers, none of this is needed.)
    pub unsafe fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

impl Driver for CudaDevice {
    const KIND: BackendKind = BackendKind::Cuda;

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::native_capture(self.name.clone());
        caps.host_callbacks = true;
        caps.graph_upload = true;
        // Graph editing: executable update exists since CUDA 12.0 (the bindings' minimum is
        // higher); nodes added to a capture need 12.3's capture-info calls; conditional nodes
        // 12.4 (`if_else` 12.8) and the set-condition kernel loaded.
        let version = self.driver_version;
        caps.graph_update = true;
        caps.device_launch = true;
        caps.child_graphs = version >= since::CAPTURE_INFO_V3;
        let conditions = self.condition.is_ok() && caps.child_graphs;
        caps.conditional_nodes = conditions && version >= since::CONDITIONAL;
        caps.conditional_if_else = conditions && version >= since::IF_ELSE;
        caps
    }

    /// CUDA's global capture mode spans the process: one domain for every CUDA instance.
    fn capture_domain(&self) -> u64 {
        0
    }

    /// Makes the context current on this thread; a no-op when it is already (one
    /// `cuCtxGetCurrent`, kept this cheap because every op and replay pays it).
    #[inline]
    fn bind(&self) -> DriverResult<()> {
        let want = self.ctx.cu_ctx();
        let mut current = ptr::null_mut();
        // SAFETY: reads this thread's current context into a local.
        let rc = unsafe { sys::cuCtxGetCurrent(&mut current) };
        if rc == sys::CUresult::CUDA_SUCCESS && current == want {
            return Ok(());
        }
        // SAFETY: the context is alive while the device holds it.
        check(unsafe { sys::cuCtxSetCurrent(want) }, "cuCtxSetCurrent")
    }

    fn synchronize(&self) -> DriverResult<()> {
        // SAFETY: plain device synchronization.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // The module unload, cuBLAS handle destruction and workspace frees that follow
        // (`kernels`, `blas`) need the context current here.
        let _ = self.ctx.bind_to_thread();
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("name", &self.name)
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

fn unavailable(call: &str, err: cudarc::driver::DriverError) -> GraphError {
    let (name, message) = describe(err.0);
    let hint = if err.0 == sys::CUresult::CUDA_ERROR_STUB_LIBRARY {
        " (the CUDA toolkit's stub libcuda was loaded instead of the driver's: remove the \
         toolkit's stubs/ folder from LD_LIBRARY_PATH)"
    } else {
        ""
    };
    GraphError::BackendUnavailable {
        backend: BACKEND,
        reason: format!("{call} failed: {name}: {message}{hint}"),
    }
}

/// Library names tried: the driver library's soname and development link on Linux, its DLL on
/// Windows. Each is among the names cudarc's loader tries, so one that loads here is one
/// cudarc finds. Not cudarc's own list (`get_lib_name_candidates`): that exists only while
/// cudarc loads at run time, and a build that has cudarc link CUDA instead (candle-core's
/// `cuda` feature asks for `dynamic-linking`) turns loading off for every crate in it.
fn candidates() -> Vec<String> {
    let names: &[&str] = if cfg!(windows) {
        &["nvcuda.dll"]
    } else {
        &["libcuda.so.1", "libcuda.so"]
    };
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// Checks that the CUDA driver library can be loaded before cudarc touches it (cudarc's
/// dynamic loader panics when it is missing, and a constructor must return an error instead).
fn ensure_driver_library() -> Result<()> {
    let mut first_error = None;
    for name in candidates() {
        // SAFETY: loading libcuda runs its initialisers, which is what using the driver means;
        // the handle is dropped at once (cudarc keeps its own).
        match unsafe { libloading::Library::new(&name) } {
            Ok(_) => return Ok(()),
            Err(e) => {
                first_error.get_or_insert_with(|| match std::error::Error::source(&e) {
                    Some(cause) => format!("{name}: {e}: {cause}"),
                    None => format!("{name}: {e}"),
                });
            }
        }
    }
    Err(GraphError::BackendUnavailable {
        backend: BACKEND,
        reason: format!(
            "the CUDA driver library could not be loaded (is an NVIDIA driver installed and \
             libcuda on the loader path?): {}",
            first_error.unwrap_or_else(|| "no candidate names".to_owned())
        ),
    })
}

/// Runs `f`, turning a panic from cudarc's loader (a driver too old to export a symbol the
/// bindings need) into `BackendUnavailable`.
fn guard_loader<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic without message".to_owned());
            Err(GraphError::BackendUnavailable {
                backend: BACKEND,
                reason: format!("{what}: {text}"),
            })
        }
    }
}
