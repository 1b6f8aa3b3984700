//! `WgpuDevice`: the wgpu backend's driver. The wgpu device, its queue and the portable-op
//! pipelines are opened once per adapter and process (like a CUDA primary context) and shared
//! by every backend instance on that adapter; each instance has its own streams and captures.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use accel_graph_api::{BackendKind, Capabilities};
use accel_graph_driver::{Driver, DriverResult, software::SoftwareCapture};

use crate::{
    adapter,
    command::Command,
    error::{poll_failure, unavailable},
    kernels::Kernels,
};

/// Every instance shares the process's wgpu devices, so captures of all of them are one
/// domain: a `global` capture forbids unsafe calls through every instance, as CUDA's global
/// mode spans the process.
const CAPTURE_DOMAIN: u64 = 0;

/// WebGPU has no device addresses; blocks get synthetic ones, counted up from here per
/// instance, so that `device_address()` names the memory (a reused pool block keeps its
/// address).
const ADDRESS_BASE: u64 = 0x7700_0000_0000;

/// An opened wgpu device, shared by the instances on its adapter.
#[derive(Debug)]
pub(crate) struct Gpu {
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    pub(crate) kernels: Kernels,
    /// Timestamp queries were granted (`Features::TIMESTAMP_QUERY`): events can time.
    pub(crate) timestamps: bool,
}

impl Gpu {
    /// The device of adapter `index` (in [`adapter::ranked`] order), opened on first use.
    /// A failure to open is remembered too: every later attempt reports it.
    fn shared(index: usize) -> Result<Arc<Gpu>, String> {
        type Opened = Mutex<HashMap<usize, Result<Arc<Gpu>, String>>>;
        static OPENED: std::sync::OnceLock<Opened> = std::sync::OnceLock::new();
        let mut opened = OPENED
            .get_or_init(Opened::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        opened
            .entry(index)
            .or_insert_with(|| match adapter::ranked().get(index) {
                Some(a) => Gpu::open(a).map(Arc::new),
                None => Err(format!("no wgpu adapter {index}")),
            })
            .clone()
    }

    fn open(adapter: &wgpu::Adapter) -> Result<Gpu, String> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        // Requested where available, so timing events can write timestamps.
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let required_features = if timestamps {
            wgpu::Features::TIMESTAMP_QUERY
        } else {
            wgpu::Features::empty()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("accel-graph"),
            required_features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| format!("request_device on '{}' failed: {e}", info.name))?;
        // wgpu's default handler panics; our calls are validated up front, so anything that
        // still reaches here is a bug to report, not a reason to abort the process.
        device.on_uncaptured_error(Arc::new(|error: wgpu::Error| {
            tracing::error!(%error, "wgpu reported an uncaptured error");
        }));
        let kernels = Kernels::new(&device)?;
        tracing::info!(adapter = %info.name, backend = ?info.backend, timestamps, "wgpu device opened");
        Ok(Gpu {
            info,
            device,
            queue,
            limits,
            kernels,
            timestamps,
        })
    }

    /// Waits until `submission` (or everything submitted, for `None`) has completed.
    pub(crate) fn wait(&self, submission: Option<&wgpu::SubmissionIndex>) -> DriverResult<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: submission.cloned(),
                timeout: None,
            })
            .map(|_| ())
            .map_err(poll_failure)
    }

    /// Whether `submission` has completed, without blocking.
    pub(crate) fn is_done(&self, submission: &wgpu::SubmissionIndex) -> DriverResult<bool> {
        // A wait with a zero timeout checks the device's fence once.
        match self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(submission.clone()),
            timeout: Some(Duration::ZERO),
        }) {
            Ok(_) => Ok(true),
            Err(wgpu::PollError::Timeout) => Ok(false),
            Err(e) => Err(poll_failure(e)),
        }
    }
}

/// The wgpu backend's driver: one backend instance's view of a shared wgpu device. Reach it
/// through [`WgpuBackend::driver`](accel_graph_driver::DriverBackend::driver) (or the
/// shortcuts on [`crate::WgpuBackend`]).
pub struct WgpuDevice {
    gpu: Arc<Gpu>,
    pub(crate) capture: SoftwareCapture<Command>,
    next_stream: AtomicU64,
    next_address: AtomicU64,
}

impl WgpuDevice {
    /// A driver on adapter `ordinal` in preference order (see [`crate::WgpuBackend::new`]).
    pub(crate) fn open(ordinal: usize) -> accel_graph_api::Result<Self> {
        let gpu = adapter::choose(ordinal)
            .and_then(Gpu::shared)
            .map_err(unavailable)?;
        Ok(WgpuDevice {
            gpu,
            capture: SoftwareCapture::default(),
            // 0 is the default stream.
            next_stream: AtomicU64::new(1),
            next_address: AtomicU64::new(ADDRESS_BASE),
        })
    }

    pub(crate) fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The wgpu device (shared by every instance on the adapter; wgpu counts references, so
    /// work issued through it cannot outlive what it uses).
    pub fn device(&self) -> &wgpu::Device {
        &self.gpu.device
    }

    /// The wgpu queue every stream submits to.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.gpu.queue
    }

    /// Facts about the adapter in use.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.gpu.info
    }

    /// The limits the device was opened with (all the adapter's).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.gpu.limits
    }

    /// A key for a new stream.
    pub(crate) fn next_stream_key(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    /// A synthetic address for a new block spanning `span` bytes.
    pub(crate) fn next_address(&self, span: u64) -> Option<u64> {
        self.next_address
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_add(span))
            .ok()
    }
}

impl Driver for WgpuDevice {
    const KIND: BackendKind = BackendKind::Wgpu;

    /// Software graphs with fork/join and enforced capture modes; host callbacks run on the
    /// calling thread once the stream's earlier work has completed (eagerly, and at their
    /// place during replay, which then blocks until they ran); timing events where the
    /// adapter has timestamp queries; graph editing (in software); no graph upload and no
    /// native work capture (wgpu has neither).
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::none(adapter::describe(&self.gpu.info));
        caps.host_callbacks = true;
        caps.multi_stream_capture = true;
        caps.uncapturable_default_stream = true;
        caps.capture_modes_enforced = true;
        caps.event_timing = self.gpu.timestamps;
        // Graph editing in software: recorded commands re-resolved in place, children
        // inlined, conditions read back when their node runs.
        caps.graph_update = true;
        caps.child_graphs = true;
        caps.conditional_nodes = true;
        caps.conditional_if_else = true;
        caps
    }

    fn capture_domain(&self) -> u64 {
        CAPTURE_DOMAIN
    }

    fn bind(&self) -> DriverResult<()> {
        // wgpu has no per-thread current device.
        Ok(())
    }

    fn synchronize(&self) -> DriverResult<()> {
        // Host functions run on the calling thread as they are reached, so the submissions
        // are all there is to wait for.
        self.gpu.wait(None)
    }
}

impl std::fmt::Debug for WgpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuDevice")
            .field("adapter", &self.gpu.info.name)
            .field("timestamps", &self.gpu.timestamps)
            .finish()
    }
}
