//! The portable ops on CUDA: `fill` and `copy` as driver memset/memcpy, the others as kernels
//! written in PTX from one table, and host functions.
//!
//! PTX rather than NVRTC because it needs nothing but the driver at run time (no toolkit, no
//! `libnvrtc` on the user's machine), and because `mul.rn`/`add.rn` pin the rounding in the
//! source itself: PTX never contracts an instruction with an explicit rounding mode into a
//! fused multiply-add, so `axpy` rounds the product before the sum on every GPU, bit for bit
//! like the other backends. A new element-wise op is one row of [`KERNELS`]: ops find their
//! kernel by name ([`Lowering::of`]).

use std::{
    ffi::{CString, c_void},
    fmt::Write as _,
    sync::OnceLock,
};

use accel_graph_api::PortableOp;
use accel_graph_driver::{
    DriverResult,
    api::{DriverOps, HostFn, Region},
    native::{BLOCK, ElementArgs, Lowering, grid},
};
use cudarc::driver::{result, sys};

use crate::{
    CuBlock, CuStream, CudaDevice,
    capture::MODES,
    error::{check, from_cudarc},
};

/// One element-wise kernel: every thread `i < n` loads `y[i]` into `%f2` (and `x[i]` into
/// `%f3` when it reads `x`), the scalar is in `%f1`, and `body` leaves the new `y[i]` in `%f4`
/// (with `%f5` free for a temporary).
struct Kernel {
    op: &'static str,
    reads_x: bool,
    body: &'static str,
}

/// The kernels, all with the signature `(u64 y, f32 a, u64 x, u64 n)`.
const KERNELS: [Kernel; 4] = [
    Kernel {
        op: "add_scalar",
        reads_x: false,
        body: "add.rn.f32 %f4, %f2, %f1;",
    },
    Kernel {
        op: "scale",
        reads_x: false,
        body: "mul.rn.f32 %f4, %f2, %f1;",
    },
    Kernel {
        op: "axpy",
        reads_x: true,
        body: "mul.rn.f32 %f5, %f1, %f3;\n\tadd.rn.f32 %f4, %f2, %f5;",
    },
    Kernel {
        op: "mul",
        reads_x: true,
        body: "mul.rn.f32 %f4, %f2, %f3;",
    },
];

/// The PTX module of every kernel (ISA 6.0, `sm_50` and newer; the driver JIT-compiles it for
/// the device at load). Entry points are named `accel_graph_<op>`.
pub fn portable_ops_ptx() -> &'static str {
    static PTX: OnceLock<String> = OnceLock::new();
    PTX.get_or_init(|| {
        let mut ptx = String::from(".version 6.0\n.target sm_50\n.address_size 64\n");
        for k in &KERNELS {
            let load_x = if k.reads_x {
                "cvta.to.global.u64 %rd8, %rd7;\n\tadd.s64 %rd9, %rd8, %rd5;\n\tld.global.f32 %f3, [%rd9];"
            } else {
                ""
            };
            let _ = write!(
                ptx,
                "\n.visible .entry accel_graph_{op}(\n\
                 \t.param .u64 p_y,\n\t.param .f32 p_a,\n\t.param .u64 p_x,\n\t.param .u64 p_n\n)\n\
                 {{\n\
                 \t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\t.reg .f32 %f<6>;\n\t.reg .b64 %rd<10>;\n\
                 \tld.param.u64 %rd1, [p_y];\n\tld.param.f32 %f1, [p_a];\n\
                 \tld.param.u64 %rd7, [p_x];\n\tld.param.u64 %rd2, [p_n];\n\
                 \tmov.u32 %r1, %ctaid.x;\n\tmov.u32 %r2, %ntid.x;\n\tmov.u32 %r3, %tid.x;\n\
                 \tcvt.u64.u32 %rd3, %r3;\n\tmad.wide.u32 %rd3, %r1, %r2, %rd3;\n\
                 \tsetp.ge.u64 %p1, %rd3, %rd2;\n\t@%p1 bra $L_{op}_done;\n\
                 \tshl.b64 %rd5, %rd3, 2;\n\tcvta.to.global.u64 %rd4, %rd1;\n\
                 \tadd.s64 %rd6, %rd4, %rd5;\n\tld.global.f32 %f2, [%rd6];\n\
                 \t{load_x}\n\t{body}\n\tst.global.f32 [%rd6], %f4;\n\
                 $L_{op}_done:\n\tret;\n}}\n",
                op = k.op,
                body = k.body,
            );
        }
        ptx
    })
}

/// The loaded module and its functions (valid while the device's context lives).
pub(crate) struct Kernels {
    module: sys::CUmodule,
    functions: Vec<sys::CUfunction>,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread whose
// current context is the one they were loaded in (every call binds it first).
unsafe impl Send for Kernels {}
// SAFETY: as above; the handles are never mutated after loading.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Loads the module into the current context, looks up its functions, and launches each
    /// once on no element so that the module is fully loaded before any capture (lazy loading
    /// inside a capture is an implicit synchronization).
    ///
    /// Another instance of the process may be capturing meanwhile (CUDA's global mode spans
    /// the process): everything here runs with this thread's capture mode relaxed, on a scratch
    /// stream of its own, and waits for that stream only — a device-wide synchronization would
    /// break every capture in progress.
    pub(crate) fn load() -> DriverResult<Self> {
        MODES.relaxed(Self::load_relaxed)
    }

