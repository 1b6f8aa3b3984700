//! CUDA streams: cudarc's `CudaStream`s of the device's context.

use std::sync::Arc;

use accel_graph_driver::{DriverResult, api::DriverStreams};
use cudarc::driver::{CudaStream, sys};

use crate::{
    CudaDevice,
    error::{check, from_cudarc},
};

/// A CUDA stream of the backend (the driver-level object behind a [`crate::CudaStreamHandle`]).
/// The default stream is CUDA's legacy stream (null), which cannot be captured; new streams are
/// non-blocking.
pub struct CuStream {
    stream: Arc<CudaStream>,
}

impl CuStream {
    /// The raw `CUstream` (null for the legacy default stream), for native work: it is
    /// captured when the stream is. Do not destroy it.
    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// The cudarc stream, for launching your own kernels and library calls with cudarc.
    ///
    /// # Safety
    /// The stream belongs to a context whose cudarc event tracking is off (see
    /// [`CudaDevice::context`]): order cudarc slices across streams yourself. Do not begin a
    /// capture on it, or make it wait on events, through cudarc: the backend must see every
    /// capture its streams take part in to keep their memory alive. Memory your own captured
    /// work touches must outlive every replay of the graph.
    pub unsafe fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DriverStreams for CudaDevice {
    type Stream = CuStream;

    fn default_stream(&self) -> CuStream {
        CuStream {
            stream: self.ctx.default_stream(),
        }
    }

    fn create_stream(&self) -> DriverResult<CuStream> {
        let stream = self
            .ctx
            .new_stream()
            .map_err(|e| from_cudarc(e, "cuStreamCreate"))?;
        Ok(CuStream { stream })
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
