//! CUDA streams: cudarc's `CudaStream`s of the device's context — the backend's own, and
//! streams of the user's adopted with [`crate::CudaBackend::adopt_stream`].

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use accel_graph_api::GraphError;
use accel_graph_driver::{DriverError, DriverResult, api::DriverStreams};
use cudarc::driver::{CudaStream, sys};

use crate::{
    CudaDevice,
    blas::WorkspaceSlot,
    error::{check, from_cudarc},
};

/// A CUDA stream of the backend (the driver-level object behind a [`crate::CudaStreamHandle`]).
/// The default stream is CUDA's legacy stream (null), which cannot be captured; new streams are
/// non-blocking.
pub struct CuStream {
    stream: Arc<CudaStream>,
    /// Made by the user, who keeps a safe cudarc handle of it: cudarc's own calls can begin a
    /// capture on it, or fork it into one, behind the backend's back, so the backend checks
    /// with the driver before issuing work on it (see [`CudaDevice::check_joined`]).
    external: bool,
    /// For an external stream: the id of the last capture the backend saw it join (its
    /// `capture_begin`, or a fork through the backend's `wait_event`); 0 for none. Capture
    /// ids are unique in the process, so an old value never matches a later capture.
    joined: AtomicU64,
    /// The stream's cuBLAS workspace, from its first GEMM on.
    pub(crate) workspace: Mutex<Option<WorkspaceSlot>>,
    /// Made by the backend with `cuStreamCreate` and wrapped as a borrowed cudarc stream (see
    /// `create_stream`): destroyed when this goes.
    made: bool,
}

impl CuStream {
    fn new(stream: Arc<CudaStream>, external: bool) -> Self {
        CuStream {
            stream,
            external,
            joined: AtomicU64::new(0),
            workspace: Mutex::new(None),
            made: false,
        }
    }

    /// A user's stream, adopted.
    pub(crate) fn external(stream: Arc<CudaStream>) -> Self {
        Self::new(stream, true)
    }

    /// The raw `CUstream` (null for the legacy default stream), for native work: it is
    /// captured when the stream is. Do not destroy it.
    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// The cudarc stream, for launching your own kernels and library calls with cudarc.
    ///
    /// # Safety
    /// The stream belongs to a context whose cudarc event tracking may be off (it is on the
    /// context [`crate::CudaBackend::new`] makes, see [`CudaDevice::context`]): order cudarc
    /// slices across streams yourself there. Do not begin a capture on it, or make it wait on
    /// events, through cudarc: the backend must see every capture its streams take part in to
    /// keep their memory alive. Memory your own captured work touches must outlive every
    /// replay of the graph — or be the backend's, lent with [`crate::CudaBackend::lend`]. A
    /// stream the backend made is destroyed when the backend's last handle of it goes (cudarc's
    /// handle only borrows it, so the context stays out of cudarc's multi-stream mode): do not
    /// keep a clone of the returned handle past the backend's stream.
    pub unsafe fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Whether the user made the stream (adopted with [`crate::CudaBackend::adopt_stream`]).
    pub fn is_adopted(&self) -> bool {
        self.external
    }
}

impl Drop for CuStream {
    fn drop(&mut self) {
        let slot = self
            .workspace
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(slot) = slot {
            // Before the stream goes (the fields drop after this): its GEMMs' workspace waits
            // for the stream's last work before another stream may take it.
            slot.retire(self.stream.cu_stream());
        }
        if self.made {
            // SAFETY: the backend made the stream (`create_stream`) and this is its last
            // handle; cudarc's borrowed wrapper never destroys it. Work still queued on it
            // completes first (the driver releases the stream afterwards).
            let rc = unsafe { sys::cuStreamDestroy_v2(self.stream.cu_stream()) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!(?rc, "cuStreamDestroy failed");
            }
        }
    }
}

impl CudaDevice {
    /// For a stream the user made: `Ok` unless it takes part in a capture the backend did not
    /// see it join — one begun through cudarc, or one it was forked into by a raw event wait.
    /// Work the backend issued there would be recorded without its memory kept alive for that
    /// graph. Streams the backend made are reached only through `unsafe` accessors whose
    /// contract rules such captures out, so they are not queried.
    #[inline]
    pub(crate) fn check_joined(&self, stream: &CuStream) -> DriverResult<()> {
        if stream.external {
            self.check_external(stream)
        } else {
            Ok(())
        }
    }

    #[cold]
    fn check_external(&self, stream: &CuStream) -> DriverResult<()> {
        match self.capture_id(stream)? {
            Some(id) if id != stream.joined.load(Ordering::Acquire) => {
                Err(DriverError::Api(GraphError::Unsupported {
                    what: "work on an adopted stream that takes part in a capture the backend \
                           did not see it join (a capture begun through cudarc, or a fork by a \
                           raw event wait): the graph would not keep the memory of that work \
                           alive. Begin captures with the backend (capture_begin, capture_on) \
                           and fork streams into them with its record_event/wait_event"
                        .to_owned(),
                }))
            }
            _ => Ok(()),
        }
    }

    /// After the backend began a capture on `stream` or forked it into one: remembers the
    /// capture it joined (for [`CudaDevice::check_joined`]). Infallible, as the call it
    /// follows succeeded: if the driver cannot tell the capture, work on the stream is refused
    /// until the capture ends — never issued unkept.
    pub(crate) fn note_joined(&self, stream: &CuStream) {
        if !stream.external {
            return;
        }
        match self.capture_id(stream) {
            Ok(Some(id)) => stream.joined.store(id, Ordering::Release),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the capture an adopted stream joined")
            }
        }
    }
}

impl DriverStreams for CudaDevice {
    type Stream = CuStream;

    fn default_stream(&self) -> CuStream {
        CuStream::new(self.ctx.default_stream(), false)
    }

    fn create_stream(&self) -> DriverResult<CuStream> {
        // Not cudarc's `new_stream`: that puts the context into cudarc's multi-stream mode, in
        // which cudarc's event tracking (the user's, on a context the user brought) starts
        // recording and waiting on events for every slice it touches — and a wait inside a
        // capture on an event recorded before it invalidates the capture. The backend's own
        // streams leave the user's cudarc as the user's code left it.
        self.ctx
            .bind_to_thread()
            .map_err(|e| from_cudarc(e, "cuCtxSetCurrent"))?;
        let mut raw = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: an out-parameter for a new stream of the current context (bound above).
        let rc = unsafe { sys::cuStreamCreate(&mut raw, flags) };
        check(rc, "cuStreamCreate")?;
        // SAFETY: a live stream of this context, destroyed by the `CuStream`'s drop only.
        let stream = unsafe { self.ctx.wrap_borrowed_stream(raw) };
        let mut made = CuStream::new(stream, false);
        made.made = true;
        Ok(made)
    }

    fn stream_key(&self, stream: &CuStream) -> u64 {
        stream.cu_stream() as u64
    }

    fn is_default_stream(&self, stream: &CuStream) -> bool {
        stream.cu_stream().is_null()
    }

    fn stream_synchronize(&self, stream: &CuStream) -> DriverResult<()> {
        // SAFETY: the stream is alive (the handle holds it).
        check(
            unsafe { sys::cuStreamSynchronize(stream.cu_stream()) },
            "cuStreamSynchronize",
        )
    }

    fn capture_id(&self, stream: &CuStream) -> DriverResult<Option<u64>> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0;
        // SAFETY: only the two out-parameters are requested; the others may be null.
        let rc = unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream.cu_stream(),
                &mut status,
                &mut id,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(rc, "cuStreamGetCaptureInfo")?;
        Ok((status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE).then_some(id))
    }
}
