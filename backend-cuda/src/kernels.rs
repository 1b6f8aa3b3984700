//! Users' kernels and GEMM on CUDA: kernels compiled by NVRTC ([`crate::nvrtc`], cached on
//! disk), loaded as modules and launched with `cuLaunchKernel` — or `cuLaunchKernelEx` with
//! programmatic stream serialization for a kernel built to overlap the kernel before it
//! ([`Kernel::programmatic_dependent_launch`]) on a device of compute capability 9.0 or later;
//! GEMM on cuBLAS ([`crate::blas`]).

use std::{
    ffi::{CString, c_void},
    ptr,
    sync::{Arc, LazyLock},
};

use accel_graph_api::{FloatType, Gemm, GraphError, backend_kit::ErrorClass, kernel::Kernel};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, DriverStreams as _, RawArg},
};
use cudarc::driver::{CudaContext, sys};

use crate::{
    CuBlock, CuStream, CudaDevice,
    error::{check, describe, error},
    nvrtc::{self, ImageKind},
};

/// A user's kernel loaded in the device's context: its module and entry point. The module is
/// unloaded on drop, with the context (which the module holds) current.
pub struct CuModule {
    module: sys::CUmodule,
    function: sys::CUfunction,
    ctx: Arc<CudaContext>,
    /// Launched with programmatic stream serialization: the kernel is marked for it, and both
    /// the device and the code compiled for it have the grid-dependency control (9.0+).
    programmatic: bool,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread whose
// current context is the one they were loaded in (every call binds it first); they are never
// mutated after loading.
unsafe impl Send for CuModule {}
// SAFETY: as above.
unsafe impl Sync for CuModule {}

impl CuModule {
    /// The raw `CUfunction` of the kernel's entry point, for inspection (attributes, occupancy).
    /// Valid while the backend instance lives.
    pub fn cu_function(&self) -> sys::CUfunction {
        self.function
    }

    /// Whether launches may overlap the kernel before them on the stream (the kernel is marked
    /// [`Kernel::programmatic_dependent_launch`] and this device and its compiled code can).
    pub fn is_programmatic(&self) -> bool {
        self.programmatic
    }
}

/// The environment variable that turns programmatic dependent launch off (`0`): every kernel
/// then launches in stream order, to compare or to rule the overlap out.
pub const PROGRAMMATIC_LAUNCH_ENV: &str = "ACCEL_GRAPH_CUDA_PROGRAMMATIC_LAUNCH";

/// Whether the environment allows programmatic dependent launch (read once per process).
fn programmatic_allowed() -> bool {
    static ALLOWED: LazyLock<bool> =
        LazyLock::new(|| std::env::var(PROGRAMMATIC_LAUNCH_ENV).map_or(true, |v| v.trim() != "0"));
    *ALLOWED
}

impl Drop for CuModule {
    fn drop(&mut self) {
        // The backend's kernel cache drops last, perhaps after the device: the module's own
        // context reference keeps the context alive for the unload.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded by `load_kernel`, unloaded once; no graph of the backend instance
            // (which held the kernel cache) is left to launch its function.
            let _ = unsafe { sys::cuModuleUnload(self.module) };
        }
    }
}

impl std::fmt::Debug for CuModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuModule")
            .field("module", &self.module)
            .field("function", &self.function)
            .finish()
    }
}

/// A failure of loading `kernel`'s binary: a kernel failure (the binary or its entry point is
/// wrong for the device), unless the device itself failed (out of memory, a sticky fault).
fn load_failed(kernel: &Kernel, code: sys::CUresult, call: &str, hint: &str) -> DriverError {
    let (name, message) = describe(code);
    match ErrorClass::of_name(&name) {
        ErrorClass::Other => DriverError::Api(GraphError::KernelFailed {
            kernel: kernel.name().to_owned(),
            message: format!("{call}: {name}: {message}{hint}"),
        }),
        _ => error(code, call),
    }
}

