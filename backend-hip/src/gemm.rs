//! GEMM on HIP: a tiled kernel of the backend's own, compiled with hiprtc with the portable
//! ops (see `ops.rs`), one entry point per element type.
//!
//! Why a kernel and not hipBLAS: this build links only `libamdhip64` (hipBLAS has no
//! development package next to Debian's HIP 5.2, and under the HIP-on-CUDA shim it would have
//! to be faked), and a kernel of our own can promise more than a library: every element is
//! summed in `f32` in order of `k`, each product and sum rounded (`__fmul_rn`, `__fadd_rn`: no
//! fused multiply-add), then `alpha · sum + beta · c`, rounded once to the element type — the
//! operations of [`gemm_reference`](accel_graph_api::gemm_reference), in its order, so results
//! equal the reference bit for bit whatever the operands, not only within a tolerance.
//!
//! The kernel: 256 threads per block compute a 64×64 tile of `C`, each a 4×4 grid of elements
//! 16 apart (so a warp's shared-memory reads are broadcasts or consecutive words); `op(A)` and
//! `op(B)` are staged through shared memory 16 values of `k` at a time, converted to `f32`, the
//! loads laid out along each operand's contiguous dimension (transposed or not). Grids are
//! capped at 65 535 blocks per dimension and the kernel strides over tiles and batches, so any
//! shape runs. 16-bit values travel as their bits and are converted by hand (exactly to `f32`,
//! round-to-nearest-even back, NaN and infinity as the `half` crate converts them), in the
//! subset of C++ that hiprtc and NVRTC share.

use std::ffi::c_void;

use accel_graph_api::{FloatType, Gemm};
use accel_graph_driver::{DriverResult, api::Bytes};

use crate::{HBlock, HStream, error::check, ffi};

/// Threads per block.
pub(crate) const THREADS: u32 = 256;

/// The largest grid dimension launched (the kernel strides over the rest).
const MAX_GRID: u64 = 65_535;

/// The HIP C++ source of the GEMM kernels (`accel_graph_gemm_f32`, `..._bf16`, `..._f16`),
/// all with the parameters of [`launch`].
pub(crate) const SOURCE: &str = r#"
// GEMM kernels of accel-graph (see backend-hip/src/gemm.rs).
struct ag_bf16 { unsigned short bits; };
struct ag_f16 { unsigned short bits; };

__device__ float ag_to_f32(float x) { return x; }
__device__ float ag_to_f32(ag_bf16 x) { return __uint_as_float((unsigned)x.bits << 16); }
__device__ float ag_to_f32(ag_f16 x) {
    unsigned sign = ((unsigned)x.bits & 0x8000u) << 16;
    unsigned exp = ((unsigned)x.bits >> 10) & 0x1fu;
    unsigned man = (unsigned)x.bits & 0x3ffu;
    if (exp == 0x1fu) {
        // Infinity, or NaN with its payload kept and made quiet.
        return __uint_as_float(sign | 0x7f800000u | (man << 13) | (man != 0u ? 0x00400000u : 0u));
    }
    if (exp == 0u) {
        // Zero or subnormal: man * 2^-24, exact.
        float v = (float)man * 5.9604644775390625e-8f;
        return sign != 0u ? -v : v;
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ void ag_store(float* p, float v) { *p = v; }
__device__ void ag_store(ag_bf16* p, float v) {
    unsigned x = __float_as_uint(v);
    unsigned short out;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        out = (unsigned short)((x >> 16) | 0x0040u);
    } else {
        unsigned r = x >> 16;
        if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) r += 1u;
        out = (unsigned short)r;
    }
    p->bits = out;
}
__device__ void ag_store(ag_f16* p, float v) {
    unsigned x = __float_as_uint(v);
    unsigned sign = x & 0x80000000u, exp = x & 0x7f800000u, man = x & 0x007fffffu;
    unsigned hsign = sign >> 16;
    unsigned out;
    if (exp == 0x7f800000u) {
        out = hsign | 0x7c00u | (man != 0u ? 0x0200u : 0u) | (man >> 13);
    } else {
        int hexp = (int)(exp >> 23) - 127 + 15;
        if (hexp >= 0x1f) {
            out = hsign | 0x7c00u;
        } else if (hexp <= 0) {
            if (14 - hexp > 24) {
                out = hsign;
            } else {
                unsigned m = man | 0x00800000u;
                unsigned hman = m >> (14 - hexp);
                unsigned round = 1u << (13 - hexp);
                if ((m & round) != 0u && (m & (3u * round - 1u)) != 0u) hman += 1u;
                out = hsign | hman;
            }
        } else {
            out = hsign | ((unsigned)hexp << 10) | (man >> 13);
            if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) out += 1u;
        }
    }
    p->bits = (unsigned short)out;
}

