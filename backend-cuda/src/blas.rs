//! GEMM on cuBLAS (loaded at run time through cudarc): the row-major [`Gemm`] mapped onto
//! cuBLAS's column-major `cublasGemmStridedBatchedEx`, one handle per backend instance, and a
//! workspace per stream as PyTorch keeps them.
//!
//! # Precision
//!
//! `CUBLAS_COMPUTE_32F` with `f32` scalars for every element type, and the handle's math mode
//! `CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`: no TF32 for `f32`
//! (its 10-bit mantissa would break the `f32` accuracy [`Gemm`] promises), and 16-bit results
//! rounded once from the `f32` accumulator, never summed in 16 bits by a split-K reduction.
//!
//! # Workspaces
//!
//! `cublasSetStream` resets a handle's workspace to cuBLAS's own pool, which cuBLAS allocates
//! when it needs to — inside a capture, a graph allocation per capture. So every call sets the
//! stream and then the stream's own workspace (`cublasSetWorkspace`), as PyTorch does with
//! `CUBLAS_WORKSPACE_CONFIG`'s size: 32 MiB from compute capability 9.0 on (cuBLAS's advice
//! for Hopper), 4 MiB before. A stream's workspace is allocated with `cuMemAlloc` the first
//! time it runs a GEMM, in relaxed capture mode (PyTorch's allocator does the same during a
//! capture), and the GEMMs a stream issues — eager or captured — use it in that stream's order.
//!
//! A workspace a capture used stays allocated until the backend instance drops: graphs hold
//! the instance, so a captured GEMM never outlives its workspace. The workspace of a stream
//! that never captured a GEMM is reused, once the stream is gone and its last GEMM finished,
//! by the next stream that needs one (an event recorded when the stream drops tells), so
//! short-lived streams do not pile up workspaces.
//!
//! What this shares, PyTorch shares too: graphs captured on one stream use its workspace, so
//! two of them replayed *concurrently* (on two streams, unordered) — or one replayed
//! concurrently with eager GEMMs on the stream it was captured on — may race in it. Order such
//! replays (one stream, or events), or capture them on different streams.

use std::{
    ffi::{CStr, c_void},
    ptr,
    sync::{Arc, Mutex, MutexGuard},
};

use accel_graph_api::{FloatType, Gemm, GraphError, backend_kit::ErrorClass};
use accel_graph_driver::{DriverError, DriverResult};
use cudarc::{
    cublas::sys::{
        self as blas, cublasComputeType_t, cublasGemmAlgo_t, cublasMath_t, cublasOperation_t,
        cublasStatus_t, cudaDataType,
    },
    driver::sys,
};

use crate::{capture::MODES, error::check, libs::CUBLAS};

/// cuBLAS's workspace for a device of compute capability major `major`.
pub(crate) fn workspace_bytes(major: i32) -> usize {
    if major >= 9 { 32 << 20 } else { 4 << 20 }
}

/// The column-major parameters of `cublasGemmStridedBatchedEx` that compute a row-major
/// [`Gemm`].
///
/// A row-major `r×c` matrix is, read column-major, its `c×r` transpose. So cuBLAS computes
/// `Cᵀ[n×m] = op(B)ᵀ · op(A)ᵀ`: its first operand is our `B`, its second our `A`, `m` and `n`
/// swap, and each leading dimension is the row length of the stored matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ColumnMajor {
    /// cuBLAS's `transa` (for our `B`).
    pub(crate) transa: bool,
    /// cuBLAS's `transb` (for our `A`).
    pub(crate) transb: bool,
    /// cuBLAS's `m`: our `n`.
    pub(crate) m: i32,
    /// cuBLAS's `n`: our `m`.
    pub(crate) n: i32,
    /// `k`.
    pub(crate) k: i32,
    /// Leading dimension of cuBLAS's `A` (our `B`).
    pub(crate) lda: i32,
    /// Leading dimension of cuBLAS's `B` (our `A`).
    pub(crate) ldb: i32,
    /// Leading dimension of `C`.
    pub(crate) ldc: i32,
    /// Elements between batches of cuBLAS's `A` (our `B`).
    pub(crate) stride_a: i64,
    /// Elements between batches of cuBLAS's `B` (our `A`).
    pub(crate) stride_b: i64,
    /// Elements between batches of `C`.
    pub(crate) stride_c: i64,
    /// Batches.
    pub(crate) batch: i32,
}

