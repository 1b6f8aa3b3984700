//! The portable ops' kernels: HIP C++ compiled with hiprtc the first time an op runs, loaded
//! as a module, launched with hipModuleLaunchKernel.

use std::ffi::{CStr, CString, c_void};

use accel_graph_api::{GraphError, Result};

use super::{
    error,
    ffi::{self, Handle},
};

/// Kernel source. It keeps to the subset HIP and CUDA share (`blockIdx`, `blockDim`,
/// `threadIdx`, `__fmul_rn`, `__fadd_rn`), and `axpy` rounds the product before the sum so no
/// fused multiply-add changes the last bit.
pub(crate) const SOURCE: &str = r#"
extern "C" __global__ void accel_graph_add_scalar(float* x, float c, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], c);
}
extern "C" __global__ void accel_graph_scale(float* x, float a, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(x[i], a);
}
extern "C" __global__ void accel_graph_axpy(float* y, float a, const float* x,
                                            unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
}
"#;

/// Threads per block of every launch.
pub(crate) const BLOCK: u32 = 256;

/// A kernel of the module.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kernel {
    AddScalar,
    Scale,
    Axpy,
}

impl Kernel {
    fn symbol(self) -> &'static CStr {
        match self {
            Kernel::AddScalar => c"accel_graph_add_scalar",
            Kernel::Scale => c"accel_graph_scale",
            Kernel::Axpy => c"accel_graph_axpy",
        }
    }

    /// The op's name, for errors.
    pub(crate) fn op(self) -> &'static str {
        match self {
            Kernel::AddScalar => "add_scalar",
            Kernel::Scale => "scale",
            Kernel::Axpy => "axpy",
        }
    }
}

/// The loaded module and its functions.
pub(crate) struct Kernels {
    module: Handle<ffi::ihipModule_t>,
    functions: [Handle<ffi::ihipModuleSymbol_t>; 3],
}

fn rtc_error(code: ffi::HiprtcResult, what: &str, log: String) -> GraphError {
    // SAFETY: hiprtcGetErrorString returns a static string for every code.
    let name = unsafe { ffi::hiprtcGetErrorString(code) };
    let name = if name.is_null() {
        format!("hiprtcResult({code})")
    } else {
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    GraphError::Driver {
        backend: error::BACKEND,
        code: i64::from(code),
        name,
        message: if log.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {log}")
        },
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
        // SAFETY: valid program, valid out-pointer.
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
}

/// Compiles [`SOURCE`] to a code object for the current device.
fn compile() -> Result<Vec<u8>> {
    let src = CString::new(SOURCE).expect("the kernel source has no NUL byte");
    let mut prog = std::ptr::null_mut();
    // SAFETY: valid strings; no headers.
    let rc = unsafe {
        ffi::hiprtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"accel_graph_ops.hip".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcCreateProgram", String::new()));
    }
    let prog = Program(prog);
    // SAFETY: valid program, no options (hiprtc targets the current device).
    let rc = unsafe { ffi::hiprtcCompileProgram(prog.0, 0, std::ptr::null()) };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcCompileProgram", prog.log()));
    }
    let mut size = 0usize;
    // SAFETY: valid program, valid out-pointer.
    let rc = unsafe { ffi::hiprtcGetCodeSize(prog.0, &mut size) };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcGetCodeSize", String::new()));
    }
    let mut code = vec![0u8; size];
    // SAFETY: `code` holds `size` bytes.
    let rc = unsafe { ffi::hiprtcGetCode(prog.0, code.as_mut_ptr().cast()) };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcGetCode", String::new()));
    }
    Ok(code)
}

impl Kernels {
    /// Compiles and loads the module.
    pub(crate) fn load() -> Result<Self> {
        let code = compile()?;
        let mut module = std::ptr::null_mut();
        // SAFETY: `code` is a complete code object from hiprtc; `module` a valid out-pointer.
        let err = unsafe { ffi::hipModuleLoadData(&mut module, code.as_ptr().cast()) };
        if !error::is_success(err) {
            return Err(error::driver(
                err,
                "loading the op kernels (hipModuleLoadData)",
            ));
        }
        let mut kernels = Kernels {
            module: Handle(module),
            functions: [Handle::null(); 3],
        };
        for (slot, kernel) in [Kernel::AddScalar, Kernel::Scale, Kernel::Axpy]
            .into_iter()
            .enumerate()
        {
            let mut f = std::ptr::null_mut();
            // SAFETY: valid module, NUL-terminated name, valid out-pointer.
            let err =
                unsafe { ffi::hipModuleGetFunction(&mut f, module, kernel.symbol().as_ptr()) };
            if !error::is_success(err) {
                return Err(error::driver(err, "hipModuleGetFunction"));
            }
            kernels.functions[slot] = Handle(f);
        }
        Ok(kernels)
    }

    /// Launches `kernel` over `n` elements on `stream` with `args` (pointers to each argument).
    pub(crate) fn launch(
        &self,
        kernel: Kernel,
        n: usize,
        stream: ffi::hipStream_t,
        args: &mut [*mut c_void],
    ) -> std::result::Result<(), ffi::hipError_t> {
        let grid = n.div_ceil(BLOCK as usize);
        let Ok(grid) = u32::try_from(grid) else {
            return Err(ffi::hipError_t::hipErrorInvalidValue);
        };
        // SAFETY: the function belongs to the loaded module; `args` points at live values of
        // the kernel's parameter types, in order.
        let err = unsafe {
            ffi::hipModuleLaunchKernel(
                self.functions[kernel as usize].0,
                grid,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if error::is_success(err) {
            Ok(())
        } else {
            Err(err)
        }
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by hipModuleLoadData and is unloaded once.
        unsafe { ffi::hipModuleUnload(self.module.0) };
    }
}
