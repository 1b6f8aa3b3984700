//! Collectives on CUDA: NCCL through cudarc (the crate's `nccl` feature), loaded at run time,
//! issued on the backend's streams — so a capture records them natively, as NCCL supports
//! since 2.9. Built without the feature, every communicator is refused with the reason.
//!
//! NCCL's rules for captures, and where each is kept:
//!
//! * **Warm-up outside captures**: a communicator's first collectives set up its connections
//!   (device allocations, proxy threads). `Communicator::new` runs one of each collective
//!   eagerly before it returns, so no capture is the first use.
//! * **`thread_local` capture mode for ranks that are threads of one process**: CUDA's global
//!   mode spans the process, so another rank's thread would invalidate the capture; the driver
//!   layer refuses a collective in a `global` capture while several ranks share the process
//!   (`GraphError::CollectiveCaptureMode`).
//! * **The same collective sequence on every rank**: the driver layer compares the ranks'
//!   captures before they end, and discards mismatched ones.
//! * **Communicators outlive their graphs**: a graph holding a collective keeps its
//!   communicator alive (as it keeps the buffers), and a communicator is released
//!   (`ncclCommFinalize`, `ncclCommDestroy`) only while no capture runs.
//!
//! Missing NCCL is [`GraphError::LibraryUnavailable`] for `libnccl`: cudarc's loader panics
//! when the library or a symbol is missing, so the library is probed first and every call
//! into NCCL runs under a guard that turns such a panic into that error.

#[cfg(not(feature = "nccl"))]
accel_graph_driver::no_collectives!(
    crate::CudaDevice,
    "collectives on the CUDA backend: accel-graph-cuda was built without its `nccl` feature \
     (enable it, or the facade's `nccl` feature)"
);

#[cfg(feature = "nccl")]
pub use with::NcclComm;

#[cfg(feature = "nccl")]
mod with {
    use std::{
        ffi::{CStr, c_char, c_void},
        mem::MaybeUninit,
        panic::{self, AssertUnwindSafe},
        sync::{OnceLock, RwLock},
    };

    use accel_graph_api::{
        GraphError, Result,
        backend_kit::ErrorClass,
        collective::{COMM_ID_BYTES, Collective, CommDType, CommId, ReduceOp},
    };
    use accel_graph_driver::{
        DriverError, DriverResult,
        api::{CommSpec, DriverCollectives, RawCollective},
    };
    use cudarc::nccl::{
        result::{self, NcclError},
        sys,
    };

    use crate::{CuBlock, CuStream, CudaBackend, CudaDevice};

    /// The library's name in errors.
    const LIBRARY: &str = "libnccl";

    /// What to do when NCCL cannot be loaded.
    const INSTALL: &str = "install NCCL 2.28 or newer (the libnccl2 package, or PyTorch's \
        nvidia-nccl wheel) and put its folder on LD_LIBRARY_PATH; cudarc looks for \
        `libnccl.so`, so where only `libnccl.so.2` exists, link it as `libnccl.so` in a folder \
        on LD_LIBRARY_PATH";

    /// Checks once that NCCL can be loaded, before cudarc's loader (which panics) touches it:
    /// by cudarc's first name, or by the library's soname (which a build that links NCCL
    /// has loaded already).
    fn nccl_available() -> Result<()> {
        static PROBE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
        let probed = PROBE.get_or_init(|| {
            let mut errors = Vec::new();
            for name in ["libnccl.so", "libnccl.so.2"] {
                // SAFETY: loading NCCL runs its initialisers, which is what using it means;
                // the handle is dropped at once (cudarc keeps its own).
                match unsafe { libloading::Library::new(name) } {
                    Ok(_) => return Ok(()),
                    Err(e) => errors.push(format!("{name}: {e}")),
                }
            }
            Err(errors.join("; "))
        });
        probed
            .clone()
            .map_err(|reason| GraphError::LibraryUnavailable {
                library: LIBRARY,
                reason: format!("{reason}; {INSTALL}"),
            })
    }

