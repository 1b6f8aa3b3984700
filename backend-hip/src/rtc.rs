//! hiprtc: HIP C++ compiled at run time into a code object that `hipModuleLoadData` loads —
//! the built-in kernels (portable ops and GEMM) and users' kernels go through [`compile`].
//!
//! In ROCm 5.x hiprtc lives inside `libamdhip64`, so its entry points are there whenever the
//! backend runs (the loader resolves them at start-up). What can be missing is the compiler
//! behind them: ROCm's hiprtc compiles through the code-object manager `libamd_comgr.so.2`,
//! loaded at run time — and ROCm 5.2's hiprtc crashes (a call through a null pointer in
//! `hiprtcCreateProgram`) when that fails. [`compiler_available`] checks for it first and
//! answers [`GraphError::LibraryUnavailable`] instead.

use std::{
    ffi::{CStr, CString, c_int},
    fmt,
    sync::OnceLock,
};

use accel_graph_api::{GraphError, backend_kit::ErrorClass};
use accel_graph_driver::DriverError;

use crate::ffi;

/// `HIPRTC_ERROR_INVALID_INPUT`: what a source or option holding a NUL byte is reported as
/// (hiprtc never sees it).
const INVALID_INPUT: ffi::HiprtcResult = 3;

/// The code-object manager ROCm 5.x's hiprtc loads at run time.
const COMGR: &CStr = c"libamd_comgr.so.2";

/// Why hiprtc produced no code: the call that failed, its result, and the compiler's log.
#[derive(Debug, Clone)]
pub(crate) struct RtcFailure {
    call: &'static str,
    code: ffi::HiprtcResult,
    log: String,
}

impl RtcFailure {
    /// The result's name (`HIPRTC_ERROR_COMPILATION`, ...).
    fn name(&self) -> String {
        // SAFETY: hiprtcGetErrorString returns a static string (or null) for every code.
        let name = unsafe { ffi::hiprtcGetErrorString(self.code) };
        if name.is_null() {
            return format!("hiprtcResult({})", self.code);
        }
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// The failure as a driver error (the built-in kernels: a failure there is the backend's).
    pub(crate) fn into_driver_error(self) -> DriverError {
        let message = self.to_string();
        DriverError::code(
            ErrorClass::Other,
            i64::from(self.code),
            self.name(),
            message,
        )
    }

    /// The failure of user kernel `kernel`: [`GraphError::KernelFailed`] with the log.
    pub(crate) fn into_kernel_failed(self, kernel: &str) -> GraphError {
        GraphError::KernelFailed {
            kernel: kernel.to_owned(),
            message: format!("{} ({})", self, self.name()),
        }
    }
}

impl fmt::Display for RtcFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.log.is_empty() {
            f.write_str(self.call)
        } else {
            write!(f, "{}: {}", self.call, self.log)
        }
    }
}

/// Owns a hiprtc program until dropped.
struct Program(ffi::HiprtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by hiprtcCreateProgram and is destroyed once.
        unsafe { ffi::hiprtcDestroyProgram(&mut self.0) };
    }
}

impl Program {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: live program, local out-parameter.
        if unsafe { ffi::hiprtcGetProgramLogSize(self.0, &mut size) } != ffi::HIPRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds `size` bytes, as the runtime asked for.
        unsafe { ffi::hiprtcGetProgramLog(self.0, buf.as_mut_ptr().cast()) };
        String::from_utf8_lossy(&buf)
            .trim_end_matches('\0')
            .trim()
            .to_owned()
    }

    /// `Ok` for success, else the failure of `call` (with the log when `with_log`).
    fn check(
        &self,
        code: ffi::HiprtcResult,
        call: &'static str,
        with_log: bool,
    ) -> Result<(), RtcFailure> {
        if code == ffi::HIPRTC_SUCCESS {
            return Ok(());
        }
        let log = if with_log { self.log() } else { String::new() };
        Err(RtcFailure { call, code, log })
    }
}

/// A string hiprtc can take, or the failure of `call` when it holds a NUL byte.
fn c_string(text: &str, what: &str, call: &'static str) -> Result<CString, RtcFailure> {
    CString::new(text).map_err(|_| RtcFailure {
        call,
        code: INVALID_INPUT,
        log: format!("the {what} holds a NUL byte"),
    })
}

