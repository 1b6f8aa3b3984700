//! `HipBackend`: the backend over a HIP device (the same file with or without the `runtime`
//! feature: without it, `HipDevice::open` says why there is no device).

use accel_graph_api::Result;
use accel_graph_driver::DriverBackend;

use crate::HipDevice;

accel_graph_driver::backend_newtype! {
    /// The HIP backend: one device of the HIP runtime (`libamdhip64`). Clones share the
    /// device; separately created backends are independent instances.
    ///
    /// Capture is HIP's own stream capture (`hipStreamBeginCapture`) on the thread's current
    /// stream, so anything issued on that stream is captured: the portable ops, and the user's
    /// own kernels and library calls on the stream's raw handle (see the crate documentation
    /// for what the caller must keep alive then).
    ///
    /// ```no_run
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_hip::HipBackend;
    ///
    /// let backend = HipBackend::new(0)?; // BackendUnavailable without a device
    /// let x = backend.alloc_from(&[0.0; 4])?;
    /// let stream = backend.new_stream()?;
    /// let mut graph = backend.graph(GraphOptions::new())?;
    /// backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
    /// graph.replay()?;
    /// assert_eq!(backend.download(&x)?, vec![1.0; 4]);
    /// # Ok::<(), GraphError>(())
    /// ```
    pub struct HipBackend(HipDevice);
}

impl HipBackend {
    /// Opens HIP device `ordinal`. Without a usable runtime or device (no AMD GPU, driver not
    /// loaded, an ordinal past the device count), or in a build without the `runtime` feature,
    /// the error is [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) saying why
    /// (HIP's error name and text where the runtime refused).
    pub fn new(ordinal: usize) -> Result<Self> {
        Ok(HipBackend(DriverBackend::new(HipDevice::open(ordinal)?)))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.driver().ordinal()
    }

    /// `hipRuntimeGetVersion` of the loaded runtime (e.g. 50221153 for ROCm 5.2).
    pub fn runtime_version(&self) -> i32 {
        self.driver().runtime_version()
    }
}

#[cfg(feature = "runtime")]
impl HipBackend {
    /// The raw `hipStream_t` of this thread's current stream (null: the default stream), for
    /// native work that should be captured with the backend's ops. Using it is `unsafe` FFI;
    /// its contract is [`crate::HStream::raw`]'s.
    pub fn current_raw_stream(&self) -> hip_sys::hiprt::hipStream_t {
        accel_graph_api::Backend::current_stream(self).raw().raw()
    }
}
