//! `WgpuBackend`: the [`Backend`] implementation. Portable ops resolve their GPU objects at
//! once, then either submit them (eager) or record them into the current stream's capture.

use std::sync::{Arc, mpsc};

use accel_graph_api::{
    Backend, BackendKind, Capabilities, DeviceBuffer, GraphError, GraphOptions, HostCallback,
    MemoryStats, Result,
};

use crate::{
    capture::CaptureSession,
    command::Command,
    context::Context,
    driver_error,
    event::{EventState, WgpuEvent},
    gpu::Gpu,
    graph::WgpuGraphImpl,
    kernels::Kernel,
    memory::WgpuBuffer,
    plan,
    stream::WgpuStream,
};

/// The graph type of the wgpu backend: the shared front over [`WgpuGraphImpl`].
pub type WgpuGraph = accel_graph_api::Graph<WgpuGraphImpl>;

/// The wgpu backend: WebGPU through wgpu (Vulkan, Metal, DX12, GL), with software graphs.
///
/// WebGPU command buffers are single-use, so a graph is recorded in software: capture stores
/// fully resolved work (pipeline, bind group, grid, copies) and replay re-encodes it into one
/// command encoder (one compute pass per run of kernels) and one queue submit.
///
/// ```no_run
/// use accel_graph_api::{AcceleratorGraph, Backend, GraphOptions};
/// use accel_graph_wgpu::WgpuBackend;
///
/// let backend = WgpuBackend::new()?; // BackendUnavailable without an adapter
/// let x = backend.alloc_from(&[0.0; 4])?;
/// let stream = backend.new_stream()?;
/// let mut graph = backend.graph(GraphOptions::new())?;
/// backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))??;
/// graph.replay()?;
/// assert_eq!(backend.download(&x)?, vec![1.0; 4]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Clone)]
pub struct WgpuBackend {
    ctx: Arc<Context>,
}

impl WgpuBackend {
    /// Opens the backend on the adapter chosen by `ACCEL_GRAPH_WGPU_ADAPTER` (an index or a
    /// name substring), else the best one (a discrete GPU before integrated, virtual, other
    /// and CPU adapters). The wgpu device is opened once per process and shared by every
    /// backend made here; each backend has its own streams, pools and captures.
    ///
    /// Errors with [`GraphError::BackendUnavailable`] when no adapter (or no matching one)
    /// exists.
    pub fn new() -> Result<Self> {
        let gpu = Gpu::shared()?;
        Ok(WgpuBackend {
            ctx: Arc::new(Context::new(gpu)),
        })
    }

    /// The wgpu device, for native work next to the portable ops.
    pub fn device(&self) -> &wgpu::Device {
        &self.ctx.gpu.device
    }

