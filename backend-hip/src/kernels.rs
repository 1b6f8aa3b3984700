//! Users' kernels and GEMM on HIP.
//!
//! A user kernel's CUDA C source ([`Kernel::cuda_source`]) is compiled with hiprtc for the
//! device's architecture — the same source serves the CUDA backend, so kernels keep to what
//! both compilers accept — through the kernel cache (`code_cache.rs`), loaded with
//! `hipModuleLoadData` and its entry point looked up at once, so a kernel that loads launches
//! without further compiling or loading. Launches go through `hipModuleLaunchKernel`: a
//! buffer argument as the device pointer of its view's first element, a scalar by value,
//! [`Kernel::block_dims`] threads per block. GEMM launches the built-in kernel of its element
//! type (`gemm.rs`).

use std::ffi::{CString, c_void};

use accel_graph_api::{FloatType, Gemm, GraphError, kernel::Kernel};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, RawArg},
};

use crate::{
    HBlock, HStream, HipDevice,
    code_cache::CodeKey,
    error::{check, name_of},
    ffi, gemm,
    module::{Module, ModuleError},
};

/// A user kernel loaded on a device: its module and entry point.
pub struct HipKernelModule {
    function: ffi::hipFunction_t,
    /// Last: the function belongs to it.
    _module: Module,
}

// SAFETY: a function handle is a process-wide runtime handle usable from any thread (every
// launch binds the device first); it is never mutated, and its module lives as long as it.
unsafe impl Send for HipKernelModule {}
// SAFETY: as above.
unsafe impl Sync for HipKernelModule {}

/// One kernel argument as `hipModuleLaunchKernel` reads it: the pointer handed for a
/// parameter points at the value, whatever its type.
#[repr(C)]
#[derive(Clone, Copy)]
union ArgValue {
    pointer: *mut c_void,
    word: u32,
}

impl DriverKernels for HipDevice {
    type Module = HipKernelModule;

    /// Errors: no CUDA C source (`Unsupported`), hiprtc's compiler missing
    /// (`LibraryUnavailable`), a source hiprtc rejects or without the entry point
    /// (`KernelFailed`, with the log); the runtime's own failures to load (out of memory, ...)
    /// as the driver's errors.
    fn load_kernel(&self, kernel: &Kernel) -> DriverResult<HipKernelModule> {
        let name = kernel.name();
        let source = kernel
            .cuda_source()
            .ok_or_else(|| kernel.missing_source("HIP", "CUDA C"))?;
        let failed = |message: String| {
            DriverError::Api(GraphError::KernelFailed {
                kernel: name.to_owned(),
                message,
            })
        };
        let entry =
            CString::new(name).map_err(|_| failed("the kernel's name holds a NUL byte".into()))?;
        let options = kernel.cuda_options();
        let key = CodeKey::new(&self.target, source, name, options);
        let file_name = format!("{name}.hip");
        let program = (source, &file_name[..], options);
        let module = Module::compile_and_load(&key, &self.target.arch, program, self.raw_ordinal)
            .map_err(|e| match e {
            ModuleError::Compile(failure) => DriverError::Api(failure.into_kernel_failed(name)),
            other => other.into_driver_error(),
        })?;
        let function = module.function(&entry).map_err(|err| {
            failed(format!(
                "the compiled code has no entry point {name} ({}): declare it \
                 `extern \"C\" __global__ void {name}(...)`",
                name_of(err)
            ))
        })?;
        Ok(HipKernelModule {
            function,
            _module: module,
        })
    }

    unsafe fn launch_kernel(
        &self,
        module: &HipKernelModule,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, HBlock>],
        stream: &HStream,
    ) -> DriverResult<()> {
        let mut values: Vec<ArgValue> = args
            .iter()
            .map(|arg| match arg {
                RawArg::Buffer { bytes, .. } => ArgValue {
                    pointer: bytes.block.device_ptr().wrapping_byte_add(bytes.offset),
                },
                RawArg::Scalar(value) => ArgValue { word: value.bits() },
            })
            .collect();
        // Pointers into `values`, which is not resized from here on.
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| std::ptr::from_mut(v).cast())
            .collect();
        let [bx, by, bz] = kernel.block_dims();
        // SAFETY: one pointer per parameter, in order, each at a value of the parameter's size
        // (a device pointer, or a 4-byte scalar at the start of its slot), alive for the call
        // (the runtime copies them). The buffers' bytes lie inside live blocks, kept alive by
        // the caller while a capture of the launch can replay (this method's contract).
        let err = unsafe {
            ffi::hipModuleLaunchKernel(
                module.function,
                grid[0],
                grid[1],
                grid[2],
                bx,
                by,
                bz,
                0,
                stream.raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(err, "hipModuleLaunchKernel")
    }

    unsafe fn gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: Bytes<'_, HBlock>,
        b: Bytes<'_, HBlock>,
        c: Bytes<'_, HBlock>,
        stream: &HStream,
    ) -> DriverResult<()> {
        if spec.m == 0 || spec.n == 0 {
            // `C` has no element: nothing to compute or write.
            return Ok(());
        }
        // SAFETY: the operands' bytes lie inside their live blocks and hold the elements of
        // `dtype` the shape needs (this method's contract: the driver layer checked the
        // lengths); the entry point is `dtype`'s.
        unsafe { gemm::launch(self.kernels.gemm(dtype), spec, a, b, c, stream) }
    }
}