#define AG_TM 64
#define AG_TN 64
#define AG_TK 16

template <typename T>
__device__ void ag_gemm(const T* a, const T* b, T* c, unsigned long long m,
                        unsigned long long n, unsigned long long k, unsigned long long batch,
                        unsigned flags, float alpha, float beta) {
    // One column of padding: the tile loads write along k without bank conflicts.
    __shared__ float as[AG_TK][AG_TM + 1];
    __shared__ float bs[AG_TK][AG_TN + 1];
    const unsigned tid = threadIdx.x, tx = tid % 16u, ty = tid / 16u;
    const bool ta = (flags & 1u) != 0u, tb = (flags & 2u) != 0u;
    const unsigned long long tiles_m = (m + AG_TM - 1) / AG_TM, tiles_n = (n + AG_TN - 1) / AG_TN;
    for (unsigned long long t = blockIdx.z; t < batch; t += gridDim.z) {
        const T* at = a + t * m * k;
        const T* bt = b + t * k * n;
        T* ct = c + t * m * n;
        for (unsigned long long tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
            for (unsigned long long tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
                const unsigned long long m0 = tm * AG_TM, n0 = tn * AG_TN;
                float acc[4][4];
                for (int i = 0; i < 4; ++i)
                    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
                for (unsigned long long p0 = 0; p0 < k; p0 += AG_TK) {
                    // Stage op(A)[m0.., p0..] and op(B)[p0.., n0..], consecutive threads
                    // reading consecutive addresses of the stored matrices.
                    for (unsigned r = 0; r < 4u; ++r) {
                        const unsigned e = tid + 256u * r;
                        // op(A)[i][p]: A[i][p] (m x k), or A[p][i] (k x m) transposed.
                        const unsigned ai = ta ? e % AG_TM : e / AG_TK;
                        const unsigned ap = ta ? e / AG_TM : e % AG_TK;
                        const unsigned long long gi = m0 + ai, gpa = p0 + ap;
                        as[ap][ai] = (gi < m && gpa < k)
                            ? ag_to_f32(at[ta ? gpa * m + gi : gi * k + gpa]) : 0.0f;
                        // op(B)[p][j]: B[p][j] (k x n), or B[j][p] (n x k) transposed.
                        const unsigned bj = tb ? e / AG_TK : e % AG_TN;
                        const unsigned bp = tb ? e % AG_TK : e / AG_TN;
                        const unsigned long long gj = n0 + bj, gpb = p0 + bp;
                        bs[bp][bj] = (gpb < k && gj < n)
                            ? ag_to_f32(bt[tb ? gj * k + gpb : gpb * n + gj]) : 0.0f;
                    }
                    __syncthreads();
                    // Only the tile's values of k: the sums see exactly the reference's terms.
                    const unsigned kk = (k - p0 < AG_TK) ? (unsigned)(k - p0) : AG_TK;
                    for (unsigned p = 0; p < kk; ++p) {
                        float av[4], bv[4];
                        for (int q = 0; q < 4; ++q) {
                            av[q] = as[p][ty + 16u * q];
                            bv[q] = bs[p][tx + 16u * q];
                        }
                        for (int i = 0; i < 4; ++i)
                            for (int j = 0; j < 4; ++j)
                                acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(av[i], bv[j]));
                    }
                    __syncthreads();
                }
                for (int i = 0; i < 4; ++i) {
                    const unsigned long long row = m0 + ty + 16u * i;
                    for (int j = 0; j < 4; ++j) {
                        const unsigned long long col = n0 + tx + 16u * j;
                        if (row < m && col < n) {
                            T* out = ct + row * n + col;
                            float v = __fmul_rn(alpha, acc[i][j]);
                            // beta == 0: C is only written (its old value, even NaN, unread).
                            if (beta != 0.0f) v = __fadd_rn(v, __fmul_rn(beta, ag_to_f32(*out)));
                            ag_store(out, v);
                        }
                    }
                }
            }
        }
    }
}