impl ColumnMajor {
    /// The parameters of `spec` (shape already checked), or `None` when `C` is empty and
    /// there is nothing to do. Dimensions past cuBLAS's 32-bit interface are
    /// [`GraphError::Unsupported`].
    pub(crate) fn of(spec: &Gemm) -> Result<Option<Self>, GraphError> {
        if spec.m == 0 || spec.n == 0 {
            return Ok(None);
        }
        let int = |v: usize| {
            i32::try_from(v).map_err(|_| GraphError::Unsupported {
                what: format!(
                    "gemm {spec:?}: a dimension or batch count past cuBLAS's 32-bit interface"
                ),
            })
        };
        let stride = |rows: usize, cols: usize| {
            rows.checked_mul(cols)
                .and_then(|e| i64::try_from(e).ok())
                .ok_or_else(|| {
                    GraphError::ArgumentMismatch(format!("gemm {spec:?}: sizes overflow"))
                })
        };
        // A leading dimension must be at least 1 even when k is 0 (nothing is read then).
        let ld = |v: usize| int(v.max(1));
        Ok(Some(ColumnMajor {
            transa: spec.transpose_b,
            transb: spec.transpose_a,
            m: int(spec.n)?,
            n: int(spec.m)?,
            k: int(spec.k)?,
            // B stored k×n (row length n), or n×k when transposed (row length k).
            lda: ld(if spec.transpose_b { spec.k } else { spec.n })?,
            // A stored m×k (row length k), or k×m when transposed (row length m).
            ldb: ld(if spec.transpose_a { spec.m } else { spec.k })?,
            ldc: ld(spec.n)?,
            stride_a: stride(spec.k, spec.n)?,
            stride_b: stride(spec.m, spec.k)?,
            stride_c: stride(spec.m, spec.n)?,
            batch: int(spec.batch)?,
        }))
    }
}

/// cuBLAS's element type of `dtype`.
fn data_type(dtype: FloatType) -> cudaDataType {
    match dtype {
        FloatType::F32 => cudaDataType::CUDA_R_32F,
        FloatType::Bf16 => cudaDataType::CUDA_R_16BF,
        FloatType::F16 => cudaDataType::CUDA_R_16F,
    }
}

