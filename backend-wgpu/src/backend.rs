//! `WgpuBackend`: the backend over a [`WgpuDevice`], the names of its types, its constructor
//! and its extras.

use accel_graph_api::Result;
use accel_graph_driver::DriverBackend;

use crate::WgpuDevice;

accel_graph_driver::backend_newtype! {
    /// The wgpu backend: WebGPU through wgpu (Vulkan, Metal, DX12, GL), with software graphs.
    /// Clones share the instance.
    ///
    /// WebGPU command buffers are single-use, so a graph is recorded in software: capture
    /// stores fully resolved work (pipeline, bind group, grid, copies) and replay re-encodes
    /// it into one command encoder (one compute pass per run of kernels) and one queue submit.
    /// See the [crate documentation](crate).
    ///
    /// ```no_run
    /// use accel_graph_api::prelude::*;
    /// use accel_graph_wgpu::WgpuBackend;
    ///
    /// let backend = WgpuBackend::new(0)?; // BackendUnavailable without an adapter
    /// let x = backend.alloc_from(&[0.0; 4])?;
    /// let stream = backend.new_stream()?;
    /// let mut graph = backend.graph(GraphOptions::new())?;
    /// backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
    /// graph.replay()?;
    /// assert_eq!(backend.download(&x)?, vec![1.0; 4]);
    /// # Ok::<(), GraphError>(())
    /// ```
    pub struct WgpuBackend(WgpuDevice);
}

accel_graph_driver::driver_type_aliases! {
    WgpuDevice, "wgpu": WgpuBuffer, WgpuStream, WgpuEvent, WgpuGraphImpl, WgpuGraph
}

impl WgpuBackend {
    /// Opens the backend on adapter `ordinal` of wgpu's adapters in preference order (a
    /// discrete GPU first, then integrated, virtual, other, and CPU adapters such as lavapipe
    /// last). Vulkan, Metal and DX12 are probed, GL only where none of them has an adapter;
    /// wgpu's `WGPU_BACKEND` (`gl`, `vulkan,gl`...) chooses others instead.
    /// [`ADAPTER_ENV`](crate::ADAPTER_ENV) (`ACCEL_GRAPH_WGPU_ADAPTER`: an index in that order,
    /// or a name substring) overrides the choice for every backend of the process.
    ///
    /// The wgpu device is opened once per adapter and process and shared by every backend
    /// made on it; each backend has its own streams, pools and captures, and all share one
    /// capture domain (a `global` capture forbids unsafe calls through each of them). To run
    /// on a device you opened, use [`WgpuBackend::from_device`].
    ///
    /// Errors with [`GraphError::BackendUnavailable`](accel_graph_api::GraphError) when there
    /// is no such adapter or its device cannot be opened.
    pub fn new(ordinal: usize) -> Result<Self> {
        Ok(WgpuBackend(DriverBackend::new(WgpuDevice::open(ordinal)?)))
    }

    /// The wgpu device, for native work next to the portable ops. wgpu counts references, so
    /// handing it out is safe: work submitted through it keeps what it uses alive. Work you
    /// submit on the queue yourself is not captured (`capabilities().native_work_capture` is
    /// false); issue your compute pipelines with [`WgpuBackend::dispatch`] to have them run in
    /// stream order and recorded by captures.
    pub fn device(&self) -> &wgpu::Device {
        self.driver().device()
    }

    /// The wgpu queue every stream submits to.
    pub fn queue(&self) -> &wgpu::Queue {
        self.driver().queue()
    }

    /// Facts about the adapter in use.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        self.driver().adapter_info()
    }
}