#define AG_GEMM_ENTRY(NAME, T)                                                              \
    extern "C" __global__ void NAME(const T* a, const T* b, T* c, unsigned long long m,     \
                                    unsigned long long n, unsigned long long k,             \
                                    unsigned long long batch, unsigned flags, float alpha,  \
                                    float beta) {                                           \
        ag_gemm<T>(a, b, c, m, n, k, batch, flags, alpha, beta);                            \
    }
AG_GEMM_ENTRY(accel_graph_gemm_f32, float)
AG_GEMM_ENTRY(accel_graph_gemm_bf16, ag_bf16)
AG_GEMM_ENTRY(accel_graph_gemm_f16, ag_f16)
"#;

/// The entry points, in the order of [`index`].
pub(crate) const ENTRY_POINTS: [&std::ffi::CStr; 3] = [
    c"accel_graph_gemm_f32",
    c"accel_graph_gemm_bf16",
    c"accel_graph_gemm_f16",
];

/// The index of `dtype`'s entry point in [`ENTRY_POINTS`].
pub(crate) fn index(dtype: FloatType) -> usize {
    match dtype {
        FloatType::F32 => 0,
        FloatType::Bf16 => 1,
        FloatType::F16 => 2,
    }
}

/// The grid of `spec`: a block per 64×64 tile of `C` and per batch, each dimension capped
/// (the kernel strides over what a capped grid leaves).
pub(crate) fn grid(spec: &Gemm) -> [u32; 3] {
    let dim = |count: u64| count.clamp(1, MAX_GRID) as u32;
    [
        dim((spec.n as u64).div_ceil(64)),
        dim((spec.m as u64).div_ceil(64)),
        dim(spec.batch as u64),
    ]
}

/// The flags argument: bit 0 `transpose_a`, bit 1 `transpose_b`.
pub(crate) fn flags(spec: &Gemm) -> u32 {
    u32::from(spec.transpose_a) | (u32::from(spec.transpose_b) << 1)
}