    /// The wgpu queue every stream submits to.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.ctx.gpu.queue
    }

    /// Facts about the adapter in use.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.ctx.gpu.info
    }

    fn check_buffer(&self, b: &WgpuBuffer) -> Result<()> {
        if b.instance == self.ctx.instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "buffer" })
        }
    }

    fn check_stream(&self, s: &WgpuStream) -> Result<()> {
        if s.inner.instance == self.ctx.instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "stream" })
        }
    }

    fn check_event(&self, e: &WgpuEvent) -> Result<()> {
        if e.instance == self.ctx.instance {
            Ok(())
        } else {
            Err(GraphError::ForeignObject { what: "event" })
        }
    }

    /// Elements an op may touch in one binding.
    fn check_op_len(&self, op: &'static str, len: usize) -> Result<()> {
        let max_bytes = self.ctx.gpu.limits.max_storage_buffer_binding_size;
        if len > u32::MAX as usize || len as u64 * 4 > max_bytes {
            return Err(GraphError::Unsupported {
                what: format!(
                    "{op} on {len} elements: the adapter binds at most {max_bytes} bytes of \
                     storage per buffer"
                ),
            });
        }
        Ok(())
    }

    /// Issues `command` on the current stream: recorded if it is capturing, else submitted.
    fn issue(&self, command: Command) -> Result<()> {
        let stream = self.ctx.current.get();
        match stream.session() {
            Some(session) => {
                self.ensure_valid(&session)?;
                session.record(&stream, command);
                Ok(())
            }
            None => match &command {
                Command::Host(f) => plan::run_host(&self.ctx.gpu, &stream, f),
                Command::Nothing { .. } => Ok(()),
                gpu_work => {
                    plan::submit_commands(&self.ctx.gpu, &stream, std::slice::from_ref(gpu_work));
                    Ok(())
                }
            },
        }
    }

    /// The rule for a call that waits for `stream`'s work (stream synchronize, the blocking
    /// upload and download on the current stream): on a capturing stream it fails and
    /// invalidates the capture in every mode, relaxed included, as CUDA does; elsewhere it is
    /// an unsafe call.
    fn wait_for_stream(&self, stream: &WgpuStream, operation: &'static str) -> Result<()> {
        self.check_stream(stream)?;
        if let Some(session) = stream.session() {
            self.ctx
                .rules
                .invalidate(session.id, format!("{operation} on a capturing stream"));
            return Err(GraphError::UnsafeDuringCapture {
                operation: operation.to_owned(),
                mode: session.mode,
            });
        }
        self.ctx.rules.check_unsafe_call(operation)
    }

    /// Fails with `CaptureInvalidated` if `session` was invalidated.
    fn ensure_valid(&self, session: &CaptureSession) -> Result<()> {
        match self.ctx.rules.invalidation(session.id) {
            Some(reason) => Err(GraphError::CaptureInvalidated { reason }),
            None => Ok(()),
        }
    }

    /// Fails with `CaptureInvalidated` if the current stream records into an invalidated
    /// capture; used before work is resolved so an invalid capture costs no GPU objects.
    fn check_capture_valid(&self) -> Result<()> {
        match self.ctx.current.get().session() {
            Some(session) => self.ensure_valid(&session),
            None => Ok(()),
        }
    }

    fn kernel(&self, op: &'static str, kernel: Kernel, y: &WgpuBuffer, a: f32) -> Result<()> {
        self.check_buffer(y)?;
        self.check_op_len(op, y.len)?;
        self.check_capture_valid()?;
        let command = if y.len == 0 {
            Command::Nothing {
                kind: accel_graph_api::NodeKind::Kernel,
                label: op,
            }
        } else {
            Command::Dispatch(self.ctx.gpu.kernels.resolve(
                &self.ctx.gpu.device,
                kernel,
                y.len,
                a,
                y.raw(),
                None,
            ))
        };
        self.issue(command)
    }

    fn bytes_for(len: usize) -> Result<usize> {
        len.checked_mul(4).ok_or(GraphError::OutOfMemory {
            backend: "wgpu",
            requested_bytes: usize::MAX,
        })
    }
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.ctx.gpu.info.name)
            .field("instance", &self.ctx.instance)
            .finish()
    }
}

impl Backend for WgpuBackend {
    type Stream = WgpuStream;
    type Event = WgpuEvent;
    type Buffer = WgpuBuffer;
    type Graph = WgpuGraph;

    fn kind(&self) -> BackendKind {
        BackendKind::Wgpu
    }

    fn instance_id(&self) -> u64 {
        self.ctx.instance
    }