fn operation(transpose: bool) -> cublasOperation_t {
    if transpose {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

/// `Ok` for `CUBLAS_STATUS_SUCCESS`, else the error of `call` (allocation failures are out of
/// memory; the rest carry cuBLAS's name of the status).
fn blas_check(status: cublasStatus_t, call: &str) -> DriverResult<()> {
    if status == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: cuBLAS returns a static string for every status.
    let name = unsafe { blas::cublasGetStatusName(status) };
    let name = if name.is_null() {
        format!("{status:?}")
    } else {
        // SAFETY: a NUL-terminated static string (checked non-null).
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    };
    let class = if status == cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED {
        ErrorClass::OutOfMemory
    } else {
        ErrorClass::Other
    };
    Err(DriverError::code(
        class,
        status as i64,
        name,
        format!("{call} failed"),
    ))
}

/// A cuBLAS handle.
struct Handle(blas::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one at a time: it lives behind the
// `Blas` mutex.
unsafe impl Send for Handle {}

/// The cuBLAS side of a device: its handle, made at the first GEMM, and the workspaces.
pub(crate) struct Blas {
    handle: Mutex<Option<Handle>>,
    pub(crate) workspaces: Arc<Workspaces>,
}

impl Blas {
    /// No handle yet; workspaces of `workspace_bytes` each.
    pub(crate) fn new(workspace_bytes: usize) -> Self {
        Blas {
            handle: Mutex::new(None),
            workspaces: Arc::new(Workspaces {
                bytes: workspace_bytes,
                state: Mutex::new(WorkspaceState::default()),
            }),
        }
    }

    /// The handle, made now if this is the first GEMM (the context must be current): cuBLAS
    /// probed first, so a missing library is [`GraphError::LibraryUnavailable`].
    fn handle(&self) -> DriverResult<MutexGuard<'_, Option<Handle>>> {
        let mut handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if handle.is_none() {
            CUBLAS.probe().map_err(DriverError::Api)?;
            let made = CUBLAS.guard(|| {
                // Relaxed: creating a handle allocates, which a capture elsewhere in the
                // process must neither refuse nor be broken by (it is no stream work).
                MODES.relaxed(|| {
                    let mut raw = ptr::null_mut();
                    // SAFETY: a local out-parameter; the device's context is current.
                    let status = unsafe { blas::cublasCreate_v2(&mut raw) };
                    blas_check(status, "cublasCreate")?;
                    let made = Handle(raw);
                    let math = cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
                    // SAFETY: a live handle.
                    let status = unsafe { blas::cublasSetMathMode(made.0, math) };
                    blas_check(status, "cublasSetMathMode")?;
                    Ok(made)
                })
            })?;
            *handle = Some(made);
        }
        Ok(handle)
    }

    /// Issues `C = alpha · op(A) · op(B) + beta · C` (row-major `spec`) on `stream` with the
    /// stream's workspace `workspace` (of [`Workspaces::bytes`]).
    ///
    /// # Safety
    /// The context is current; `a`, `b`, `c` point at live device memory of the lengths
    /// `spec` needs in `dtype`, and `workspace` is the stream's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: sys::CUdeviceptr,
        b: sys::CUdeviceptr,
        c: sys::CUdeviceptr,
        stream: sys::CUstream,
        workspace: sys::CUdeviceptr,
    ) -> DriverResult<()> {
        let Some(p) = ColumnMajor::of(spec).map_err(DriverError::Api)? else {
            return Ok(());
        };
        let handle = self.handle()?;
        let Some(handle) = handle.as_ref() else {
            unreachable!("made above")
        };
        let ty = data_type(dtype);
        let (alpha, beta) = (spec.alpha, spec.beta);
        CUBLAS.guard(|| {
            // SAFETY: a live handle and stream of the current context.
            let status = unsafe { blas::cublasSetStream_v2(handle.0, stream.cast()) };
            blas_check(status, "cublasSetStream")?;
            // After the stream: `cublasSetStream` resets the workspace to cuBLAS's own pool.
            // SAFETY: the workspace is live device memory of `bytes` (this method's contract),
            // aligned as `cuMemAlloc` aligns (256 bytes and more).
            let status = unsafe {
                blas::cublasSetWorkspace_v2(
                    handle.0,
                    workspace as *mut c_void,
                    self.workspaces.bytes,
                )
            };
            blas_check(status, "cublasSetWorkspace")?;
            // SAFETY: the operands hold what `spec` needs (this method's contract), and the
            // parameters address exactly them (`ColumnMajor`); the scalars are host `f32`s, as
            // `CUBLAS_COMPUTE_32F` takes them in the default (host) pointer mode.
            let status = unsafe {
                blas::cublasGemmStridedBatchedEx(
                    handle.0,
                    operation(p.transa),
                    operation(p.transb),
                    p.m,
                    p.n,
                    p.k,
                    (&raw const alpha).cast(),
                    b as *const c_void,
                    ty,
                    p.lda,
                    p.stride_a,
                    a as *const c_void,
                    ty,
                    p.ldb,
                    p.stride_b,
                    (&raw const beta).cast(),
                    c as *mut c_void,
                    ty,
                    p.ldc,
                    p.stride_c,
                    p.batch,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            };
            blas_check(status, "cublasGemmStridedBatchedEx")
        })
    }
}

impl Drop for Blas {
    /// Runs with the device's context current (the device binds it before its fields drop).
    fn drop(&mut self) {
        if let Some(handle) = self
            .handle
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            // SAFETY: the handle was made by `cublasCreate` and is destroyed once.
            let _ = unsafe { blas::cublasDestroy_v2(handle.0) };
        }
        self.workspaces.close();
    }
}

/// The device memory of the cuBLAS workspaces of a device's streams.
pub(crate) struct Workspaces {
    /// Bytes of each.
    bytes: usize,
    state: Mutex<WorkspaceState>,
}

// SAFETY: device pointers are plain numbers and events plain driver handles, usable from any
// thread whose current context is theirs (every call runs with the device's context bound);
// the state lives behind a mutex.
unsafe impl Send for WorkspaceState {}

#[derive(Default)]
struct WorkspaceState {
    /// Set when the device drops: everything was freed.
    closed: bool,
    /// Every workspace allocated, freed when the device drops.
    all: Vec<sys::CUdeviceptr>,
    /// Workspaces of dropped streams, each with an event recorded after the stream's last
    /// work: free for another stream once the event completed.
    retired: Vec<(sys::CUdeviceptr, sys::CUevent)>,
}

/// A stream's workspace, held by the stream (see [`crate::CuStream`]).
pub(crate) struct WorkspaceSlot {
    ptr: sys::CUdeviceptr,
    /// Whether a capture recorded a GEMM with it: then graphs may use it until the device
    /// drops, and it is never reused.
    captured: bool,
    workspaces: Arc<Workspaces>,
}

impl WorkspaceSlot {
    /// The device address.
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Marks that a capture recorded a GEMM using this workspace.
    pub(crate) fn mark_captured(&mut self) {
        self.captured = true;
    }

    /// The stream holding the slot is being destroyed (`stream` is its raw handle, still
    /// live): the workspace becomes free for another stream once `stream`'s work finished,
    /// unless a capture used it.
    pub(crate) fn retire(self, stream: sys::CUstream) {
        if self.captured {
            return;
        }
        self.workspaces.retire(self.ptr, stream);
    }
}

impl Workspaces {
    /// A workspace for a stream that has none: a retired one whose last use finished, or a new
    /// one. Runs in relaxed capture mode (an allocation, perhaps during a capture, as
    /// PyTorch's allocator allocates in a capture); the context must be current.
    pub(crate) fn acquire(self: &Arc<Self>) -> DriverResult<WorkspaceSlot> {
        MODES.relaxed(|| {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.closed {
                return Err(DriverError::Api(GraphError::Unsupported {
                    what: "gemm on a stream of a CUDA backend instance that was dropped".to_owned(),
                }));
            }
            let finished = |event: sys::CUevent| {
                // SAFETY: the retired events are live until taken or closed.
                let status = unsafe { sys::cuEventQuery(event) };
                status == sys::CUresult::CUDA_SUCCESS
            };
            let ready = state.retired.iter().position(|&(_, event)| finished(event));
            let ptr = match ready {
                Some(i) => {
                    let (ptr, event) = state.retired.swap_remove(i);
                    // SAFETY: the event is ours and destroyed once.
                    let _ = unsafe { sys::cuEventDestroy_v2(event) };
                    ptr
                }
                None => {
                    let mut ptr = 0;
                    // SAFETY: a plain allocation into a local.
                    let status = unsafe { sys::cuMemAlloc_v2(&mut ptr, self.bytes) };
                    check(status, "cuMemAlloc (cuBLAS workspace)")?;
                    state.all.push(ptr);
                    ptr
                }
            };
            Ok(WorkspaceSlot {
                ptr,
                captured: false,
                workspaces: Arc::clone(self),
            })
        })
    }

    /// A stream dropped with workspace `ptr`: records an event after the stream's work and
    /// keeps the workspace for reuse once it completed. If the event cannot be recorded (a
    /// broken context, a call from a host function) the workspace stays unused until the
    /// device drops.
    fn retire(&self, ptr: sys::CUdeviceptr, stream: sys::CUstream) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.closed {
            return;
        }
        let event = MODES.relaxed(|| {
            let mut event = ptr::null_mut();
            // SAFETY: a local out-parameter.
            let created = unsafe {
                sys::cuEventCreate(
                    &mut event,
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                )
            };
            if created != sys::CUresult::CUDA_SUCCESS {
                return None;
            }
            // SAFETY: the event is ours; the stream is live (its owner is dropping it) and not
            // capturing (a capture keeps its streams).
            if unsafe { sys::cuEventRecord(event, stream) } != sys::CUresult::CUDA_SUCCESS {
                // SAFETY: ours, destroyed once.
                let _ = unsafe { sys::cuEventDestroy_v2(event) };
                return None;
            }
            Some(event)
        });
        if let Some(event) = event {
            state.retired.push((ptr, event));
        }
    }

    /// Frees every workspace (the device is dropping: no graph of it is left, and the device
    /// is synchronized first, so no launch still uses one).
    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.closed {
            return;
        }
        state.closed = true;
        if state.all.is_empty() {
            return;
        }
        // SAFETY: waits for the current context's work; its graphs are gone, but launches of
        // them may still run.
        let _ = unsafe { sys::cuCtxSynchronize() };
        for (_, event) in state.retired.drain(..) {
            // SAFETY: ours, destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(event) };
        }
        for ptr in state.all.drain(..) {
            // SAFETY: allocated by `acquire`, freed once, after the synchronization above.
            let _ = unsafe { sys::cuMemFree_v2(ptr) };
        }
    }
}

