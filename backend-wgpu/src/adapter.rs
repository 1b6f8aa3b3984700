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
///
/// Only Vulkan, Metal and DX12 are probed, or the backends `WGPU_BACKEND` names (`gl`,
/// `vulkan,gl`...); GL only when none of those has an adapter. GL's adapter would rank last
/// anyway, and probing it on a machine without a GL driver (a headless server) makes wgpu log
/// an EGL error that has nothing to do with the adapter the backend opens.
pub(crate) fn ranked() -> &'static [wgpu::Adapter] {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let asked = wgpu::Backends::from_env();
        let mut adapters = enumerate(asked.unwrap_or(wgpu::Backends::PRIMARY));
        if adapters.is_empty() && asked.is_none() {
            adapters = enumerate(wgpu::Backends::SECONDARY);
        }
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

/// The adapters of `backends`, from an instance configured by wgpu's other environment
/// variables (`WGPU_DEBUG`, `WGPU_VALIDATION`...).
fn enumerate(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    descriptor.backends = backends;
    let instance = wgpu::Instance::new(descriptor);
    pollster::block_on(instance.enumerate_adapters(backends))
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

#[cfg(test)]
mod tests {
    /// Without `WGPU_BACKEND`, the adapters are all GL or none is: GL is probed only where no
    /// other API has an adapter (on a machine with lavapipe, probing it too would list Mesa's
    /// GL adapter beside the Vulkan one, and log EGL's errors where GL has no driver).
    #[test]
    fn gl_is_probed_only_where_no_other_api_has_an_adapter() {
        if wgpu::Backends::from_env().is_some() {
            // The user chose the backends.
            return;
        }
        let adapters = super::ranked();
        let names: Vec<String> = adapters
            .iter()
            .map(|a| super::describe(&a.get_info()))
            .collect();
        let gl = adapters
            .iter()
            .filter(|a| a.get_info().backend == wgpu::Backend::Gl)
            .count();
        assert!(
            gl == 0 || gl == adapters.len(),
            "GL probed beside other APIs: {names:?}"
        );
    }
}
