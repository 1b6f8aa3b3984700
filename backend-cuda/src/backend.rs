//! `CudaBackend`: the backend over a CUDA device.

use std::sync::Arc;

use accel_graph_api::Result;
use accel_graph_driver::DriverBackend;
use cudarc::driver::{CudaContext, CudaStream};

use crate::CudaDevice;

accel_graph_driver::backend_newtype! {
    /// The CUDA backend: one device's primary context, the driver loaded at run time through
    /// cudarc.
    ///
    /// Capture is CUDA's own stream capture (`cuStreamBeginCapture`) on the thread's current
    /// stream, so anything issued on that stream is captured: the portable ops, and the user's
    /// own kernels and library calls on the stream's raw handle (see the crate documentation
    /// for what the caller must keep alive then).
    ///
    /// ```no_run
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_cuda::CudaBackend;
    ///
    /// let backend = CudaBackend::new(0)?; // BackendUnavailable without a driver
    /// let x = backend.alloc_from(&[0.0; 4])?;
    /// let stream = backend.new_stream()?;
    /// let mut graph = backend.graph(GraphOptions::new())?;
    /// backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
    /// graph.replay()?;
    /// assert_eq!(backend.download(&x)?, vec![1.0; 4]);
    /// # Ok::<(), GraphError>(())
    /// ```
    pub struct CudaBackend(CudaDevice);
}

impl CudaBackend {
    /// Opens device `ordinal`. Without a usable driver or device the error is
    /// [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) carrying the loader's
    /// or driver's text.
    pub fn new(ordinal: usize) -> Result<Self> {
        Ok(CudaBackend(DriverBackend::new(CudaDevice::open(ordinal)?)))
    }

    /// A backend on the user's cudarc context (primary or not): the driver binds that
    /// context on every call and makes none of its own, so the backend's buffers, streams and
    /// graphs live beside the user's cudarc objects — see [`CudaBackend::adopt_stream`],
    /// [`CudaBackend::adopt_slice`] and [`CudaBackend::lend`].
    ///
    /// cudarc's event tracking is left as the context has it. Captures work either way:
    /// nothing the backend issues, nor work on adopted slices or lent buffers, involves
    /// cudarc's events. A `CudaSlice` cudarc still tracks cannot be used in a capture on a
    /// tracking context — cudarc's wait for its last write is refused by CUDA there
    /// (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`) and invalidates the capture — so adopt it
    /// first, which also has the graph keep its memory alive. The backend does not turn
    /// tracking off around its captures: the setting is the context's, for every thread, and
    /// slices allocated while it is off stay untracked for good, which would take cudarc's
    /// ordering away from unrelated code without a word.
    ///
    /// Errors: [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) if the context
    /// cannot be made current or the portable ops' kernels cannot be loaded in it.
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<Self> {
        Ok(CudaBackend(DriverBackend::new(CudaDevice::with_context(
            ctx,
        )?)))
    }

    /// Device memory `(free, total)` in bytes, from `cuMemGetInfo`.
    pub fn mem_get_info(&self) -> Result<(usize, usize)> {
        self.driver().mem_get_info()
    }

    /// This thread's current stream as a cudarc stream, for the user's own launches: work on
    /// it during a capture is captured into the graph. (With your own context and stream,
    /// [`CudaBackend::from_context`] and [`CudaBackend::adopt_stream`] need no `unsafe`.)
    ///
    /// # Safety
    /// See [`crate::CuStream::cuda_stream`]: event tracking may be off on the stream's
    /// context, captures must be begun and joined through the backend, and memory the captured
    /// work touches must outlive every replay (lend the backend's buffers to have graphs keep
    /// them). The handle must not outlive the backend's stream (the backend destroys the
    /// streams it made when they go).
    pub unsafe fn current_cuda_stream(&self) -> Arc<CudaStream> {
        let stream = accel_graph_api::Backend::current_stream(self);
        // SAFETY: the caller takes over the contract of `cuda_stream`.
        Arc::clone(unsafe { stream.raw().cuda_stream() })
    }
}
