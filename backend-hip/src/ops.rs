//! The portable ops on HIP: `fill` and `copy` as the runtime's memset/memcpy, the others as
//! kernels generated from one table, and host functions. The ops' kernels and GEMM's
//! (`gemm.rs`) are one program, the built-in kernels, compiled with hiprtc (or read from the
//! kernel cache, `code_cache.rs`) and loaded when the device opens.
//!
//! The kernels keep to the subset HIP and CUDA share (`blockIdx`, `blockDim`, `threadIdx`,
//! `__fadd_rn`, `__fmul_rn`), so the HIP-on-CUDA shim compiles them unchanged. No fused
//! multiply-add, so `axpy` rounds the product before the sum, bit for bit like the other
//! backends: CUDA's intrinsics are never fused, and on AMD targets, where ROCm defines them as
//! plain `*` and `+`, the program is compiled with `-ffp-contract=off`
//! ([`rtc::unfused_options`]). A new element-wise op is one row of [`KERNELS`]: ops find
//! their kernel by name ([`Lowering::of`]).

use std::{
    ffi::{CStr, CString, c_int, c_void},
    fmt::Write as _,
    sync::OnceLock,
};

use accel_graph_api::{FloatType, Gemm, GraphError, PortableOp};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverOps, HostFn, Region},
    native::{BLOCK, ElementArgs, Lowering, grid},
};

use crate::{
    HBlock, HStream, HipDevice,
    capture::MODES,
    code_cache::{CodeKey, Target},
    error::{check, error},
    ffi, gemm,
    module::{Module, ModuleError},
    rtc,
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

/// The program of the built-in kernels: the portable ops' and GEMM's.
fn builtin_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| [portable_ops_source(), gemm::SOURCE].concat())
}

/// The loaded built-in kernels: the portable ops' (in the order of [`KERNELS`]) and GEMM's
/// (in the order of [`gemm::ENTRY_POINTS`]).
pub(crate) struct Kernels {
    ops: Vec<ffi::hipFunction_t>,
    gemm: [ffi::hipFunction_t; 3],
    /// Last: the functions above belong to it.
    _module: Module,
}