    /// Runs a call into NCCL, turning a panic of cudarc's loader (the library under another
    /// name, a symbol an old NCCL lacks) into [`GraphError::LibraryUnavailable`].
    fn guarded<T>(call: &str, f: impl FnOnce() -> T) -> DriverResult<T> {
        panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic without message".to_owned());
            DriverError::Api(GraphError::LibraryUnavailable {
                library: LIBRARY,
                reason: format!("{call}: {text}; {INSTALL}"),
            })
        })
    }

    /// The error of a failed NCCL `call` on `comm` (its last error text, where NCCL has one).
    fn nccl_error(error: NcclError, call: &str, comm: Option<sys::ncclComm_t>) -> DriverError {
        let code = error.0;
        let text = |ptr: *const c_char| {
            if ptr.is_null() {
                String::new()
            } else {
                // SAFETY: NCCL returns pointers to static (or per-communicator) NUL-terminated
                // text, non-null here.
                unsafe { CStr::from_ptr(ptr) }
                    .to_string_lossy()
                    .into_owned()
            }
        };
        // SAFETY: `ncclGetErrorString` takes any result code.
        let description = text(unsafe { sys::ncclGetErrorString(code) });
        // SAFETY: `comm` is a live communicator (or null, which NCCL accepts: the last error
        // of the thread).
        let last = text(unsafe { sys::ncclGetLastError(comm.unwrap_or(std::ptr::null_mut())) });
        DriverError::code(
            ErrorClass::Other,
            code as i64,
            format!("{code:?}"),
            format!(
                "{call}: {description}{}",
                if last.is_empty() {
                    String::new()
                } else {
                    format!(" ({last})")
                }
            ),
        )
    }

    fn check(
        result: std::result::Result<result::NcclStatus, NcclError>,
        call: &str,
        comm: Option<sys::ncclComm_t>,
    ) -> DriverResult<()> {
        result.map(drop).map_err(|e| nccl_error(e, call, comm))
    }

    /// A raw communicator handle.
    struct RawComm(sys::ncclComm_t);

    // SAFETY: an NCCL communicator may be used from any thread (one call at a time per
    // communicator, which the rank's stream order and the lock around `raw` give).
    unsafe impl Send for RawComm {}
    // SAFETY: as above; calls through `&RawComm` only pass the handle to NCCL.
    unsafe impl Sync for RawComm {}

    /// One rank's NCCL communicator (what the CUDA driver's `DriverCollectives::Comm` is).
    /// Released with `ncclCommFinalize` and `ncclCommDestroy` when dropped (the driver layer
    /// drops it only while no capture runs), or freed by `ncclCommAbort`.
    pub struct NcclComm {
        /// `None` once aborted (the abort freed it).
        raw: RwLock<Option<RawComm>>,
        rank: usize,
        world_size: usize,
    }

    impl NcclComm {
        /// This rank.
        pub fn rank(&self) -> usize {
            self.rank
        }

        /// Ranks of the communicator.
        pub fn world_size(&self) -> usize {
            self.world_size
        }
    }

    impl std::fmt::Debug for NcclComm {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("NcclComm")
                .field("rank", &self.rank)
                .field("world_size", &self.world_size)
                .finish()
        }
    }

    impl Drop for NcclComm {
        fn drop(&mut self) {
            let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(RawComm(comm)) = raw {
                // A replay launched before its graph was reset may still run this
                // communicator's kernels: let the device finish them first. (The driver layer
                // drops a communicator only while no capture runs, with its context bound, so
                // the synchronize meets no capture.)
                // SAFETY: a device-wide wait on the bound context.
                let _ = unsafe { cudarc::driver::sys::cuCtxSynchronize() };
                let _ = guarded("ncclCommFinalize", || {
                    // SAFETY: `comm` is live and used by nothing else (we own it); finalize
                    // waits for its issued work, destroy frees it, once.
                    unsafe {
                        let _ = result::comm_finalize(comm);
                        let _ = result::comm_destroy(comm);
                    }
                });
            }
        }
    }

    fn data_type(dtype: CommDType) -> sys::ncclDataType_t {
        use sys::ncclDataType_t as T;
        match dtype {
            CommDType::I8 => T::ncclInt8,
            CommDType::U8 => T::ncclUint8,
            CommDType::I32 => T::ncclInt32,
            CommDType::U32 => T::ncclUint32,
            CommDType::I64 => T::ncclInt64,
            CommDType::U64 => T::ncclUint64,
            CommDType::F16 => T::ncclFloat16,
            CommDType::F32 => T::ncclFloat32,
            CommDType::F64 => T::ncclFloat64,
            CommDType::Bf16 => T::ncclBfloat16,
        }
    }

    fn red_op(op: ReduceOp) -> sys::ncclRedOp_t {
        use sys::ncclRedOp_t as O;
        match op {
            ReduceOp::Sum => O::ncclSum,
            ReduceOp::Prod => O::ncclProd,
            ReduceOp::Max => O::ncclMax,
            ReduceOp::Min => O::ncclMin,
        }
    }

    /// The device address of byte `offset` of `block`.
    fn address(block: &CuBlock, offset: usize) -> *mut c_void {
        (block.device_ptr() + offset as u64) as *mut c_void
    }

    impl DriverCollectives for CudaDevice {
        type Comm = NcclComm;

        fn comm_support(&self) -> DriverResult<()> {
            Ok(nccl_available()?)
        }

        fn comm_unique_id(&self) -> DriverResult<CommId> {
            nccl_available()?;
            let id = guarded("ncclGetUniqueId", result::get_uniqueid)?
                .map_err(|e| nccl_error(e, "ncclGetUniqueId", None))?;
            let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
            Ok(CommId::from_bytes(&bytes)?)
        }

        fn comm_init(&self, spec: CommSpec<'_>) -> DriverResult<NcclComm> {
            nccl_available()?;
            let too_many = || {
                DriverError::Api(GraphError::ArgumentMismatch(format!(
                    "communicator {}: {} ranks do not fit NCCL's int",
                    spec.name, spec.world_size
                )))
            };
            let (world, rank) = (
                i32::try_from(spec.world_size).map_err(|_| too_many())?,
                i32::try_from(spec.rank).map_err(|_| too_many())?,
            );
            let mut internal = [0 as c_char; COMM_ID_BYTES];
            for (c, &b) in internal.iter_mut().zip(spec.id.as_bytes()) {
                *c = b as c_char;
            }
            let id = sys::ncclUniqueId { internal };
            let mut comm = MaybeUninit::<sys::ncclComm_t>::uninit();
            // The device is this context's (bound by the driver layer): NCCL uses the current
            // device, which the runtime takes from the current primary context.
            let initialised = guarded("ncclCommInitRank", || {
                // SAFETY: `comm` is a valid out-pointer; the id is what rank 0 made.
                unsafe { result::comm_init_rank(comm.as_mut_ptr(), world, id, rank) }
            })?;
            check(initialised, "ncclCommInitRank", None)?;
            // SAFETY: initialised by the successful call.
            let comm = unsafe { comm.assume_init() };
            Ok(NcclComm {
                raw: RwLock::new(Some(RawComm(comm))),
                rank: spec.rank,
                world_size: spec.world_size,
            })
        }

        unsafe fn collective(
            &self,
            comm: &NcclComm,
            call: RawCollective<'_, CuBlock>,
            stream: &CuStream,
        ) -> DriverResult<()> {
            let raw = comm.raw.read().unwrap_or_else(|e| e.into_inner());
            let Some(RawComm(handle)) = raw.as_ref() else {
                return Err(DriverError::code(
                    ErrorClass::Other,
                    sys::ncclResult_t::ncclInvalidUsage as i64,
                    "ncclInvalidUsage",
                    "the NCCL communicator was aborted",
                ));
            };
            let handle = *handle;
            let sig = call.signature;
            let (send, recv) = (
                address(call.send.block, call.send.offset),
                address(call.recv.block, call.recv.offset),
            );
            let (count, dtype) = (sig.count, data_type(sig.dtype));
            // NCCL's `cudaStream_t` is CUDA's `CUstream` under another type name.
            let s = stream.cu_stream() as sys::cudaStream_t;
            let name = sig.collective.name();
            let issued = guarded(name, || {
                // SAFETY: the bytes lie inside live blocks (this method's contract; lengths
                // were checked against `count` and the world size), the stream and the
                // communicator are live, and a capture keeps both alive for its graph.
                unsafe {
                    match sig.collective {
                        Collective::AllReduce(op) => {
                            result::all_reduce(send, recv, count, dtype, red_op(op), handle, s)
                        }
                        Collective::AllGather => {
                            result::all_gather(send, recv, count, dtype, handle, s)
                        }
                        Collective::ReduceScatter(op) => {
                            result::reduce_scatter(send, recv, count, dtype, red_op(op), handle, s)
                        }
                        Collective::Broadcast { root } => result::broadcast(
                            send,
                            recv,
                            count,
                            dtype,
                            i32::try_from(root).unwrap_or(i32::MAX),
                            handle,
                            s,
                        ),
                    }
                }
            })?;
            check(issued, name, Some(handle))
        }

        fn comm_error(&self, comm: &NcclComm) -> Option<String> {
            let raw = comm.raw.read().unwrap_or_else(|e| e.into_inner());
            let RawComm(handle) = raw.as_ref()?;
            let mut status = sys::ncclResult_t::ncclSuccess;
            // SAFETY: the communicator is live (under the read lock) and `status` a valid
            // out-pointer.
            let asked = guarded("ncclCommGetAsyncError", || unsafe {
                sys::ncclCommGetAsyncError(*handle, &mut status)
            });
            match asked {
                Ok(sys::ncclResult_t::ncclSuccess) => match status {
                    sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => None,
                    failed => Some(
                        nccl_error(NcclError(failed), "asynchronous error", Some(*handle))
                            .to_string(),
                    ),
                },
                Ok(failed) => Some(
                    nccl_error(NcclError(failed), "ncclCommGetAsyncError", Some(*handle))
                        .to_string(),
                ),
                Err(e) => Some(e.to_string()),
            }
        }

        fn comm_abort(&self, comm: &NcclComm, reason: &str) {
            let taken = comm.raw.write().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(RawComm(handle)) = taken {
                tracing::warn!(rank = comm.rank, reason, "aborting the NCCL communicator");
                // SAFETY: the handle is live and no call holds it (the write lock); the abort
                // ends its kernels and frees it, once (it left `raw`).
                let _ = guarded("ncclCommAbort", || unsafe { result::comm_abort(handle) });
            }
        }
    }

    impl CudaBackend {
        /// The version of the NCCL library loaded (`"2.28.3"`), for logs;
        /// [`GraphError::LibraryUnavailable`] without one.
        pub fn nccl_version(&self) -> Result<String> {
            nccl_available()?;
            let code = guarded("ncclGetVersion", result::get_nccl_version)
                .map_err(|e| match e {
                    DriverError::Api(e) => e,
                    other => GraphError::LibraryUnavailable {
                        library: LIBRARY,
                        reason: other.to_string(),
                    },
                })?
                .map_err(|e| GraphError::LibraryUnavailable {
                    library: LIBRARY,
                    reason: format!("ncclGetVersion failed: {:?}", e.0),
                })?;
            // NCCL 2.9 and later encode major·10000 + minor·100 + patch.
            Ok(format!(
                "{}.{}.{}",
                code / 10000,
                code / 100 % 100,
                code % 100
            ))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn nccl_loads_or_its_absence_is_typed() {
            match nccl_available() {
                Ok(()) => {}
                Err(GraphError::LibraryUnavailable { library, reason }) => {
                    assert_eq!(library, "libnccl");
                    assert!(reason.contains("libnccl.so.2"), "{reason}");
                }
                Err(other) => panic!("{other:?}"),
            }
        }

        #[test]
        fn a_panic_of_the_loader_becomes_library_unavailable() {
            let out = guarded("ncclAllReduce", || -> u32 {
                panic!("Missing symbol ncclAllReduce: undefined symbol")
            });
            match out {
                Err(DriverError::Api(GraphError::LibraryUnavailable { library, reason })) => {
                    assert_eq!(library, "libnccl");
                    assert!(
                        reason.starts_with("ncclAllReduce: Missing symbol"),
                        "{reason}"
                    );
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(guarded("ncclGetVersion", || 7).ok(), Some(7));
        }
    }
}
