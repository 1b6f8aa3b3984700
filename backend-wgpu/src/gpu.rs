//! `Gpu`: the wgpu device, queue and portable-op pipelines, opened once per process (like a
//! CUDA primary context) and shared by every [`crate::WgpuBackend`].

use std::sync::{Arc, OnceLock};

use accel_graph_api::{GraphError, Result};

use crate::kernels::Kernels;

/// Environment variable choosing the adapter: an index into the adapter list, or a substring of
/// the adapter's name (case-insensitive).
pub const ADAPTER_ENV: &str = "ACCEL_GRAPH_WGPU_ADAPTER";

/// The opened device.
#[derive(Debug)]
pub(crate) struct Gpu {
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    pub(crate) kernels: Kernels,
}

static GPU: OnceLock<std::result::Result<Arc<Gpu>, String>> = OnceLock::new();

fn unavailable(reason: impl Into<String>) -> GraphError {
    GraphError::BackendUnavailable {
        backend: "wgpu",
        reason: reason.into(),
    }
}

impl Gpu {
    /// The process-wide device, opened on first use. The adapter choice is read once.
    pub(crate) fn shared() -> Result<Arc<Gpu>> {
        GPU.get_or_init(|| Gpu::open().map(Arc::new))
            .clone()
            .map_err(unavailable)
    }

    fn open() -> std::result::Result<Gpu, String> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let choice = std::env::var(ADAPTER_ENV).ok();
        let adapter = choose_adapter(adapters, choice.as_deref())?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("accel-graph"),
            required_features: wgpu::Features::empty(),
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
        let kernels = Kernels::new(&device);
        tracing::info!(adapter = %info.name, backend = ?info.backend, "wgpu device opened");
        Ok(Gpu {
            info,
            device,
            queue,
            limits,
            kernels,
        })
    }

    /// Waits until `submission` (or everything submitted, for `None`) has completed.
    pub(crate) fn wait(&self, submission: Option<wgpu::SubmissionIndex>) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: submission,
                timeout: None,
            })
            .map(|_| ())
            .map_err(|e| crate::driver_error::wgpu("PollError", e.to_string()))
    }
}

/// Picks an adapter: by `choice` (index or name substring) if given, else the best: a discrete
/// GPU before integrated, virtual, other and CPU adapters (such as lavapipe), Vulkan, Metal or
/// DX12 before GL.
fn choose_adapter(
    adapters: Vec<wgpu::Adapter>,
    choice: Option<&str>,
) -> std::result::Result<wgpu::Adapter, String> {
    let names: Vec<String> = adapters
        .iter()
        .map(|a| {
            let i = a.get_info();
            format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
        })
        .collect();
    if adapters.is_empty() {
        return Err(
            "no wgpu adapter found (no Vulkan/Metal/DX12/GL driver; on Linux install \
                    a Vulkan driver such as Mesa's lavapipe)"
                .to_owned(),
        );
    }
    if let Some(choice) = choice.map(str::trim).filter(|c| !c.is_empty()) {
        let wanted = choice.to_ascii_lowercase();
        let index = match wanted.parse::<usize>() {
            Ok(i) if i < adapters.len() => Some(i),
            Ok(_) => None,
            Err(_) => adapters
                .iter()
                .position(|a| a.get_info().name.to_ascii_lowercase().contains(&wanted)),
        };
        return match index {
            Some(i) => Ok(adapters.into_iter().nth(i).expect("index checked above")),
            None => Err(format!(
                "{ADAPTER_ENV}='{choice}' matches no adapter; available: [{}]",
                names.join(", ")
            )),
        };
    }
    // Real GPUs first; among equals, native APIs before GL (fewer features, slower paths).
    let rank = |a: &wgpu::Adapter| {
        let info = a.get_info();
        let device = match info.device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        (device, info.backend == wgpu::Backend::Gl)
    };
    let best = (0..adapters.len())
        .min_by_key(|&i| rank(&adapters[i]))
        .expect("adapters is not empty");
    Ok(adapters.into_iter().nth(best).expect("index in range"))
}
