//! Which adapter a backend opens: wgpu's adapters in preference order, and the environment
//! override.

use std::sync::OnceLock;

/// Environment variable choosing the adapter for every backend of the process: an index into
/// the adapters in preference order (as [`crate::WgpuBackend::new`]'s ordinal), or a
/// substring of the adapter's name (case-insensitive).
pub const ADAPTER_ENV: &str = "ACCEL_GRAPH_WGPU_ADAPTER";

/// Every adapter wgpu finds, best first: a discrete GPU before integrated, virtual, other and
/// CPU adapters (such as lavapipe); among equals, Vulkan, Metal or DX12 before GL (fewer
/// features, slower paths). Enumerated once per process.
pub(crate) fn ranked() -> &'static [wgpu::Adapter] {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        adapters.sort_by_key(|a| {
            let info = a.get_info();
            let device = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => 0,
                wgpu::DeviceType::IntegratedGpu => 1,
                wgpu::DeviceType::VirtualGpu => 2,
                wgpu::DeviceType::Other => 3,
                wgpu::DeviceType::Cpu => 4,
            };
            (device, info.backend == wgpu::Backend::Gl)
        });
        adapters
    })
}

/// `name (backend, device type)` of an adapter, as capabilities and errors show it.
pub(crate) fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type)
}

/// The index into [`ranked`] of the adapter to open for `ordinal`, unless [`ADAPTER_ENV`]
/// names another.
pub(crate) fn choose(ordinal: usize) -> Result<usize, String> {
    choose_among(
        ranked(),
        ordinal,
        std::env::var(ADAPTER_ENV).ok().as_deref(),
    )
}

fn choose_among(
    adapters: &[wgpu::Adapter],
    ordinal: usize,
    choice: Option<&str>,
) -> Result<usize, String> {
    let names = || {
        let list: Vec<String> = adapters.iter().map(|a| describe(&a.get_info())).collect();
        list.join(", ")
    };
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
            Ok(i) => Some(i).filter(|&i| i < adapters.len()),
            Err(_) => adapters
                .iter()
                .position(|a| a.get_info().name.to_ascii_lowercase().contains(&wanted)),
        };
        return index.ok_or_else(|| {
            format!(
                "{ADAPTER_ENV}='{choice}' matches no adapter; available: [{}]",
                names()
            )
        });
    }
    if ordinal < adapters.len() {
        Ok(ordinal)
    } else {
        Err(format!(
            "no wgpu adapter {ordinal}: {} found [{}]",
            adapters.len(),
            names()
        ))
    }
}