/// Held while hiprtc compiles (see `compile`).
static COMPILING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Compiles `source` (named `file_name` in diagnostics) with `options` for the current device
/// (hiprtc targets it unless an option names another), returning the code object.
pub(crate) fn compile(
    source: &str,
    file_name: &str,
    options: &[String],
) -> Result<Vec<u8>, RtcFailure> {
    let src = c_string(source, "source", "hiprtcCreateProgram")?;
    let name = c_string(file_name, "program name", "hiprtcCreateProgram")?;
    let options = options
        .iter()
        .map(|o| c_string(o, "option", "hiprtcCompileProgram"))
        .collect::<Result<Vec<_>, _>>()?;
    let option_ptrs: Vec<_> = options.iter().map(|o| o.as_ptr()).collect();
    let option_count = c_int::try_from(option_ptrs.len()).map_err(|_| RtcFailure {
        call: "hiprtcCompileProgram",
        code: INVALID_INPUT,
        log: "too many options".to_owned(),
    })?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers.
    let rc = unsafe {
        ffi::hiprtcCreateProgram(
            &mut raw,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(RtcFailure {
            call: "hiprtcCreateProgram",
            code: rc,
            log: String::new(),
        });
    }
    let prog = Program(raw);
    // One compilation at a time in the process: ROCm 5.2's comgr (LLVM 15) was seen to spin
    // forever in `llvm::TargetRegistry::lookupTarget` with two threads compiling at once.
    let _one_at_a_time = COMPILING.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: live program; `option_ptrs` holds `option_count` NUL-terminated strings that
    // outlive the call.
    let rc = unsafe { ffi::hiprtcCompileProgram(prog.0, option_count, option_ptrs.as_ptr()) };
    prog.check(rc, "hiprtcCompileProgram", true)?;
    let mut size = 0usize;
    // SAFETY: live program, local out-parameter.
    let rc = unsafe { ffi::hiprtcGetCodeSize(prog.0, &mut size) };
    prog.check(rc, "hiprtcGetCodeSize", false)?;
    let mut code = vec![0u8; size];
    // SAFETY: `code` holds `size` bytes.
    let rc = unsafe { ffi::hiprtcGetCode(prog.0, code.as_mut_ptr().cast()) };
    prog.check(rc, "hiprtcGetCode", false)?;
    Ok(code)
}

/// `hiprtcVersion` of the loaded runtime (`None` if it fails): part of what compiled code is
/// cached under.
pub(crate) fn version() -> Option<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: local out-parameters.
    let rc = unsafe { ffi::hiprtcVersion(&mut major, &mut minor) };
    (rc == ffi::HIPRTC_SUCCESS).then_some((major, minor))
}

/// True for an AMD target name (`gfx90a:sramecc+:xnack-`): code for it is compiled by ROCm's
/// hiprtc, through comgr. Other names are the HIP-on-CUDA shim's (`sm_90`), compiled by NVRTC.
fn is_amd_target(arch: &str) -> bool {
    arch.starts_with("gfx")
}

/// The options the built-in kernels are compiled with for `arch`, so that each product and sum
/// is rounded on its own, as the reference computes it: ROCm's `__fmul_rn` and `__fadd_rn` are
/// plain `*` and `+`, which clang fuses into a multiply-add by default for HIP
/// (`-ffp-contract=fast`, a mode that ignores `#pragma clang fp contract`), so an AMD target
/// needs `-ffp-contract=off`. NVRTC (the shim's targets) never fuses those intrinsics, and
/// takes no such option.
pub(crate) fn unfused_options(arch: &str) -> Vec<String> {
    if is_amd_target(arch) {
        vec!["-ffp-contract=off".to_owned()]
    } else {
        Vec::new()
    }
}

/// Whether hiprtc can compile for device architecture `arch`: for an AMD target, whether the
/// code-object manager it loads at run time loads (checked once per process).
pub(crate) fn compiler_available(arch: &str) -> Result<(), GraphError> {
    if !is_amd_target(arch) {
        return Ok(());
    }
    static COMGR_LOADS: OnceLock<Result<(), String>> = OnceLock::new();
    COMGR_LOADS
        .get_or_init(|| library_loads(COMGR))
        .clone()
        .map_err(|reason| compiler_missing(&reason))
}