/// Launches entry point `f` (of `spec`'s element type) over `spec`'s grid on `stream`.
///
/// # Safety
/// The operands' bytes lie inside their live blocks and hold the elements `spec` needs, in
/// the element type of `f`.
pub(crate) unsafe fn launch(
    f: ffi::hipFunction_t,
    spec: &Gemm,
    a: Bytes<'_, HBlock>,
    b: Bytes<'_, HBlock>,
    c: Bytes<'_, HBlock>,
    stream: &HStream,
) -> DriverResult<()> {
    let at = |x: Bytes<'_, HBlock>| x.block.device_ptr().wrapping_byte_add(x.offset);
    let (mut pa, mut pb, mut pc) = (at(a), at(b), at(c));
    let (mut m, mut n, mut k, mut batch) = (
        spec.m as u64,
        spec.n as u64,
        spec.k as u64,
        spec.batch as u64,
    );
    let (mut flags, mut alpha, mut beta) = (flags(spec), spec.alpha, spec.beta);
    let mut params: [*mut c_void; 10] = [
        (&raw mut pa).cast(),
        (&raw mut pb).cast(),
        (&raw mut pc).cast(),
        (&raw mut m).cast(),
        (&raw mut n).cast(),
        (&raw mut k).cast(),
        (&raw mut batch).cast(),
        (&raw mut flags).cast(),
        (&raw mut alpha).cast(),
        (&raw mut beta).cast(),
    ];
    let [gx, gy, gz] = grid(spec);
    // SAFETY: `params` point at values of the kernel's parameter types, in order, alive for
    // the call (the runtime copies them); the caller guarantees the memory.
    let err = unsafe {
        ffi::hipModuleLaunchKernel(
            f,
            gx,
            gy,
            gz,
            THREADS,
            1,
            1,
            0,
            stream.raw(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check(err, "hipModuleLaunchKernel")
}

#[cfg(test)]
mod tests {
    //! The kernel's logic, checked on the host: the source compiled by the system's C++
    //! compiler with a small stand-in for the device (blocks run one after another, each
    //! block's 256 threads as fibers that take turns between `__syncthreads`, IEEE `f32`
    //! arithmetic with no contraction), against `gemm_reference` bit for bit on every element
    //! type, shape option and awkward value; and the source compiled by ROCm's hiprtc.

    use std::{path::PathBuf, process::Command};

    use accel_graph_api::{
        FloatElement, gemm_reference,
        half::{bf16, f16},
    };

    use super::*;

    /// The device stand-in: what the kernel source uses of CUDA/HIP, for a C++20 host
    /// compiler.
    const HOST_PRELUDE: &str = r#"
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>
#include <ucontext.h>
struct ag_dim3 { unsigned x, y, z; };
static ag_dim3 threadIdx, blockIdx, blockDim, gridDim;
// A block's threads are fibers on one OS thread: each runs until its next __syncthreads (or
// its end), then the next one runs; a round of all of them is one barrier.
static ucontext_t ag_scheduler;
static ucontext_t ag_fibers[256];
static bool ag_finished[256];
static unsigned ag_current;
static std::function<void()> ag_thread_body;
#define __device__
#define __global__
#define __shared__ static
static void __syncthreads() { swapcontext(&ag_fibers[ag_current], &ag_scheduler); }
static void ag_fiber_entry() {
    ag_thread_body();
    ag_finished[ag_current] = true;
    swapcontext(&ag_fibers[ag_current], &ag_scheduler);
}
// Runs `body` as every thread of one block.
static void ag_run_block(std::function<void()> body) {
    static std::vector<char> stacks(256 * 65536);
    ag_thread_body = std::move(body);
    for (unsigned t = 0; t < 256; ++t) {
        getcontext(&ag_fibers[t]);
        ag_fibers[t].uc_stack.ss_sp = &stacks[t * 65536];
        ag_fibers[t].uc_stack.ss_size = 65536;
        ag_fibers[t].uc_link = nullptr;
        makecontext(&ag_fibers[t], ag_fiber_entry, 0);
        ag_finished[t] = false;
    }
    for (bool running = true; running;) {
        running = false;
        for (unsigned t = 0; t < 256; ++t) {
            if (ag_finished[t]) continue;
            running = true;
            ag_current = t;
            threadIdx = {t, 0, 0};
            swapcontext(&ag_scheduler, &ag_fibers[t]);
        }
    }
}
static float __fadd_rn(float a, float b) { return a + b; }
static float __fmul_rn(float a, float b) { return a * b; }
static float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
"#;

    /// Reads requests from stdin until its end, each a `u64` saying which: 0, a launch (a
    /// header of `u64` m, n, k, batch, flags, type, grid x, y, z and `f32` alpha, beta, then
    /// A, B and C's bytes), answered with C's bytes; 1, conversions (`u64` type, 1 for bf16 or
    /// 2 for f16, `u64` count, then `count` `f32`s), answered with each `f32` stored as the
    /// type, then each input's low 16 bits read as the type and widened to `f32`.
    const HOST_MAIN: &str = r#"
template <typename T>
static bool run(const std::vector<uint64_t>& h, float alpha, float beta) {
    uint64_t m = h[0], n = h[1], k = h[2], batch = h[3];
    std::vector<T> a(batch * m * k), b(batch * k * n), c(batch * m * n);
    if (fread(a.data(), sizeof(T), a.size(), stdin) != a.size()) return false;
    if (fread(b.data(), sizeof(T), b.size(), stdin) != b.size()) return false;
    if (fread(c.data(), sizeof(T), c.size(), stdin) != c.size()) return false;
    gridDim = {(unsigned)h[6], (unsigned)h[7], (unsigned)h[8]};
    blockDim = {256, 1, 1};
    for (unsigned z = 0; z < gridDim.z; ++z)
        for (unsigned y = 0; y < gridDim.y; ++y)
            for (unsigned x = 0; x < gridDim.x; ++x) {
                blockIdx = {x, y, z};
                ag_run_block([&] {
                    ag_gemm<T>(a.data(), b.data(), c.data(), m, n, k, batch, (unsigned)h[4],
                               alpha, beta);
                });
            }
    return fwrite(c.data(), sizeof(T), c.size(), stdout) == c.size();
}
template <typename T>
static bool convert(uint64_t count) {
    // Each f32 stored as T, then each input's low 16 bits read as T and widened to f32.
    std::vector<uint32_t> in(count);
    if (fread(in.data(), 4, count, stdin) != count) return false;
    std::vector<T> narrow(count);
    std::vector<uint32_t> wide(count);
    for (uint64_t i = 0; i < count; ++i) {
        ag_store(&narrow[i], __uint_as_float(in[i]));
        wide[i] = __float_as_uint(ag_to_f32(T{(unsigned short)(in[i] & 0xffffu)}));
    }
    return fwrite(narrow.data(), sizeof(T), count, stdout) == count
        && fwrite(wide.data(), 4, count, stdout) == count;
}
int main() {
    uint64_t what;
    while (fread(&what, 8, 1, stdin) == 1) {
        bool ok;
        if (what == 0) {
            std::vector<uint64_t> h(9);
            float s[2];
            if (fread(h.data(), 8, 9, stdin) != 9 || fread(s, 4, 2, stdin) != 2) return 2;
            ok = h[5] == 0 ? run<float>(h, s[0], s[1])
               : h[5] == 1 ? run<ag_bf16>(h, s[0], s[1])
                           : run<ag_f16>(h, s[0], s[1]);
        } else {
            uint64_t type, count;
            if (fread(&type, 8, 1, stdin) != 1 || fread(&count, 8, 1, stdin) != 1) return 2;
            ok = type == 1 ? convert<ag_bf16>(count) : convert<ag_f16>(count);
        }
        if (!ok) return 3;
    }
    return 0;
}
"#;

    /// The kernel built for the host, in a scratch directory removed on drop.
    struct HostKernel {
        dir: PathBuf,
    }

    impl HostKernel {
        fn build() -> Self {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "accel-graph-hip-gemm-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).expect("scratch directory");
            let kernel = HostKernel { dir };
            let source = kernel.dir.join("gemm_host.cpp");
            std::fs::write(&source, [HOST_PRELUDE, SOURCE, HOST_MAIN].concat())
                .expect("write the host build");
            let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
            let out = Command::new(&compiler)
                .args(["-std=c++17", "-O1", "-ffp-contract=off", "-o"])
                .arg(kernel.binary())
                .arg(&source)
                .output()
                .unwrap_or_else(|e| panic!("running {compiler} (a C++17 compiler): {e}"));
            assert!(
                out.status.success(),
                "the kernel source does not build on the host:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            kernel
        }

        fn binary(&self) -> PathBuf {
            self.dir.join("gemm_host")
        }

        /// Runs the launches `input` holds; C of each, in order.
        fn run(&self, input: &[u8]) -> Vec<u8> {
            use std::io::Write as _;
            let mut child = Command::new(self.binary())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("run the host build");
            let mut stdin = child.stdin.take().expect("stdin");
            // Written from another thread: the child's output fills its pipe meanwhile.
            let input = input.to_vec();
            let writer = std::thread::spawn(move || stdin.write_all(&input));
            let out = child.wait_with_output().expect("the host build ran");
            writer
                .join()
                .expect("the writer thread")
                .expect("write the launches");
            assert!(
                out.status.success(),
                "the host build failed: {:?}",
                out.status
            );
            out.stdout
        }
    }

    impl Drop for HostKernel {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// One launch for the host build: `spec` over `grid` on operands of `T`.
    fn encode<T: FloatElement>(spec: &Gemm, grid: [u32; 3], a: &[T], b: &[T], c: &[T]) -> Vec<u8> {
        let mut input = 0u64.to_le_bytes().to_vec();
        for v in [
            spec.m as u64,
            spec.n as u64,
            spec.k as u64,
            spec.batch as u64,
            u64::from(flags(spec)),
            index(T::DTYPE) as u64,
            u64::from(grid[0]),
            u64::from(grid[1]),
            u64::from(grid[2]),
        ] {
            input.extend_from_slice(&v.to_le_bytes());
        }
        input.extend_from_slice(&spec.alpha.to_le_bytes());
        input.extend_from_slice(&spec.beta.to_le_bytes());
        for operand in [a, b, c] {
            input.extend_from_slice(bytemuck::cast_slice(operand));
        }
        input
    }

    /// A seeded stream of awkward `f32`s: wide magnitudes, both signs, zeros, values that
    /// round to 16-bit subnormals, overflow and ties.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                match state % 11 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => unit * 1e-6,     // f16 subnormals
                    3 => unit * 70_000.0, // past f16's range
                    4 => (state % 9) as f32 - 4.0,
                    5 => 1.0 + (1.0 / 1024.0) * 0.5, // a tie for f16
                    _ => unit * 8.0,
                }
            })
            .collect()
    }

    /// Whether `got` equals `want` bit for bit (any NaN for a NaN); the first difference.
    fn same<T: FloatElement>(got: &[T], want: &[T]) -> Result<(), String> {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let (gf, wf) = (g.to_f32(), w.to_f32());
            let same_bits = bytemuck::bytes_of(g) == bytemuck::bytes_of(w);
            if !(same_bits || (gf.is_nan() && wf.is_nan())) {
                return Err(format!(
                    "element {i}: {gf:e} ({g:?}), reference {wf:e} ({w:?})"
                ));
            }
        }
        Ok(())
    }

    /// Launches of `spec` on `T` operands and the reference's result of each: over the
    /// launch's own grid, and over smaller ones that make the kernel stride over tiles and
    /// batches.
    fn cases<T: FloatElement>(spec: &Gemm, seed: u64) -> Vec<(String, Vec<u8>, Vec<T>)> {
        let len = |r: accel_graph_api::Result<usize>| r.expect("sizes");
        let to_t = |v: Vec<f32>| v.into_iter().map(T::from_f32).collect::<Vec<T>>();
        let a = to_t(values(len(spec.a_len()), seed));
        let b = to_t(values(len(spec.b_len()), seed + 1));
        let mut c = to_t(values(len(spec.c_len()), seed + 2));
        if spec.beta == 0.0 {
            // C's old values must not matter, NaN included.
            c.iter_mut()
                .step_by(3)
                .for_each(|x| *x = T::from_f32(f32::NAN));
        }
        let mut want = c.clone();
        gemm_reference(spec, &a, &b, &mut want);
        let own = grid(spec);
        let mut grids = vec![own];
        if own != [1, 1, 1] {
            grids.push([1, 1, 1]);
        }
        if spec.batch > 1 {
            grids.push([2, 1, 2]);
        }
        grids
            .into_iter()
            .map(|g| {
                let name = format!("{} {spec:?} over grid {g:?}", T::DTYPE);
                (name, encode(spec, g, &a, &b, &c), want.clone())
            })
            .collect()
    }

    /// Runs `cases` through the host build and checks each result.
    fn check<T: FloatElement>(kernel: &HostKernel, cases: &[(String, Vec<u8>, Vec<T>)]) {
        let input: Vec<u8> = cases
            .iter()
            .flat_map(|(_, launch, _)| launch.clone())
            .collect();
        let output = kernel.run(&input);
        let mut rest = &output[..];
        for (name, _, want) in cases {
            let (got, tail) = rest.split_at(std::mem::size_of_val(&want[..]));
            rest = tail;
            let got: Vec<T> = bytemuck::pod_collect_to_vec(got);
            if let Err(e) = same(&got, want) {
                panic!("{name}: {e}");
            }
        }
        assert!(rest.is_empty(), "{} bytes more than expected", rest.len());
    }

    #[test]
    fn the_kernel_equals_the_reference_bit_for_bit_on_the_host() {
        // Every row count against every column count and depth — single elements, partial
        // tiles, exact tiles, more than a tile, no depth at all — each with the next of the
        // four transpose combinations; then scalars and batches.
        let mut specs = Vec::new();
        let shapes = [1, 17, 64, 70]
            .into_iter()
            .flat_map(|m| [1, 9, 130].map(|n| (m, n)))
            .flat_map(|(m, n)| [0, 1, 33].map(|k| (m, n, k)));
        for (i, (m, n, k)) in shapes.enumerate() {
            let spec = Gemm::new(m, n, k)
                .transpose_a(i % 2 == 1)
                .transpose_b(i % 4 >= 2);
            specs.push(spec);
        }
        specs.extend([
            Gemm::new(8, 6, 4).scalars(2.0, 0.5),
            Gemm::new(8, 6, 4).scalars(-1.0, 1.0).batch(3),
            Gemm::new(5, 3, 2).transpose_a(true).batch(4),
            Gemm::new(65, 66, 17)
                .scalars(0.75, -1.5)
                .transpose_b(true)
                .batch(2),
            Gemm::new(9, 9, 9).scalars(1.0, f32::NAN),
        ]);
        let kernel = HostKernel::build();
        let seeds = (0u64..).step_by(3);
        let (mut f32s, mut bf16s, mut f16s) = (Vec::new(), Vec::new(), Vec::new());
        for (spec, seed) in specs.iter().zip(seeds) {
            f32s.extend(cases::<f32>(spec, seed));
            bf16s.extend(cases::<bf16>(spec, seed + 1000));
            f16s.extend(cases::<f16>(spec, seed + 2000));
        }
        check(&kernel, &f32s);
        check(&kernel, &bf16s);
        check(&kernel, &f16s);
    }

    /// `f32` patterns that exercise every rounding path to 16 bits: every sign, exponent and
    /// top-7-bit mantissa, each with low bits that make the round bit, the sticky bits and
    /// the last kept bit of bf16 and of f16 (normal and subnormal) take every combination.
    fn conversion_inputs() -> Vec<u32> {
        const LOW: [u32; 13] = [
            0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000, 0x2fff, 0x3000, 0x3001, 0x7fff, 0x8000,
            0x8001, 0xffff,
        ];
        (0..=0xffffu32)
            .flat_map(|high| LOW.map(|low| (high << 16) | low))
            .collect()
    }

    /// The host build's conversions of `inputs` to `T` and of their low halves from `T`.
    fn host_conversions<T: FloatElement>(
        kernel: &HostKernel,
        inputs: &[u32],
    ) -> (Vec<T>, Vec<u32>) {
        let mut request = 1u64.to_le_bytes().to_vec();
        let type_code: u64 = if T::DTYPE == FloatType::Bf16 { 1 } else { 2 };
        request.extend_from_slice(&type_code.to_le_bytes());
        request.extend_from_slice(&(inputs.len() as u64).to_le_bytes());
        request.extend_from_slice(bytemuck::cast_slice(inputs));
        let out = kernel.run(&request);
        let (narrow, wide) = out.split_at(inputs.len() * 2);
        (
            bytemuck::pod_collect_to_vec(narrow),
            bytemuck::pod_collect_to_vec(wide),
        )
    }

    fn check_conversions<T: FloatElement>(kernel: &HostKernel) {
        let inputs = conversion_inputs();
        let (narrow, wide) = host_conversions::<T>(kernel, &inputs);
        for (&x, got) in inputs.iter().zip(&narrow) {
            let want = T::from_f32(f32::from_bits(x));
            if let Err(e) = same(std::slice::from_ref(got), std::slice::from_ref(&want)) {
                panic!("{} from f32 {x:#010x}: {e}", T::DTYPE);
            }
        }
        for (&x, &got) in inputs.iter().zip(&wide) {
            let bits = (x & 0xffff) as u16;
            let want: T = bytemuck::cast::<[u8; 2], T>(bits.to_ne_bytes());
            let (got, want) = (f32::from_bits(got), want.to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{} {bits:#06x} to f32: {got:e}, expected {want:e}",
                T::DTYPE
            );
        }
    }

    #[test]
    fn conversions_equal_the_half_crates_on_every_rounding_path() {
        let kernel = HostKernel::build();
        check_conversions::<bf16>(&kernel);
        check_conversions::<f16>(&kernel);
    }

    #[test]
    fn grids_cover_every_tile_and_batch_up_to_the_cap() {
        assert_eq!(grid(&Gemm::new(1, 1, 1)), [1, 1, 1]);
        assert_eq!(grid(&Gemm::new(65, 128, 3).batch(5)), [2, 2, 5]);
        assert_eq!(grid(&Gemm::new(0, 0, 0)), [1, 1, 1]);
        let huge = Gemm::new(64 * 70_000, 1, 1).batch(1 << 20);
        assert_eq!(grid(&huge), [1, 65_535, 65_535]);
        assert_eq!(flags(&Gemm::new(1, 1, 1).transpose_b(true)), 2);
        for dtype in [FloatType::F32, FloatType::Bf16, FloatType::F16] {
            assert!(
                ENTRY_POINTS[index(dtype)]
                    .to_str()
                    .is_ok_and(|name| name.ends_with(dtype.name()))
            );
        }
    }
}