// SAFETY: function handles are process-wide runtime handles usable from any thread (every call
// binds the device first); they are never mutated after loading, and the module they belong
// to lives as long as they do.
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Compiles (once per process and device architecture, or read from the kernel cache) and
    /// loads the built-in kernels on `device`, current on this thread, and launches each once
    /// on no element on a scratch stream, so that everything is resident before any capture.
    /// All in relaxed capture mode: another instance's capture may be running, and none of
    /// this is its work.
    pub(crate) fn load(device: c_int, target: &Target) -> DriverResult<Self> {
        let options = rtc::unfused_options(&target.arch);
        MODES.relaxed(|| {
            let key = CodeKey::new(target, builtin_source(), "accel_graph_builtin", &options);
            let program = (builtin_source(), "accel_graph_builtin.hip", &options[..]);
            let module = Module::compile_and_load(&key, &target.arch, program, device)
                .map_err(ModuleError::into_driver_error)?;
            let function = |name: &CStr| {
                module
                    .function(name)
                    .map_err(|err| error(err, "hipModuleGetFunction"))
            };
            let ops = KERNELS
                .iter()
                .map(|k| {
                    let name = CString::new(format!("accel_graph_{}", k.op)).unwrap_or_default();
                    function(&name)
                })
                .collect::<DriverResult<Vec<_>>>()?;
            let gemm = [
                function(gemm::ENTRY_POINTS[0])?,
                function(gemm::ENTRY_POINTS[1])?,
                function(gemm::ENTRY_POINTS[2])?,
            ];
            let scratch = HStream::create()?;
            for &f in &ops {
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
            let empty = Gemm::new(0, 0, 0);
            let none = HBlock::null();
            let nothing = Bytes {
                block: &none,
                offset: 0,
                len: 0,
            };
            for &f in &gemm {
                // SAFETY: an empty product has no tile: no thread touches memory.
                unsafe { gemm::launch(f, &empty, nothing, nothing, nothing, &scratch) }?;
            }
            check(
                // SAFETY: live stream (destroyed when `scratch` drops).
                unsafe { ffi::hipStreamSynchronize(scratch.raw()) },
                "hipStreamSynchronize",
            )?;
            Ok(Kernels {
                ops,
                gemm,
                _module: module,
            })
        })
    }

    /// GEMM's entry point for `dtype`.
    pub(crate) fn gemm(&self, dtype: FloatType) -> ffi::hipFunction_t {
        self.gemm[gemm::index(dtype)]
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
                    ffi::hipMemsetD32Async(out_ptr, scalar.to_bits() as i32, out.len, stream.raw())
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
                let Some(&f) = self.kernels.ops.get(row) else {
                    return Err(error(
                        ffi::hipError_t::hipErrorInvalidDeviceFunction,
                        &format!("{} has no loaded kernel", op.name()),
                    ));
                };
                // SAFETY: the operands are live and hold `out.len` elements (this method's
                // contract: regions lie inside their blocks, operand lengths are equal).
                unsafe { launch(f, out_ptr, input_ptr, scalar, out.len, stream) }
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

    /// Disassembles an AMDGPU code object (stdin) for the ISA named by argv[1], with ROCm's
    /// code-object manager (comgr, which hiprtc itself compiles through).
    const DISASSEMBLER: &str = r#"
#include <amd_comgr.h>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>
#define OK(call) do { if ((call) != AMD_COMGR_STATUS_SUCCESS) { std::fprintf(stderr, "%s failed\n", #call); return 1; } } while (0)
int main(int argc, char** argv) {
    if (argc != 2) return 2;
    std::string code((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    amd_comgr_data_t data, text;
    amd_comgr_data_set_t in, out;
    amd_comgr_action_info_t info;
    OK(amd_comgr_create_data(AMD_COMGR_DATA_KIND_EXECUTABLE, &data));
    OK(amd_comgr_set_data(data, code.size(), code.data()));
    OK(amd_comgr_set_data_name(data, "code.co"));
    OK(amd_comgr_create_data_set(&in));
    OK(amd_comgr_create_data_set(&out));
    OK(amd_comgr_data_set_add(in, data));
    OK(amd_comgr_create_action_info(&info));
    OK(amd_comgr_action_info_set_isa_name(info, argv[1]));
    OK(amd_comgr_do_action(AMD_COMGR_ACTION_DISASSEMBLE_EXECUTABLE_TO_SOURCE, info, in, out));
    OK(amd_comgr_action_data_get_data(out, AMD_COMGR_DATA_KIND_SOURCE, 0, &text));
    size_t size = 0;
    OK(amd_comgr_get_data(text, &size, nullptr));
    std::vector<char> buf(size);
    OK(amd_comgr_get_data(text, &size, buf.data()));
    return std::fwrite(buf.data(), 1, size, stdout) == size ? 0 : 3;
}
"#;

    /// The gfx90a disassembly of `code`.
    fn disassemble(code: &[u8]) -> String {
        use std::{io::Write as _, process::Command};
        let dir = std::env::temp_dir().join(format!("accel-graph-hip-dis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let (source, binary) = (dir.join("dis.cpp"), dir.join("dis"));
        std::fs::write(&source, DISASSEMBLER).expect("write the disassembler");
        let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
        let built = Command::new(&compiler)
            .arg("-o")
            .arg(&binary)
            .arg(&source)
            .arg("-lamd_comgr")
            .output()
            .unwrap_or_else(|e| panic!("running {compiler}: {e}"));
        assert!(
            built.status.success(),
            "building the disassembler (needs amd_comgr.h: Debian's libamd-comgr-dev, which \
             libamdhip64-dev depends on):\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let mut child = Command::new(&binary)
            .arg("amdgcn-amd-amdhsa--gfx90a")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run the disassembler");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(code)
            .expect("write the code object");
        let out = child.wait_with_output().expect("the disassembler ran");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "disassembling failed: {:?}",
            out.status
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The fused single-precision multiply-adds of a disassembly (`v_fma_f32`, `v_fmac_f32`,
    /// `v_mac_f32`, `v_mad_f32`, their packed and literal forms).
    fn fused_f32_ops(disassembly: &str) -> Vec<&str> {
        disassembly
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|op| {
                op.starts_with("v_")
                    && op.contains("f32")
                    && ["fma", "mac", "mad"].iter().any(|f| op.contains(f))
            })
            .collect()
    }

    #[test]
    fn the_builtin_kernels_compile_with_rocms_hiprtc_and_never_fuse() {
        // ROCm's own compiler (through comgr), for an AMD target named explicitly: this
        // machine may have no device. NVRTC compiles the same source under the HIP-on-CUDA
        // shim, on the GPU machine.
        let mut options = rtc::unfused_options("gfx90a");
        assert_eq!(options, ["-ffp-contract=off"]);
        options.push(rtc::tests::TEST_TARGET.to_owned());
        let code = rtc::compile(builtin_source(), "accel_graph_builtin.hip", &options)
            .unwrap_or_else(|e| panic!("{e}"));
        let names = gemm::ENTRY_POINTS.iter().map(|n| n.to_bytes());
        for name in names.chain(KERNELS.iter().map(|k| k.op.as_bytes())) {
            assert!(
                code.windows(name.len()).any(|w| w == name),
                "{} is not in the code object",
                String::from_utf8_lossy(name)
            );
        }
        let disassembly = disassemble(&code);
        assert!(
            disassembly.contains("v_mul_f32") && disassembly.contains("v_add_f32"),
            "{disassembly}"
        );
        assert_eq!(fused_f32_ops(&disassembly), Vec::<&str>::new());
        // Without the option, ROCm fuses `axpy`'s product and sum: the check above sees it.
        let fused = rtc::compile(
            builtin_source(),
            "accel_graph_builtin.hip",
            &[rtc::tests::TEST_TARGET.to_owned()],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!fused_f32_ops(&disassemble(&fused)).is_empty());
        assert!(rtc::unfused_options("sm_90").is_empty());
    }
}