    /// Software graphs with fork/join and enforced capture modes; host callbacks run on the
    /// calling thread once the stream's earlier work has completed (eagerly, and at their
    /// place during replay, which then blocks until they ran); no graph upload and no native
    /// work capture (wgpu has neither).
    fn capabilities(&self) -> Capabilities {
        let info = &self.ctx.gpu.info;
        Capabilities {
            device_name: format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type),
            native_graphs: false,
            host_callbacks: true,
            multi_stream_capture: true,
            uncapturable_default_stream: true,
            capture_modes_enforced: true,
            graph_upload: false,
            native_work_capture: false,
        }
    }

    fn default_stream(&self) -> WgpuStream {
        self.ctx.current.default_stream().clone()
    }

    fn new_stream(&self) -> Result<WgpuStream> {
        Ok(WgpuStream::new(
            self.ctx.next_stream_id(),
            self.ctx.instance,
            true,
        ))
    }

    fn current_stream(&self) -> WgpuStream {
        self.ctx.current.get()
    }

    fn set_current_stream(&self, stream: &WgpuStream) -> WgpuStream {
        self.ctx.current.set(stream.clone())
    }

    fn synchronize(&self) -> Result<()> {
        // A device-wide wait conflicts with every capture in progress, in every mode and from
        // every thread, as `cuCtxSynchronize` does.
        self.ctx.rules.check_device_synchronize("synchronize")?;
        self.ctx.gpu.wait(None)
    }

    fn stream_synchronize(&self, stream: &WgpuStream) -> Result<()> {
        self.wait_for_stream(stream, "stream_synchronize")?;
        let last = stream.state().last_submission.clone();
        match last {
            Some(index) => self.ctx.gpu.wait(Some(index)),
            None => Ok(()),
        }
    }

    fn is_capturing(&self, stream: &WgpuStream) -> Result<bool> {
        self.check_stream(stream)?;
        Ok(stream.session().is_some())
    }

    fn new_event(&self) -> Result<WgpuEvent> {
        Ok(WgpuEvent::new(self.ctx.next_event_id(), self.ctx.instance))
    }

    fn record_event(&self, event: &WgpuEvent) -> Result<()> {
        self.check_event(event)?;
        let stream = self.ctx.current.get();
        let new_state = match stream.session() {
            Some(session) => {
                self.ensure_valid(&session)?;
                EventState::Captured {
                    nodes: session.frontier(&stream),
                    session: Arc::downgrade(&session),
                }
            }
            None => EventState::Submitted(stream.state().last_submission.clone()),
        };
        *event.state() = new_state;
        Ok(())
    }

    fn wait_event(&self, event: &WgpuEvent) -> Result<()> {
        self.check_event(event)?;
        let stream = self.ctx.current.get();
        let recorded = event.state().clone();
        let waiting_in = stream.session();
        match (recorded, waiting_in) {
            // Every stream feeds the same in-order queue: work submitted before the event is
            // ahead of anything this stream submits next.
            (EventState::Unrecorded, _) | (EventState::Submitted(_), None) => Ok(()),
            (EventState::Submitted(_), Some(own)) => {
                self.ensure_valid(&own)?;
                let err = accel_graph_api::EmulatedCudaError::CaptureIsolation.error(
                    "wgpu",
                    "a capturing stream waited on an event recorded outside the capture",
                );
                self.ctx.rules.invalidate(own.id, err.to_string());
                Err(err)
            }
            (EventState::Captured { session, nodes }, None) => {
                let Some(session) = session.upgrade().filter(|s| s.is_open()) else {
                    return Err(accel_graph_api::EmulatedCudaError::CaptureIsolation.error(
                        "wgpu",
                        "waited outside capture on an event recorded inside a capture",
                    ));
                };
                self.ensure_valid(&session)?;
                if !stream.inner.capturable {
                    let err = accel_graph_api::EmulatedCudaError::CaptureUnsupported
                        .error("wgpu", "the default stream cannot join a capture");
                    self.ctx.rules.invalidate(session.id, err.to_string());
                    return Err(err);
                }
                // Fork: the stream joins the capture, after the event's nodes.
                stream.state().capture = Some(Arc::clone(&session));
                session.join(&stream, &nodes);
                Ok(())
            }
            (EventState::Captured { session, nodes }, Some(own)) => {
                self.ensure_valid(&own)?;
                if !session.upgrade().is_some_and(|s| Arc::ptr_eq(&s, &own)) {
                    let err = accel_graph_api::EmulatedCudaError::CaptureMerge.error(
                        "wgpu",
                        "a capturing stream waited on an event recorded in another capture",
                    );
                    self.ctx.rules.invalidate(own.id, err.to_string());
                    return Err(err);
                }
                // Join: the stream's next work also depends on the event's nodes.
                own.join(&stream, &nodes);
                Ok(())
            }
        }
    }

    fn event_synchronize(&self, event: &WgpuEvent) -> Result<()> {
        self.check_event(event)?;
        self.ctx.rules.check_unsafe_call("event_synchronize")?;
        let state = event.state().clone();
        match state {
            EventState::Submitted(Some(index)) => self.ctx.gpu.wait(Some(index)),
            EventState::Submitted(None) | EventState::Unrecorded => Ok(()),
            EventState::Captured { .. } => Err(accel_graph_api::EmulatedCudaError::CapturedEvent
                .error(
                    "wgpu",
                    "event_synchronize on an event recorded in a capture",
                )),
        }
    }

    fn alloc(&self, len: usize) -> Result<WgpuBuffer> {
        let bytes = Self::bytes_for(len)?;
        let allocation = match self.ctx.current.get().session() {
            Some(session) => {
                self.ensure_valid(&session)?;
                self.ctx.pools.alloc_in(session.pool, bytes)?
            }
            None => {
                self.ctx.rules.check_unsafe_call("alloc")?;
                self.ctx.pools.alloc_plain(bytes)?
            }
        };
        Ok(WgpuBuffer::new(
            &self.ctx.pools,
            allocation,
            len,
            self.ctx.instance,
        ))
    }

    fn upload(&self, dst: &WgpuBuffer, src: &[f32]) -> Result<()> {
        self.check_buffer(dst)?;
        if src.len() != dst.len {
            return Err(GraphError::LengthMismatch {
                op: "upload",
                expected: dst.len,
                got: src.len(),
            });
        }
        self.wait_for_stream(&self.ctx.current.get(), "upload")?;
        if src.is_empty() {
            return Ok(());
        }
        // wgpu stages the bytes at once, so `src` is free on return; the empty submit makes
        // the staged write part of the queue's order right now.
        self.ctx
            .gpu
            .queue
            .write_buffer(dst.raw(), 0, bytemuck::cast_slice(src));
        let index = self.ctx.gpu.queue.submit([]);
        self.ctx.current.get().state().last_submission = Some(index);
        Ok(())
    }

    fn download(&self, src: &WgpuBuffer) -> Result<Vec<f32>> {
        self.check_buffer(src)?;
        self.wait_for_stream(&self.ctx.current.get(), "download")?;
        if src.len == 0 {
            return Ok(Vec::new());
        }
        let gpu = &self.ctx.gpu;
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("accel-graph download"),
            size: src.byte_len(),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        encoder.copy_buffer_to_buffer(src.raw(), 0, &staging, 0, src.byte_len());
        let index = gpu.queue.submit([encoder.finish()]);
        let (tx, rx) = mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        gpu.wait(Some(index))?;
        let mapped = rx
            .recv()
            .map_err(|_| driver_error::wgpu("MapAsync", "the map callback never ran"))?;
        mapped.map_err(|e| driver_error::wgpu("MapAsync", e.to_string()))?;
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| driver_error::wgpu("GetMappedRange", e.to_string()))?;
        let out = bytemuck::cast_slice::<u8, f32>(&view).to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }

    fn memory_stats(&self) -> MemoryStats {
        self.ctx.pools.stats()
    }

    fn fill(&self, x: &WgpuBuffer, value: f32) -> Result<()> {
        self.kernel("fill", Kernel::Fill, x, value)
    }

    fn copy(&self, dst: &WgpuBuffer, src: &WgpuBuffer) -> Result<()> {
        self.check_buffer(dst)?;
        self.check_buffer(src)?;
        if dst.len != src.len {
            return Err(GraphError::LengthMismatch {
                op: "copy",
                expected: dst.len,
                got: src.len,
            });
        }
        self.check_capture_valid()?;
        let command = if dst.len == 0 || dst.device_address() == src.device_address() {
            // WebGPU forbids a copy within one buffer; onto itself it changes nothing.
            Command::Nothing {
                kind: accel_graph_api::NodeKind::Memcpy,
                label: "copy (no-op)",
            }
        } else {
            Command::Copy {
                src: src.raw().clone(),
                dst: dst.raw().clone(),
                bytes: dst.byte_len(),
            }
        };
        self.issue(command)
    }

    fn add_scalar(&self, x: &WgpuBuffer, c: f32) -> Result<()> {
        self.kernel("add_scalar", Kernel::AddScalar, x, c)
    }

    fn scale(&self, x: &WgpuBuffer, a: f32) -> Result<()> {
        self.kernel("scale", Kernel::Scale, x, a)
    }

    fn axpy(&self, y: &WgpuBuffer, a: f32, x: &WgpuBuffer) -> Result<()> {
        self.check_buffer(y)?;
        self.check_buffer(x)?;
        if y.len != x.len {
            return Err(GraphError::LengthMismatch {
                op: "axpy",
                expected: y.len,
                got: x.len,
            });
        }
        if y.device_address() == x.device_address() {
            // One buffer cannot be bound read-only and read-write in one dispatch.
            return self.kernel("axpy", Kernel::AxpySelf, y, a);
        }
        self.check_op_len("axpy", y.len)?;
        self.check_capture_valid()?;
        let command = if y.len == 0 {
            Command::Nothing {
                kind: accel_graph_api::NodeKind::Kernel,
                label: "axpy",
            }
        } else {
            Command::Dispatch(self.ctx.gpu.kernels.resolve(
                &self.ctx.gpu.device,
                Kernel::Axpy,
                y.len,
                a,
                y.raw(),
                Some(x.raw()),
            ))
        };
        self.issue(command)
    }

    fn host_callback(&self, f: HostCallback) -> Result<()> {
        self.check_capture_valid()?;
        self.issue(Command::Host(f))
    }

    fn graph(&self, options: GraphOptions) -> Result<WgpuGraph> {
        accel_graph_api::Graph::new(WgpuGraphImpl::new(Arc::clone(&self.ctx)), options)
    }
}
