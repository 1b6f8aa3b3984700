//! The portable ops on HIP: `fill` and `copy` as the runtime's memset/memcpy, the others as
//! kernels generated from one table (HIP C++ compiled with hiprtc when the device opens), and
//! host functions.
//!
//! The kernels keep to the subset HIP and CUDA share (`blockIdx`, `blockDim`, `threadIdx`,
//! `__fadd_rn`, `__fmul_rn`), so the HIP-on-CUDA shim compiles them unchanged. The intrinsics
//! pin the rounding: no fused multiply-add, so `axpy` rounds the product before the sum, bit
//! for bit like the other backends. A new element-wise op is one row of [`KERNELS`]: ops find
//! their kernel by name ([`Lowering::of`]).

use std::{
    ffi::{CStr, CString, c_void},
    fmt::Write as _,
    sync::{Arc, Mutex, OnceLock},
};

use accel_graph_api::{GraphError, PortableOp, backend_kit::ErrorClass};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{DriverOps, HostFn, Region},
    native::{BLOCK, ElementArgs, Lowering, grid},
};

use crate::{
    HBlock, HStream, HipDevice,
    capture::MODES,
    error::{check, error},
    ffi,
};

/// One element-wise kernel: every thread `i < n` sets `y[i]` to `expr`, which may read `y[i]`,
/// the scalar `a` and `x[i]`.
struct Kernel {
    op: &'static str,
    expr: &'static str,
}

/// The kernels, all with the signature `(float* y, float a, const float* x,
/// unsigned long long n)`, named `accel_graph_<op>`.
const KERNELS: [Kernel; 4] = [
    Kernel {
        op: "add_scalar",
        expr: "__fadd_rn(y[i], a)",
    },
    Kernel {
        op: "scale",
        expr: "__fmul_rn(y[i], a)",
    },
    Kernel {
        op: "axpy",
        expr: "__fadd_rn(y[i], __fmul_rn(a, x[i]))",
    },
    Kernel {
        op: "mul",
        expr: "__fmul_rn(y[i], x[i])",
    },
];

/// The HIP C++ source of every kernel of [`KERNELS`].
fn portable_ops_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut source = String::new();
        for k in &KERNELS {
            let (op, expr) = (k.op, k.expr);
            let _ = write!(
                source,
                "extern \"C\" __global__ void accel_graph_{op}(\
                 float* y, float a, const float* x, unsigned long long n) {{\n    \
                 (void)x;\n    \
                 unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n    \
                 if (i < n) y[i] = {expr};\n\
                 }}\n",
            );
        }
        source
    })
}

/// A hiprtc failure: the result's name, and the compiler's log where there is one.
fn rtc_error(code: ffi::HiprtcResult, call: &str, log: &str) -> DriverError {
    // SAFETY: hiprtcGetErrorString returns a static string (or null) for every code.
    let name = unsafe { ffi::hiprtcGetErrorString(code) };
    let name = if name.is_null() {
        format!("hiprtcResult({code})")
    } else {
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    let message = if log.is_empty() {
        call.to_owned()
    } else {
        format!("{call}: {log}")
    };
    DriverError::code(ErrorClass::Other, i64::from(code), name, message)
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
}

/// Compiles [`portable_ops_source`] to a code object for the current device.
fn compile() -> DriverResult<Vec<u8>> {
    // The generated source holds no NUL byte; an empty one would fail to compile, loudly.
    let src = CString::new(portable_ops_source()).unwrap_or_default();
    let mut prog = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers.
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
        return Err(rtc_error(rc, "hiprtcCreateProgram", ""));
    }
    let prog = Program(prog);
    // SAFETY: live program, no options (hiprtc targets the current device).
    let rc = unsafe { ffi::hiprtcCompileProgram(prog.0, 0, std::ptr::null()) };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcCompileProgram", &prog.log()));
    }
    let mut size = 0usize;
    // SAFETY: live program, local out-parameter.
    let rc = unsafe { ffi::hiprtcGetCodeSize(prog.0, &mut size) };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcGetCodeSize", ""));
    }
    let mut code = vec![0u8; size];
    // SAFETY: `code` holds `size` bytes.
    let rc = unsafe { ffi::hiprtcGetCode(prog.0, code.as_mut_ptr().cast()) };
    if rc != ffi::HIPRTC_SUCCESS {
        return Err(rtc_error(rc, "hiprtcGetCode", ""));
    }
    Ok(code)
}

