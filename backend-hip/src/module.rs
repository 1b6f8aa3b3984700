//! `Module`: a code object loaded on a device (`hipModuleLoadData`), unloaded on drop.

use std::{
    ffi::{CStr, c_int},
    sync::Arc,
};

use accel_graph_driver::DriverResult;

use crate::{
    capture::MODES,
    code_cache::{CodeCache, CodeKey},
    error::{check, name_of},
    ffi, rtc,
};

/// A loaded module and the code it was loaded from.
pub(crate) struct Module {
    raw: ffi::hipModule_t,
    /// The device it is loaded on, made current to unload it.
    device: c_int,
    /// Kept while the module is loaded: ROCm does not document whether `hipModuleLoadData`
    /// copies the image or keeps reading it.
    _code: Arc<[u8]>,
}

// SAFETY: a module handle is a process-wide runtime handle usable from any thread (every call
// on it binds its device first); it is unloaded once, on drop.
unsafe impl Send for Module {}
// SAFETY: as above; nothing is mutated through `&Module`.
unsafe impl Sync for Module {}

impl Module {
    /// Loads `code` on `device`, current on this thread. In relaxed capture mode: loading is
    /// no stream work, and must neither be refused by nor disturb a capture in progress.
    pub(crate) fn load(code: Arc<[u8]>, device: c_int) -> DriverResult<Self> {
        let mut raw = std::ptr::null_mut();
        let err = MODES.relaxed(|| {
            // SAFETY: `code` is a complete code object from hiprtc (or a cache file holding
            // one, checked against its key and checksum); `raw` is a local out-parameter.
            unsafe { ffi::hipModuleLoadData(&mut raw, code.as_ptr().cast()) }
        });
        check(err, "hipModuleLoadData")?;
        Ok(Module {
            raw,
            device,
            _code: code,
        })
    }

    /// Compiles `source` with `options` for `device`, of architecture `arch` (`key` files the
    /// code: see [`CodeCache`]), and loads it, compiling afresh if cached code does not load.
    /// Whether hiprtc's compiler is there is checked only when something is compiled.
    pub(crate) fn compile_and_load(
        key: &CodeKey,
        arch: &str,
        (source, file_name, options): (&str, &str, &[String]),
        device: c_int,
    ) -> Result<Self, ModuleError> {
        CodeCache::global().load_with(
            key,
            || {
                rtc::compiler_available(arch).map_err(ModuleError::Compiler)?;
                rtc::compile(source, file_name, options).map_err(ModuleError::Compile)
            },
            |code| Module::load(code, device).map_err(ModuleError::Load),
        )
    }

    /// The entry point `name`, or the runtime's error (`hipErrorNotFound` when the module has
    /// none of that name).
    pub(crate) fn function(&self, name: &CStr) -> Result<ffi::hipFunction_t, ffi::hipError_t> {
        let mut f = std::ptr::null_mut();
        // SAFETY: loaded module, NUL-terminated name, local out-parameter.
        let err = unsafe { ffi::hipModuleGetFunction(&mut f, self.raw, name.as_ptr()) };
        if err == ffi::hipError_t::hipSuccess {
            Ok(f)
        } else {
            Err(err)
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let (raw, device) = (self.raw, self.device);
        // Relaxed, as the load; with the module's device current, and the thread's own device
        // given back after. A failure (a runtime already torn down at exit) leaves nothing to
        // clean up.
        let err = MODES.relaxed(|| {
            let mut previous: c_int = device;
            // SAFETY: a local out-parameter; on failure `previous` stays `device`.
            unsafe { ffi::hipGetDevice(&mut previous) };
            // SAFETY: the module was loaded on `device` by `load` and is unloaded once, with
            // its device current; no function of it can launch any more (its owner, the
            // device's kernels or a backend instance's kernel cache, outlives every graph
            // that could launch one). `previous` is a device the runtime reported.
            unsafe {
                ffi::hipSetDevice(device);
                let err = ffi::hipModuleUnload(raw);
                ffi::hipSetDevice(previous);
                err
            }
        });
        if err != ffi::hipError_t::hipSuccess {
            tracing::debug!(error = %name_of(err), "hipModuleUnload failed");
        }
    }
}

/// Why a module could not be made.
#[derive(Debug)]
pub(crate) enum ModuleError {
    /// hiprtc's compiler is missing (`GraphError::LibraryUnavailable`).
    Compiler(accel_graph_api::GraphError),
    /// hiprtc failed.
    Compile(rtc::RtcFailure),
    /// The runtime refused the code object.
    Load(accel_graph_driver::DriverError),
}

impl ModuleError {
    /// The failure as a driver error (the built-in kernels': a failure there is the backend's).
    pub(crate) fn into_driver_error(self) -> accel_graph_driver::DriverError {
        match self {
            ModuleError::Compiler(e) => accel_graph_driver::DriverError::Api(e),
            ModuleError::Compile(e) => e.into_driver_error(),
            ModuleError::Load(e) => e,
        }
    }
}

impl std::fmt::Display for ModuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModuleError::Compiler(e) => e.fmt(f),
            ModuleError::Compile(e) => e.fmt(f),
            ModuleError::Load(e) => e.fmt(f),
        }
    }
}