    fn load_relaxed() -> DriverResult<Self> {
        let image = CString::new(portable_ops_ptx()).unwrap_or_default();
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
            .map_err(|e| from_cudarc(e, "cuModuleLoadData"))?;
        let mut kernels = Kernels {
            module,
            functions: Vec::with_capacity(KERNELS.len()),
        };
        for k in &KERNELS {
            let name = CString::new(format!("accel_graph_{}", k.op)).unwrap_or_default();
            // SAFETY: `module` is loaded; `name` outlives the call.
            let f = unsafe { result::module::get_function(module, name) }
                .map_err(|e| from_cudarc(e, "cuModuleGetFunction"))?;
            kernels.functions.push(f);
        }
        let scratch = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| from_cudarc(e, "cuStreamCreate"))?;
        let warmed = kernels.functions.iter().try_for_each(|&f| {
            // SAFETY: n = 0, so no thread touches memory.
            unsafe { launch(f, 0, 0, 0.0, 0, scratch) }
        });
        // SAFETY: the scratch stream is ours and alive.
        let synced = check(
            unsafe { sys::cuStreamSynchronize(scratch) },
            "cuStreamSynchronize",
        );
        // SAFETY: destroyed once, after its work finished.
        let _ = unsafe { result::stream::destroy(scratch) };
        warmed.and(synced)?;
        Ok(kernels)
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once; failures (a context
        // already torn down at exit) leave nothing to clean up.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// Launches `f` over `n` elements of `y` (and `x`) with scalar `a` on `stream`.
///
/// # Safety
/// `y` (and `x`, for a kernel that reads it) must be device memory of at least `n` `f32`s.
unsafe fn launch(
    f: sys::CUfunction,
    y: sys::CUdeviceptr,
    x: sys::CUdeviceptr,
    a: f32,
    n: usize,
    stream: sys::CUstream,
) -> DriverResult<()> {
    let grid = grid(n)?;
    let mut args = ElementArgs::new(y, a, x, n);
    // SAFETY: the arguments match `(u64 y, f32 a, u64 x, u64 n)` and outlive the call; the
    // caller guarantees the memory.
    unsafe {
        result::launch_kernel(
            f,
            (grid, 1, 1),
            (BLOCK, 1, 1),
            0,
            stream,
            &mut args.pointers(),
        )
    }
    .map_err(|e| from_cudarc(e, "cuLaunchKernel"))
}

impl DriverOps for CudaDevice {
    unsafe fn launch_op(
        &self,
        op: PortableOp<Region<'_, CuBlock>>,
        stream: &CuStream,
    ) -> DriverResult<()> {
        self.check_joined(stream)?;
        let s = stream.cu_stream();
        let scalar = op.scalar();
        let (out, input) = op.operands();
        // A region's elements start `offset` elements into its block.
        let out_ptr = out.block.device_ptr() + out.byte_offset() as u64;
        let input_ptr = input.map_or(0, |x| x.block.device_ptr() + x.byte_offset() as u64);
        match Lowering::of(&op, KERNELS.iter().map(|k| k.op))? {
            Lowering::Memset => {
                // SAFETY: the block is live and holds the region's 32-bit elements (this
                // method's contract).
                let rc = unsafe { sys::cuMemsetD32Async(out_ptr, scalar.to_bits(), out.len, s) };
                check(rc, "cuMemsetD32Async")
            }
            Lowering::Memcpy => {
                // SAFETY: both blocks are live and hold `len` elements (this method's
                // contract: regions lie inside their blocks, operand lengths are equal).
                let rc =
                    unsafe { sys::cuMemcpyDtoDAsync_v2(out_ptr, input_ptr, out.num_bytes(), s) };
                check(rc, "cuMemcpyDtoDAsync")
            }
            Lowering::Kernel(row) => {
                // SAFETY: the operands are live and hold `out.len` elements (this method's
                // contract: regions lie inside their blocks, operand lengths are equal).
                unsafe {
                    launch(
                        self.kernels.functions[row],
                        out_ptr,
                        input_ptr,
                        scalar,
                        out.len,
                        s,
                    )
                }
            }
        }
    }

    unsafe fn launch_host(
        &self,
        stream: &CuStream,
        func: HostFn,
        data: *mut c_void,
    ) -> DriverResult<()> {
        self.check_joined(stream)?;
        // SAFETY: the caller keeps `data` valid while the function can run.
        let rc = unsafe { sys::cuLaunchHostFunc(stream.cu_stream(), Some(func), data) };
        check(rc, "cuLaunchHostFunc")
    }
}