#[cfg(test)]
mod tests {
    use accel_graph_api::gemm_reference;

    use super::*;

    /// cuBLAS's column-major strided batched GEMM, on the host: what the mapped parameters
    /// make cuBLAS compute.
    #[allow(clippy::too_many_arguments)]
    fn column_major_gemm(
        p: &ColumnMajor,
        alpha: f32,
        a: &[f32],
        b: &[f32],
        beta: f32,
        c: &mut [f32],
    ) {
        let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
        for t in 0..p.batch as usize {
            let a = &a[t * p.stride_a as usize..];
            let b = &b[t * p.stride_b as usize..];
            let c = &mut c[t * p.stride_c as usize..];
            for j in 0..n {
                for i in 0..m {
                    let mut sum = 0.0f32;
                    for l in 0..k {
                        // op(A)[i][l], op(B)[l][j], column-major with leading dimensions.
                        let av = if p.transa {
                            a[l + i * p.lda as usize]
                        } else {
                            a[i + l * p.lda as usize]
                        };
                        let bv = if p.transb {
                            b[j + l * p.ldb as usize]
                        } else {
                            b[l + j * p.ldb as usize]
                        };
                        sum += av * bv;
                    }
                    let slot = &mut c[i + j * p.ldc as usize];
                    *slot = if beta == 0.0 {
                        alpha * sum
                    } else {
                        alpha * sum + beta * *slot
                    };
                }
            }
        }
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + seed * 13) % 11) as f32 - 5.0)
            .collect()
    }

    #[test]
    fn the_column_major_call_computes_the_row_major_product() {
        let mut specs = Vec::new();
        for (m, n, k) in [(1, 1, 1), (3, 5, 7), (17, 9, 33), (1, 130, 65), (4, 1, 2)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                specs.push(Gemm::new(m, n, k).transpose_a(ta).transpose_b(tb));
            }
        }
        specs.push(Gemm::new(8, 6, 4).scalars(2.0, 0.5));
        specs.push(Gemm::new(8, 6, 4).scalars(-1.0, 1.0).batch(3));
        specs.push(Gemm::new(5, 3, 2).transpose_a(true).batch(4));
        specs.push(
            Gemm::new(3, 4, 5)
                .transpose_b(true)
                .scalars(1.5, -2.0)
                .batch(2),
        );
        for (i, spec) in specs.iter().enumerate() {
            let a = values(spec.a_len().expect("fits"), i);
            let b = values(spec.b_len().expect("fits"), i + 1);
            let c = values(spec.c_len().expect("fits"), i + 2);
            let mut want = c.clone();
            gemm_reference(spec, &a, &b, &mut want);
            let p = ColumnMajor::of(spec).expect("fits").expect("non-empty");
            // cuBLAS's first operand is our B, its second our A; C is shared.
            let mut got = c.clone();
            column_major_gemm(&p, spec.alpha, &b, &a, spec.beta, &mut got);
            assert_eq!(got, want, "{spec:?} → {p:?}");
        }
    }

    #[test]
    fn the_parameters_of_a_plain_product() {
        // C[2×3] = A[2×4] · B[4×3]: cuBLAS computes Cᵀ[3×2] = Bᵀ[3×4] · Aᵀ[4×2].
        let p = ColumnMajor::of(&Gemm::new(2, 3, 4).batch(5))
            .expect("fits")
            .expect("non-empty");
        assert_eq!(
            p,
            ColumnMajor {
                transa: false,
                transb: false,
                m: 3,
                n: 2,
                k: 4,
                lda: 3,
                ldb: 4,
                ldc: 3,
                stride_a: 12,
                stride_b: 8,
                stride_c: 6,
                batch: 5,
            }
        );
        let t = ColumnMajor::of(&Gemm::new(2, 3, 4).transpose_a(true).transpose_b(true))
            .expect("fits")
            .expect("non-empty");
        assert_eq!((t.transa, t.transb, t.lda, t.ldb), (true, true, 4, 2));
    }

    #[test]
    fn empty_and_oversized_products() {
        assert!(matches!(ColumnMajor::of(&Gemm::new(0, 3, 4)), Ok(None)));
        assert!(matches!(ColumnMajor::of(&Gemm::new(3, 0, 4)), Ok(None)));
        // k = 0: C = beta · C, with leading dimensions still at least 1.
        let p = ColumnMajor::of(&Gemm::new(2, 3, 0).transpose_b(true))
            .expect("fits")
            .expect("non-empty");
        assert_eq!((p.k, p.lda, p.ldb), (0, 1, 1));
        assert!(matches!(
            ColumnMajor::of(&Gemm::new(1 << 31, 1, 1)),
            Err(GraphError::Unsupported { .. })
        ));
    }

    #[test]
    fn workspaces_follow_cublas_advice() {
        assert_eq!(workspace_bytes(8), 4 << 20);
        assert_eq!(workspace_bytes(9), 32 << 20);
        assert_eq!(workspace_bytes(10), 32 << 20);
    }

    #[test]
    fn element_types_map_to_cuda_data_types() {
        assert_eq!(data_type(FloatType::F32), cudaDataType::CUDA_R_32F);
        assert_eq!(data_type(FloatType::Bf16), cudaDataType::CUDA_R_16BF);
        assert_eq!(data_type(FloatType::F16), cudaDataType::CUDA_R_16F);
    }
}
