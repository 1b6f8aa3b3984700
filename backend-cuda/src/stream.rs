//! Streams and events of the CUDA backend: thin handles over cudarc's types, so users can
//! launch their own work on them.

use std::{fmt, sync::Arc};

use cudarc::driver::{CudaEvent, CudaStream, sys};

/// A CUDA stream of one backend instance (clones name the same stream).
///
/// The backend's default stream is CUDA's legacy default stream (the null stream), which
/// cannot be captured; [`accel_graph_api::Backend::new_stream`] on a [`crate::CudaBackend`]
/// makes non-blocking streams.
#[derive(Clone)]
pub struct CudaStreamHandle {
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) instance: u64,
}

impl CudaStreamHandle {
    /// The cudarc stream, for launching the user's own kernels or library calls on it.
    pub fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The raw `CUstream` (null for the legacy default stream). Do not destroy it.
    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// True for the legacy default stream.
    pub fn is_legacy_default(&self) -> bool {
        self.stream.cu_stream().is_null()
    }
}

impl PartialEq for CudaStreamHandle {
    fn eq(&self, other: &Self) -> bool {
        self.instance == other.instance && self.stream.cu_stream() == other.stream.cu_stream()
    }
}

impl fmt::Debug for CudaStreamHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaStreamHandle")
            .field("cu_stream", &self.stream.cu_stream())
            .field("instance", &self.instance)
            .finish()
    }
}

/// A CUDA event (timing disabled) of one backend instance.
pub struct CudaEventHandle {
    pub(crate) event: CudaEvent,
    pub(crate) instance: u64,
}

impl CudaEventHandle {
    /// The cudarc event.
    pub fn cuda_event(&self) -> &CudaEvent {
        &self.event
    }

    /// The raw `CUevent`. Do not destroy it.
    pub fn cu_event(&self) -> sys::CUevent {
        self.event.cu_event()
    }
}

impl fmt::Debug for CudaEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaEventHandle")
            .field("cu_event", &self.event.cu_event())
            .field("instance", &self.instance)
            .finish()
    }
}
