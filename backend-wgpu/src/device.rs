//! `WgpuDevice`: the wgpu backend's driver. The wgpu device, its queue and the portable-op
//! pipelines are opened once per adapter and process (like a CUDA primary context) and shared
//! by every backend instance on that adapter; a device a user brings is set up once too and
//! shared by the instances on it. Each instance has its own streams and captures.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use accel_graph_api::{BackendKind, Capabilities, GraphError, LaunchLimits};
use accel_graph_driver::{Driver, DriverResult, software::SoftwareCapture};

use crate::{
    WORKGROUP_SIZE, adapter,
    command::Command,
    error::{poll_failure, unavailable},
    gemm::GemmPipelines,
    kernels::Kernels,
};

/// The capture domain of the devices this crate opens on adapters: every instance on them
/// shares it, so a `global` capture forbids unsafe calls through every such instance, as
/// CUDA's global mode spans the process. Devices users bring ([`WgpuDevice::adopt`]) get a
/// domain each, counted up from here.
const ADAPTER_DOMAIN: u64 = 0;

/// WebGPU has no device addresses; blocks get synthetic ones, counted up from here per
/// instance, so that `device_address()` names the memory (a reused pool block keeps its
/// address).
const ADDRESS_BASE: u64 = 0x7700_0000_0000;

/// The devices opened on adapters, by adapter index (a failure to open is kept too).
type Opened = Mutex<HashMap<usize, Result<Arc<Gpu>, String>>>;
static OPENED: OnceLock<Opened> = OnceLock::new();