/// The code object for device `ordinal` (current on this thread), compiled once per process
/// and device: compiling takes long, and every instance of a device loads the same code.
fn code_object(ordinal: usize) -> DriverResult<Arc<[u8]>> {
    static CODE: Mutex<Vec<(usize, Arc<[u8]>)>> = Mutex::new(Vec::new());
    let mut cache = CODE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, code)) = cache.iter().find(|(o, _)| *o == ordinal) {
        return Ok(Arc::clone(code));
    }
    let code: Arc<[u8]> = compile()?.into();
    cache.push((ordinal, Arc::clone(&code)));
    Ok(code)
}

/// The loaded module and its functions, in the order of [`KERNELS`].
pub(crate) struct Kernels {
    module: ffi::hipModule_t,
    functions: Vec<ffi::hipFunction_t>,
}

// SAFETY: module and function handles are process-wide runtime handles usable from any thread
// (every call binds the device first); they are never mutated after loading.
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Compiles (once per process and device) and loads the kernels for device `ordinal`,
    /// current on this thread, and launches each once on no element on a scratch stream, so
    /// that everything is resident before any capture. All in relaxed capture mode: another
    /// instance's capture may be running, and none of this is its work.
    pub(crate) fn load(ordinal: usize) -> DriverResult<Self> {
        MODES.relaxed(|| {
            let code = code_object(ordinal)?;
            let mut module = std::ptr::null_mut();
            // SAFETY: `code` is a complete code object from hiprtc; `module` a local
            // out-parameter.
            let err = unsafe { ffi::hipModuleLoadData(&mut module, code.as_ptr().cast()) };
            check(err, "hipModuleLoadData")?;
            let mut kernels = Kernels {
                module,
                functions: Vec::with_capacity(KERNELS.len()),
            };
            for k in &KERNELS {
                let name = CString::new(format!("accel_graph_{}", k.op)).unwrap_or_default();
                let mut f = std::ptr::null_mut();
                // SAFETY: loaded module, NUL-terminated name, local out-parameter.
                let err = unsafe { ffi::hipModuleGetFunction(&mut f, module, name.as_ptr()) };
                check(err, "hipModuleGetFunction")?;
                kernels.functions.push(f);
            }
            let scratch = HStream::create()?;
            for &f in &kernels.functions {
                // SAFETY: n = 0, so no thread touches memory.
                unsafe {
                    launch(
                        f,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        0.0,
                        0,
                        &scratch,
                    )
                }?;
            }
            check(
                // SAFETY: live stream (destroyed when `scratch` drops).
                unsafe { ffi::hipStreamSynchronize(scratch.raw()) },
                "hipStreamSynchronize",
            )?;
            Ok(kernels)
        })
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        let module = self.module;
        // SAFETY: the module was loaded by `load` and is unloaded once; a failure (a runtime
        // already torn down at exit) leaves nothing to clean up.
        let _ = MODES.relaxed(|| unsafe { ffi::hipModuleUnload(module) });
    }
}

