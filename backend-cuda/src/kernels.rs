//! The portable ops' kernels: hand-written PTX loaded once per backend with `cuModuleLoadData`.
//!
//! PTX rather than NVRTC because it needs nothing but the driver at run time (no toolkit, no
//! `libnvrtc` on the user's machine), and because `mul.rn`/`add.rn` pin the rounding of axpy
//! in the source itself, where a C compiler might contract to an FMA.

use std::{
    ffi::{CString, c_void},
    ptr,
};

use accel_graph_api::Result;
use cudarc::driver::sys;

use crate::driver_error::check_call;

/// The PTX text of every portable-op kernel.
pub const PORTABLE_OPS_PTX: &str = include_str!("kernels.ptx");

/// Threads per block of every portable-op launch.
const BLOCK: u32 = 256;

/// The loaded module and its functions (valid while the backend's context lives).
pub(crate) struct Kernels {
    module: sys::CUmodule,
    pub(crate) add_scalar: sys::CUfunction,
    pub(crate) scale: sys::CUfunction,
    pub(crate) axpy: sys::CUfunction,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread whose
// current context is the one they were loaded in (every call binds it first).
unsafe impl Send for Kernels {}
// SAFETY: as above; the handles are never mutated after loading.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Loads the PTX module into the current context and looks up its functions.
    pub(crate) fn load() -> Result<Self> {
        let image = CString::new(PORTABLE_OPS_PTX).expect("PTX text has no NUL byte");
        let mut module = ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call.
        let rc = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        check_call(rc, "cuModuleLoadData")?;
        let mut kernels = Kernels {
            module,
            add_scalar: ptr::null_mut(),
            scale: ptr::null_mut(),
            axpy: ptr::null_mut(),
        };
        kernels.add_scalar = kernels.function("ag_add_scalar")?;
        kernels.scale = kernels.function("ag_scale")?;
        kernels.axpy = kernels.function("ag_axpy")?;
        Ok(kernels)
    }

    fn function(&self, name: &str) -> Result<sys::CUfunction> {
        let cname = CString::new(name).expect("kernel names have no NUL byte");
        let mut f = ptr::null_mut();
        // SAFETY: `self.module` is a loaded module; `cname` outlives the call.
        let rc = unsafe { sys::cuModuleGetFunction(&mut f, self.module, cname.as_ptr()) };
        check_call(rc, "cuModuleGetFunction")?;
        Ok(f)
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once; failures (a context
        // already torn down at exit) leave nothing to clean up.
        let _ = unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// Launches `f` over `n` elements on `stream` with `args` (pointers to each argument value).
///
/// # Safety
/// `args` must match the kernel's parameter list, and every pointer argument must name device
/// memory of at least `n` elements.
pub(crate) unsafe fn launch(
    f: sys::CUfunction,
    n: usize,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> sys::CUresult {
    // A grid of at least one block, so that an empty op still launches (and is captured) and
    // the launch grid never exceeds the limit for any realistic buffer.
    let grid = n.div_ceil(BLOCK as usize).clamp(1, i32::MAX as usize) as u32;
    // SAFETY: the caller guarantees the arguments; grid and block sizes are within limits.
    unsafe {
        sys::cuLaunchKernel(
            f,
            grid,
            1,
            1,
            BLOCK,
            1,
            1,
            0,
            stream,
            args.as_mut_ptr(),
            ptr::null_mut(),
        )
    }
}