/// Loads the function now rather than at its first launch: with lazy loading (CUDA's default
/// since 12.2) a first launch inside a capture would load it there, an implicit
/// synchronization. `cuFuncLoad` where the driver has it (12.4 and later), else an attribute
/// query, which loads the function too.
fn load_now(function: sys::CUfunction) -> sys::CUresult {
    let mut version = 0;
    // SAFETY: a local out-parameter.
    let known = unsafe { sys::cuDriverGetVersion(&mut version) } == sys::CUresult::CUDA_SUCCESS;
    if known && version >= 12040 {
        // SAFETY: a live function; the symbol exists from driver 12.4 on (checked above, so
        // cudarc's loader finds it).
        unsafe { sys::cuFuncLoad(function) }
    } else {
        let mut threads = 0;
        // SAFETY: a live function, a local out-parameter.
        unsafe {
            sys::cuFuncGetAttribute(
                &mut threads,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                function,
            )
        }
    }
}

/// One kernel parameter's value, where `cuLaunchKernel`'s argument pointers point.
enum Param {
    /// A buffer view's first byte.
    Pointer(sys::CUdeviceptr),
    /// A scalar's four bytes.
    Word(u32),
}

/// `cuLaunchKernelEx` with programmatic stream serialization allowed: the grid may begin
/// before the kernel before it on the stream has finished, if that kernel lets its dependents
/// launch (`griddepcontrol.launch_dependents`); its threads wait for it where they call
/// `griddepcontrol.wait`. Captured, the dependency becomes a programmatic edge of the graph.
///
/// # Safety
/// As `cuLaunchKernel` in [`DriverKernels::launch_kernel`]: `pointers` holds one pointer per
/// parameter to a value of its size, the buffers behind them are live; the kernel is marked
/// [`Kernel::programmatic_dependent_launch`] (it waits before touching earlier work's memory).
unsafe fn launch_programmatic(
    module: &CuModule,
    grid: [u32; 3],
    block: [u32; 3],
    pointers: &mut [*mut c_void],
    stream: &CuStream,
) -> DriverResult<()> {
    // SAFETY: plain data (an id, padding, a union of plain values): all zeros is valid.
    let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: 0,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: 1,
    };
    // SAFETY: the caller's contract; `config` and its one attribute outlive the call.
    let rc = unsafe {
        sys::cuLaunchKernelEx(
            &config,
            module.function,
            pointers.as_mut_ptr(),
            ptr::null_mut(),
        )
    };
    check(rc, "cuLaunchKernelEx")
}

impl DriverKernels for CudaDevice {
    type Module = CuModule;