/// Launches `f` over `n` elements of `y` (and `x`) with scalar `a` on `stream`.
///
/// # Safety
/// `y` (and `x`, for a kernel that reads it) must be device memory of at least `n` `f32`s.
unsafe fn launch(
    f: ffi::hipFunction_t,
    y: *mut c_void,
    x: *mut c_void,
    a: f32,
    n: usize,
    stream: &HStream,
) -> DriverResult<()> {
    let grid = grid(n)?;
    let mut args = ElementArgs::new(y, a, x, n);
    // SAFETY: the arguments match `(float* y, float a, const float* x, unsigned long long n)`
    // and outlive the call; the caller guarantees the memory.
    let err = unsafe {
        ffi::hipModuleLaunchKernel(
            f,
            grid,
            1,
            1,
            BLOCK,
            1,
            1,
            0,
            stream.raw(),
            args.pointers().as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check(err, "hipModuleLaunchKernel")
}

/// Why host callbacks are missing on runtimes without `hipLaunchHostFunc`.
const NO_HOST_FUNC: &str = "host_callback: this HIP runtime exports no hipLaunchHostFunc (ROCm \
    5.2 lacks it; hipStreamAddCallback cannot be captured)";

impl DriverOps for HipDevice {
    unsafe fn launch_op(
        &self,
        op: PortableOp<Region<'_, HBlock>>,
        stream: &HStream,
    ) -> DriverResult<()> {
        let scalar = op.scalar();
        let (out, input) = op.operands();
        // A region's elements start `offset` elements into its block.
        let out_ptr = out.block.device_ptr().wrapping_byte_add(out.byte_offset());
        let input_ptr = input.map_or(std::ptr::null_mut(), |x| {
            x.block.device_ptr().wrapping_byte_add(x.byte_offset())
        });
        match Lowering::of(&op, KERNELS.iter().map(|k| k.op))? {
            Lowering::Memset => {
                // SAFETY: the block is live and holds `len` 32-bit elements (this method's
                // contract); the pattern is the value's bits.
                let err = unsafe {
                    ffi::hipMemsetD32Async(
                        out_ptr,
                        scalar.to_bits() as i32,
                        out.len,
                        stream.raw(),
                    )
                };
                check(err, "hipMemsetD32Async")
            }
            Lowering::Memcpy => {
                // SAFETY: both blocks are live and hold `len` elements (this method's
                // contract: regions lie inside their blocks, operand lengths are equal).
                let err = unsafe {
                    ffi::hipMemcpyAsync(
                        out_ptr,
                        input_ptr,
                        out.num_bytes(),
                        ffi::hipMemcpyKind::hipMemcpyDeviceToDevice,
                        stream.raw(),
                    )
                };
                check(err, "hipMemcpyAsync")
            }
            Lowering::Kernel(row) => {
                let Some(&f) = self.kernels.functions.get(row) else {
                    return Err(error(
                        ffi::hipError_t::hipErrorInvalidDeviceFunction,
                        &format!("{} has no loaded kernel", op.name()),
                    ));
                };
                // SAFETY: the operands are live and hold `out.len` elements (this method's
                // contract: regions lie inside their blocks, operand lengths are equal).
                unsafe {
                    launch(
                        f,
                        out_ptr,
                        input_ptr,
                        scalar,
                        out.len,
                        stream,
                    )
                }
            }
        }
    }

    unsafe fn launch_host(
        &self,
        stream: &HStream,
        func: HostFn,
        data: *mut c_void,
    ) -> DriverResult<()> {
        let Some(launch_host_func) = ffi::optional().launch_host_func else {
            return Err(DriverError::Api(GraphError::Unsupported {
                what: NO_HOST_FUNC.to_owned(),
            }));
        };
        // SAFETY: the caller keeps `data` valid while the function can run; the signature was
        // checked at lookup.
        let err = unsafe { launch_host_func(stream.raw(), Some(func), data) };
        check(err, "hipLaunchHostFunc")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_generated_with_the_common_signature() {
        let source = portable_ops_source();
        for k in &KERNELS {
            let head = format!(
                "extern \"C\" __global__ void accel_graph_{}(float* y, float a, \
                 const float* x, unsigned long long n) {{",
                k.op
            );
            assert!(source.contains(&head), "{head}\n---\n{source}");
            assert!(source.contains(&format!("y[i] = {};", k.expr)), "{source}");
        }
        assert_eq!(source.matches("__global__").count(), KERNELS.len());
        assert!(!source.contains('\0'));
    }
}