/// What the backend needs of a device, beyond WebGPU's compute shaders (checked by building
/// the portable-op pipelines): a message naming what `limits` lack, if anything.
fn check_requirements(limits: &wgpu::Limits) -> Result<(), String> {
    // The portable ops bind one uniform and two storage buffers; GEMM binds three storage
    // buffers and tiles of 16 x 16 invocations sharing 2 KiB of workgroup memory.
    let needs: [(&str, u64, u64); 6] = [
        (
            "max_storage_buffers_per_shader_stage",
            limits.max_storage_buffers_per_shader_stage.into(),
            3,
        ),
        (
            "max_uniform_buffers_per_shader_stage",
            limits.max_uniform_buffers_per_shader_stage.into(),
            1,
        ),
        (
            "max_compute_invocations_per_workgroup",
            limits.max_compute_invocations_per_workgroup.into(),
            u64::from(WORKGROUP_SIZE),
        ),
        (
            "max_compute_workgroup_size_x",
            limits.max_compute_workgroup_size_x.into(),
            u64::from(WORKGROUP_SIZE),
        ),
        (
            "max_compute_workgroup_storage_size",
            limits.max_compute_workgroup_storage_size.into(),
            2048,
        ),
        (
            "max_storage_buffer_binding_size",
            limits.max_storage_buffer_binding_size,
            4,
        ),
    ];
    let missing: Vec<String> = needs
        .iter()
        .filter(|(_, has, needs)| has < needs)
        .map(|(name, has, needs)| format!("{name} is {has}, at least {needs} needed"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

/// True when `a` and `b` are handles of one device. wgpu's `==` compares the ids of its core
/// library, which are indices into one `wgpu::Instance`'s registries: devices of two
/// instances can compare equal. What only the handles of one device share is its error sink
/// (one per `request_device`, also its queue's), so a validation error raised through `a`
/// is caught by a scope pushed on `b` exactly when they are one device. The error is an
/// empty-usage buffer: nothing is allocated, and a scope pushed on `a` first catches it
/// otherwise, so no uncaptured-error handler sees it.
fn same_device(a: &wgpu::Device, b: &wgpu::Device) -> bool {
    if a != b {
        // Different ids: different devices (the handles of one device share its id).
        return false;
    }
    let outer = a.push_error_scope(wgpu::ErrorFilter::Validation);
    let inner = b.push_error_scope(wgpu::ErrorFilter::Validation);
    drop(a.create_buffer(&wgpu::BufferDescriptor {
        label: Some("accel-graph device identity probe"),
        size: 4,
        usage: wgpu::BufferUsages::empty(),
        mapped_at_creation: false,
    }));
    let caught_by_b = pollster::block_on(inner.pop()).is_some();
    drop(pollster::block_on(outer.pop()));
    caught_by_b
}

/// True when `queue` has certainly submitted work `device` never did: an empty submit's index
/// past every submission the device has seen. Best effort (wgpu offers no test of a queue's
/// device that cannot disturb another device): a queue of another device that has submitted
/// less than `device` is not seen here.
fn queue_of_another_device(device: &wgpu::Device, queue: &wgpu::Queue) -> bool {
    let index = queue.submit([]);
    matches!(
        device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: Some(Duration::ZERO),
        }),
        Err(wgpu::PollError::WrongSubmissionIndex(..))
    )
}

/// An opened wgpu device (on an adapter, or brought by a user), shared by the instances on it.
#[derive(Debug)]
pub(crate) struct Gpu {
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    pub(crate) kernels: Kernels,
    /// Timestamp queries were granted (`Features::TIMESTAMP_QUERY`): events can time.
    pub(crate) timestamps: bool,
    /// The GEMM pipelines, built on first use.
    pub(crate) gemm: GemmPipelines,
    /// What empty views bind: WebGPU has no empty binding.
    pub(crate) empty: EmptyBindings,
    /// The capture domain of the instances on this device.
    domain: u64,
    /// Held around every poll of the device and every submit (a submit runs the device's
    /// maintenance too): wgpu-core 30.0.1's `Device::maintain` asserts (panics) when another
    /// thread retires submissions between its fence read and its check of the queue (fixed
    /// upstream in later releases), so one device's maintenance runs on one thread at a time.
    polls: std::sync::Mutex<()>,
}

/// Two small storage buffers an empty view binds instead of its own memory (a binding holds
/// at least one word, which an empty view at the end of its block does not have): one for
/// read-only and one for read-write bindings, as WebGPU forbids one buffer in both in a
/// dispatch. Nothing reads them: a kernel over no element touches none.
#[derive(Debug)]
pub(crate) struct EmptyBindings {
    pub(crate) read: wgpu::Buffer,
    pub(crate) write: wgpu::Buffer,
}

impl EmptyBindings {
    fn new(device: &wgpu::Device) -> Self {
        let buffer = |label| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        EmptyBindings {
            read: buffer("accel-graph empty (read)"),
            write: buffer("accel-graph empty (write)"),
        }
    }
}

impl Gpu {
    /// The device of adapter `index` (in [`adapter::ranked`] order), opened on first use.
    /// A failure to open is remembered too: every later attempt reports it.
    fn shared(index: usize) -> Result<Arc<Gpu>, String> {
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

    /// The devices users brought ([`WgpuDevice::adopt`]) that some instance still uses.
    fn adopted() -> MutexGuard<'static, Vec<Weak<Gpu>>> {
        static ADOPTED: Mutex<Vec<Weak<Gpu>>> = Mutex::new(Vec::new());
        ADOPTED.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The opened device that is `device`, if any: one this crate opened on an adapter (a
    /// backend's `device()` handed back), or one a user brought before and still uses.
    fn known(device: &wgpu::Device, adopted: &mut Vec<Weak<Gpu>>) -> Option<Arc<Gpu>> {
        adopted.retain(|g| g.strong_count() > 0);
        let opened: Vec<Arc<Gpu>> = OPENED
            .get()
            .map(|o| {
                let o = o.lock().unwrap_or_else(|e| e.into_inner());
                o.values().flatten().cloned().collect()
            })
            .unwrap_or_default();
        opened
            .into_iter()
            .chain(adopted.iter().filter_map(Weak::upgrade))
            .find(|g| same_device(&g.device, device))
    }

    /// The device a user brought: the one already known if it is (same capture domain, same
    /// pipelines), else checked and set up now as a capture domain of its own.
    fn adopt(device: wgpu::Device, queue: wgpu::Queue) -> accel_graph_api::Result<Arc<Gpu>> {
        // Held while a new device is set up, so that two threads bringing one device get one.
        let mut adopted = Gpu::adopted();
        if let Some(gpu) = Gpu::known(&device, &mut adopted) {
            if gpu.queue != queue || queue_of_another_device(&device, &queue) {
                return Err(GraphError::ArgumentMismatch(format!(
                    "WgpuBackend::from_device: the queue is not the queue of the device (on \
                     '{}'); pass the pair request_device returned",
                    gpu.info.name
                )));
            }
            return Ok(gpu);
        }
        let info = device.adapter_info();
        if queue_of_another_device(&device, &queue) {
            return Err(GraphError::ArgumentMismatch(format!(
                "WgpuBackend::from_device: the queue is not the queue of the device (on '{}'): \
                 it submitted work the device never did; pass the pair request_device returned",
                info.name
            )));
        }
        let limits = device.limits();
        check_requirements(&limits).map_err(|missing| {
            unavailable(format!(
                "the device on '{}' lacks what the backend needs: {missing}",
                info.name
            ))
        })?;
        let timestamps = device.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(ADAPTER_DOMAIN + 1);
        let domain = NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed);
        // The user's device keeps the user's uncaptured-error handler: accel-graph validates
        // its own work up front and checks users' work in error scopes.
        let gpu = Gpu::new(info, device, queue, limits, timestamps, domain).map_err(|e| {
            unavailable(format!("the device cannot run the backend's kernels: {e}"))
        })?;
        let gpu = Arc::new(gpu);
        adopted.push(Arc::downgrade(&gpu));
        tracing::info!(adapter = %gpu.info.name, domain, "wgpu device adopted");
        Ok(gpu)
    }

    fn new(
        info: wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
        limits: wgpu::Limits,
        timestamps: bool,
        domain: u64,
    ) -> Result<Gpu, String> {
        let kernels = Kernels::new(&device)?;
        let empty = EmptyBindings::new(&device);
        Ok(Gpu {
            info,
            device,
            queue,
            limits,
            kernels,
            timestamps,
            gemm: GemmPipelines::default(),
            empty,
            domain,
            polls: std::sync::Mutex::new(()),
        })
    }

    fn open(adapter: &wgpu::Adapter) -> Result<Gpu, String> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        check_requirements(&limits).map_err(|missing| {
            format!("'{}' lacks what the backend needs: {missing}", info.name)
        })?;
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
        tracing::info!(adapter = %info.name, backend = ?info.backend, timestamps, "wgpu device opened");
        Gpu::new(info, device, queue, limits, timestamps, ADAPTER_DOMAIN)
    }

    /// Submits with `submit` (a `queue.submit`, perhaps after writes into the queue) while no
    /// other thread polls or submits to the device (see [`Gpu::polls`]).
    pub(crate) fn submit(
        &self,
        submit: impl FnOnce(&wgpu::Queue) -> wgpu::SubmissionIndex,
    ) -> wgpu::SubmissionIndex {
        // Nothing is changed under the lock: a poisoned one guards nothing broken.
        let _maintenance = self.polls.lock().unwrap_or_else(|e| e.into_inner());
        submit(&self.queue)
    }

    /// Waits until `submission` (or everything submitted, for `None`) has completed.
    pub(crate) fn wait(&self, submission: Option<&wgpu::SubmissionIndex>) -> DriverResult<()> {
        // Nothing is changed under the lock: a poisoned one guards nothing broken.
        let _poll = self.polls.lock().unwrap_or_else(|e| e.into_inner());
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: submission.cloned(),
                timeout: None,
            })
            .map(|_| ())
            .map_err(poll_failure)
    }

    /// Whether `submission` has completed, without blocking: `false` also while another
    /// thread polls the device (it may be waiting for it), which only defers what the answer
    /// gates (an event query asked again, a free made later).
    pub(crate) fn is_done(&self, submission: &wgpu::SubmissionIndex) -> DriverResult<bool> {
        let _poll = match self.polls.try_lock() {
            Ok(poll) => poll,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
        };
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
        Ok(WgpuDevice::on(gpu))
    }

    /// A driver on a device the user opened (see [`crate::WgpuBackend::from_device`]).
    pub(crate) fn adopt(device: wgpu::Device, queue: wgpu::Queue) -> accel_graph_api::Result<Self> {
        Gpu::adopt(device, queue).map(WgpuDevice::on)
    }

    fn on(gpu: Arc<Gpu>) -> Self {
        WgpuDevice {
            gpu,
            capture: SoftwareCapture::default(),
            // 0 is the default stream.
            next_stream: AtomicU64::new(1),
            next_address: AtomicU64::new(ADDRESS_BASE),
        }
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

    /// The device's limits: all the adapter's for a device the backend opened, those the user
    /// asked for on a device brought with [`crate::WgpuBackend::from_device`].
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
        // The device's own limits (all the adapter's, for a device the backend opened).
        let limits = &self.gpu.limits;
        caps.launch_limits = LaunchLimits::new(
            [limits.max_compute_workgroups_per_dimension; 3],
            [
                limits.max_compute_workgroup_size_x,
                limits.max_compute_workgroup_size_y,
                limits.max_compute_workgroup_size_z,
            ],
            limits.max_compute_invocations_per_workgroup,
        );
        caps
    }

    /// One domain for the devices opened on adapters (shared by every instance on them), one
    /// per device a user brought.
    fn capture_domain(&self) -> u64 {
        self.gpu.domain
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