    fn load_kernel(&self, kernel: &Kernel) -> DriverResult<CuModule> {
        let source = kernel
            .cuda_source()
            .ok_or_else(|| DriverError::Api(kernel.missing_source("CUDA", "CUDA C")))?;
        let compiled = nvrtc::compile(kernel, source, self.compute_capability)?;
        let mut image = compiled.image;
        if compiled.kind == ImageKind::Ptx && image.last() != Some(&0) {
            // The driver reads PTX as a NUL-terminated string.
            image.push(0);
        }
        let name = CString::new(kernel.name()).map_err(|_| {
            DriverError::Api(GraphError::KernelFailed {
                kernel: kernel.name().to_owned(),
                message: "the kernel name contains a NUL byte".to_owned(),
            })
        })?;
        let mut module = ptr::null_mut();
        // SAFETY: `image` is a cubin or NUL-terminated PTX that outlives the call; the context
        // is current (the driver layer binds it before loading).
        let rc = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(load_failed(kernel, rc, "cuModuleLoadData", ""));
        }
        // `griddepcontrol` needs both the device and the compiled code at 9.0 or later; the
        // macros compile to nothing below that, so the kernel must launch in stream order.
        let programmatic = kernel.is_programmatic()
            && self.compute_capability.0 >= 9
            && compiled.arch >= 90
            && programmatic_allowed();
        let mut loaded = CuModule {
            module,
            function: ptr::null_mut(),
            ctx: Arc::clone(&self.ctx),
            programmatic,
        };
        let mut function = ptr::null_mut();
        // SAFETY: a live module; `name` outlives the call.
        let rc = unsafe { sys::cuModuleGetFunction(&mut function, loaded.module, name.as_ptr()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(load_failed(
                kernel,
                rc,
                "cuModuleGetFunction",
                " (the entry point must be `extern \"C\" __global__ void <name>(...)`)",
            ));
        }
        let rc = load_now(function);
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(load_failed(kernel, rc, "cuFuncLoad", ""));
        }
        loaded.function = function;
        Ok(loaded)
    }

    unsafe fn launch_kernel(
        &self,
        module: &CuModule,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, CuBlock>],
        stream: &CuStream,
    ) -> DriverResult<()> {
        self.check_joined(stream)?;
        let mut params: Vec<Param> = args
            .iter()
            .map(|arg| match *arg {
                RawArg::Buffer { bytes, .. } => {
                    Param::Pointer(bytes.block.device_ptr() + bytes.offset as u64)
                }
                RawArg::Scalar(s) => Param::Word(s.bits()),
            })
            .collect();
        // Pointers into `params`, which is not touched again until the launch returned.
        let mut pointers: Vec<*mut c_void> = params
            .iter_mut()
            .map(|p| match p {
                Param::Pointer(ptr) => (ptr as *mut sys::CUdeviceptr).cast(),
                Param::Word(word) => (word as *mut u32).cast(),
            })
            .collect();
        let [bx, by, bz] = kernel.block_dims();
        if module.programmatic {
            // SAFETY: as below; the attribute array outlives the call.
            return unsafe {
                launch_programmatic(module, grid, [bx, by, bz], &mut pointers, stream)
            };
        }
        // SAFETY: the module is loaded in the current context; one pointer per parameter, in
        // declaration order, each to a value of the parameter's size (8-byte device pointers,
        // 4-byte scalars; the driver layer checked kinds and types against the kernel); the
        // buffers' bytes are live (this method's contract).
        let rc = unsafe {
            sys::cuLaunchKernel(
                module.function,
                grid[0],
                grid[1],
                grid[2],
                bx,
                by,
                bz,
                0,
                stream.cu_stream(),
                pointers.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        check(rc, "cuLaunchKernel")
    }

    unsafe fn gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: Bytes<'_, CuBlock>,
        b: Bytes<'_, CuBlock>,
        c: Bytes<'_, CuBlock>,
        stream: &CuStream,
    ) -> DriverResult<()> {
        self.check_joined(stream)?;
        if spec.m == 0 || spec.n == 0 {
            // C is empty: nothing to compute, and no cuBLAS needed.
            return Ok(());
        }
        // The legacy default stream never captures: no query for it.
        let capturing = !stream.cu_stream().is_null() && self.capture_id(stream)?.is_some();
        let workspace = {
            let mut slot = stream.workspace.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                *slot = Some(self.blas.workspaces.acquire()?);
            }
            let Some(slot) = slot.as_mut() else {
                unreachable!("set above")
            };
            if capturing {
                // A graph may replay this GEMM until the device drops: the workspace stays.
                slot.mark_captured();
            }
            slot.ptr()
        };
        let at = |bytes: Bytes<'_, CuBlock>| bytes.block.device_ptr() + bytes.offset as u64;
        // SAFETY: the context is current (the driver layer binds it); the operands are live
        // and hold what `spec` needs (this method's contract: lengths checked by the driver
        // layer); `workspace` is the stream's.
        unsafe {
            self.blas.gemm(
                spec,
                dtype,
                at(a),
                at(b),
                at(c),
                stream.cu_stream(),
                workspace,
            )
        }
    }
}