/// [`GraphError::LibraryUnavailable`] for hiprtc's missing compiler, with the loader's reason.
fn compiler_missing(reason: &str) -> GraphError {
    GraphError::LibraryUnavailable {
        library: "libhiprtc",
        reason: format!(
            "ROCm's hiprtc compiles through {} (loaded at run time), which does not load: \
             {reason}; install ROCm's code-object manager (Debian: libamd-comgr2)",
            COMGR.to_string_lossy()
        ),
    }
}

/// Whether the shared library `soname` loads; the loader's message if not. A library that
/// loads stays loaded (hiprtc loads the same one).
fn library_loads(soname: &CStr) -> Result<(), String> {
    // SAFETY: dlopen with a NUL-terminated name; running the library's initializers is what
    // hiprtc would do when loading it.
    let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if !handle.is_null() {
        return Ok(());
    }
    // SAFETY: dlerror returns the calling thread's last loader message (or null).
    let message = unsafe { libc::dlerror() };
    Err(if message.is_null() {
        "the dynamic loader gave no reason".to_owned()
    } else {
        // SAFETY: non-null, NUL-terminated, valid until the next loader call on this thread.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An AMD target every ROCm 5.x hiprtc compiles for without a device present: hiprtc
    /// targets the current device unless an option names one, and this machine may have none.
    pub(crate) const TEST_TARGET: &str = "--offload-arch=gfx90a";

    #[test]
    fn a_compile_error_is_reported_with_the_log() {
        let failure = compile(
            "extern \"C\" __global__ void broken(float* y) { y[0] = undeclared_name; }",
            "broken.hip",
            &[TEST_TARGET.to_owned()],
        )
        .expect_err("the source does not compile");
        assert_eq!(failure.call, "hiprtcCompileProgram");
        assert!(failure.log.contains("undeclared_name"), "{failure}");
        match failure.into_kernel_failed("broken") {
            GraphError::KernelFailed { kernel, message } => {
                assert_eq!(kernel, "broken");
                assert!(message.contains("HIPRTC_ERROR_COMPILATION"), "{message}");
                assert!(message.contains("undeclared_name"), "{message}");
            }
            other => panic!("expected KernelFailed, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_source_compiles_to_a_code_object() {
        let code = compile(
            "extern \"C\" __global__ void fine(float* y) { y[threadIdx.x] = 1.0f; }",
            "fine.hip",
            &[TEST_TARGET.to_owned(), "-DUNUSED=1".to_owned()],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // An ELF code object (possibly inside an offload bundle).
        assert!(code.len() > 64, "{} bytes", code.len());
        assert!(version().is_some());
    }

    #[test]
    fn nul_bytes_are_refused_before_hiprtc() {
        for (source, options) in [("a\0b", Vec::new()), ("fine", vec!["-DX=\0".to_owned()])] {
            let failure = compile(source, "nul.hip", &options).expect_err("a NUL byte");
            assert_eq!(failure.code, INVALID_INPUT);
            assert!(failure.log.contains("NUL byte"), "{failure}");
        }
    }

    #[test]
    fn a_missing_compiler_library_is_library_unavailable() {
        let reason =
            library_loads(c"libaccel_graph_no_such_library.so.9").expect_err("no such library");
        assert!(
            reason.contains("libaccel_graph_no_such_library"),
            "{reason}"
        );
        match compiler_missing(&reason) {
            GraphError::LibraryUnavailable { library, reason } => {
                assert_eq!(library, "libhiprtc");
                assert!(reason.contains("libamd_comgr.so.2"), "{reason}");
                assert!(
                    reason.contains("libaccel_graph_no_such_library"),
                    "{reason}"
                );
            }
            other => panic!("expected LibraryUnavailable, got {other:?}"),
        }
        // The shim's targets need no comgr.
        assert!(compiler_available("sm_90").is_ok());
        assert!(is_amd_target("gfx90a:sramecc+:xnack-") && !is_amd_target("sm_90"));
    }
}
