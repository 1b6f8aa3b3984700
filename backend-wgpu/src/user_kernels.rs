//! Users' kernels and GEMM on wgpu.
//!
//! A kernel's WGSL is checked when it loads (parsed by naga for the entry point and its
//! workgroup size, then compiled by the device inside an error scope), and becomes a pipeline
//! with an explicit layout made from the kernel's parameters: buffer parameter `i` at
//! `@group(0) @binding(i)` (read-only storage for [`Access::Read`], read-write otherwise),
//! the scalars in one uniform block at the binding after the last buffer. A launch binds
//! each view from its first element, packs the scalars, and is recorded like the portable ops
//! when its stream captures.

use std::sync::Arc;

use accel_graph_api::{
    FloatType, Gemm, GraphError, NodeKind,
    kernel::{Access, Kernel, Param},
};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, RawArg},
};
use wgpu::util::DeviceExt as _;

use crate::{
    WgpuBlock, WgpuDevice, WgpuStreamState,
    command::Command,
    kernels::{DispatchName, ResolvedDispatch},
};

/// A user kernel built for a device: its pipeline and the layout of its bindings.
#[derive(Debug)]
pub struct WgpuKernelModule {
    name: Arc<str>,
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

fn failed(kernel: &Kernel, message: impl Into<String>) -> DriverError {
    DriverError::Api(GraphError::KernelFailed {
        kernel: kernel.name().to_owned(),
        message: message.into(),
    })
}

fn unsupported(kernel: &Kernel, what: String) -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: format!("kernel {} on wgpu: {what}", kernel.name()),
    })
}

/// Bytes of the uniform block holding `scalars` 4-byte scalars: WGSL's uniform structs are
/// sized in 16-byte steps.
fn scalar_block_bytes(scalars: usize) -> u64 {
    (scalars as u64 * 4).next_multiple_of(16)
}

/// Checks with naga, before the device compiles it, that the WGSL parses and has a compute
/// entry point named after the kernel whose workgroup size is the kernel's block: a message
/// naming the mistake beats the device's validation error (or a wrong result, for the size).
fn check_entry_point(kernel: &Kernel, source: &str) -> DriverResult<()> {
    let module = wgpu::naga::front::wgsl::parse_str(source)
        .map_err(|e| failed(kernel, e.emit_to_string(source)))?;
    let Some(entry) = module
        .entry_points
        .iter()
        .find(|e| e.name == kernel.name() && e.stage == wgpu::naga::ShaderStage::Compute)
    else {
        let names: Vec<&str> = module
            .entry_points
            .iter()
            .filter(|e| e.stage == wgpu::naga::ShaderStage::Compute)
            .map(|e| e.name.as_str())
            .collect();
        return Err(failed(
            kernel,
            format!(
                "the WGSL has no compute entry point named {} (it has: [{}])",
                kernel.name(),
                names.join(", ")
            ),
        ));
    };
    // Sizes set by pipeline overrides are the user's to keep right.
    if entry.workgroup_size_overrides.is_none() && entry.workgroup_size != kernel.block_dims() {
        return Err(failed(
            kernel,
            format!(
                "@workgroup_size{:?} differs from the kernel's block {:?}: set Kernel::block \
                 to the WGSL's workgroup size",
                entry.workgroup_size,
                kernel.block_dims()
            ),
        ));
    }
    Ok(())
}

impl WgpuDevice {
    /// The bound range of a view for a kernel: from its first byte (which must lie on the
    /// adapter's storage offset alignment) to the word at or after its last. Empty views bind
    /// a small buffer of their own.
    fn kernel_binding<'a>(
        &'a self,
        kernel: &Kernel,
        index: usize,
        bytes: &Bytes<'a, WgpuBlock>,
        access: Access,
    ) -> DriverResult<wgpu::BindingResource<'a>> {
        let gpu = self.gpu();
        if bytes.len == 0 {
            let empty = if access.writes() {
                &gpu.empty.write
            } else {
                &gpu.empty.read
            };
            return Ok(empty.as_entire_binding());
        }
        let align = gpu.limits.min_storage_buffer_offset_alignment;
        if !(bytes.offset as u64).is_multiple_of(u64::from(align)) {
            return Err(unsupported(
                kernel,
                format!(
                    "parameter {index} ({}) is a view starting {} bytes into its buffer; a view \
                     is bound from its first element, and this adapter binds storage only at \
                     multiples of {align} bytes (min_storage_buffer_offset_alignment): start \
                     the view there, or pass the whole buffer and an offset scalar",
                    kernel.params()[index].name(),
                    bytes.offset
                ),
            ));
        }
        let size = (bytes.len as u64).next_multiple_of(4);
        let max = gpu.limits.max_storage_buffer_binding_size;
        if size > max {
            return Err(unsupported(
                kernel,
                format!(
                    "parameter {index} ({}) binds {size} bytes; the adapter binds at most {max} \
                     bytes of storage per buffer",
                    kernel.params()[index].name()
                ),
            ));
        }
        Ok(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: bytes.block.buffer(),
            offset: bytes.offset as u64,
            size: wgpu::BufferSize::new(size),
        }))
    }

    /// Issues `command`, a dispatch built from objects that wgpu validates only when it is
    /// encoded, so that a mistake is this call's typed error (`error` makes it from wgpu's
    /// message) instead of an uncaptured error at some later submit: on a capturing stream
    /// the command is encoded once, inside an error scope, before it is recorded (a replay
    /// only encodes what was recorded); eagerly its submit runs inside the scope.
    pub(crate) fn issue_checked(
        &self,
        stream: &WgpuStreamState,
        command: Command,
        error: impl FnOnce(String) -> DriverError,
    ) -> DriverResult<()> {
        let gpu = self.gpu();
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        if self.capture.capture_id(stream.key()).is_some() {
            drop(crate::command::encode_run(
                &gpu.device,
                std::slice::from_ref(&command),
            ));
            if let Some(e) = pollster::block_on(scope.pop()) {
                return Err(error(e.to_string()));
            }
            return self.issue(stream, command);
        }
        let issued = self.issue(stream, command);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(error(e.to_string()));
        }
        issued
    }
}

impl WgpuDevice {
    /// The dispatch that launches `kernel` over `grid` with `args`: checked against the
    /// adapter's limits and WebGPU's binding rules, bound, ready to issue or to set into a
    /// node (an update).
    pub(crate) fn resolve_kernel(
        &self,
        module: &WgpuKernelModule,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, WgpuBlock>],
    ) -> DriverResult<Command> {
        // The grid was checked against the device's limits (its capabilities' launch limits)
        // before the launch reached the driver.
        let gpu = self.gpu();
        let buffers: Vec<(usize, Bytes<'_, WgpuBlock>, Access)> = args
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match *a {
                RawArg::Buffer { bytes, access, .. } => Some((i, bytes, access)),
                RawArg::Scalar(_) => None,
            })
            .collect();
        // WebGPU forbids one buffer bound read-only and read-write in one dispatch (and the
        // shader's access must match its binding's): such a launch cannot be bound.
        for (n, (i, x, xa)) in buffers.iter().enumerate() {
            for (j, y, ya) in &buffers[n + 1..] {
                if x.len > 0
                    && y.len > 0
                    && x.block.address() == y.block.address()
                    && xa.writes() != ya.writes()
                {
                    let name = |p: usize| kernel.params()[p].name().to_owned();
                    return Err(unsupported(
                        kernel,
                        format!(
                            "parameters {i} ({}, {xa:?}) and {j} ({}, {ya:?}) are views of one \
                             buffer; WebGPU cannot bind one buffer read-only and read-write in \
                             one dispatch: pass separate buffers, or declare both parameters \
                             Access::ReadWrite",
                            name(*i),
                            name(*j)
                        ),
                    ));
                }
            }
        }
        let mut resources = Vec::with_capacity(buffers.len() + 1);
        for (i, bytes, access) in &buffers {
            resources.push(self.kernel_binding(kernel, *i, bytes, *access)?);
        }
        let scalars: Vec<u32> = args
            .iter()
            .filter_map(|a| match a {
                RawArg::Scalar(s) => Some(s.bits()),
                RawArg::Buffer { .. } => None,
            })
            .collect();
        let uniform = (!scalars.is_empty()).then(|| {
            let mut block = scalars.clone();
            block.resize((scalar_block_bytes(scalars.len()) / 4) as usize, 0);
            gpu.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("accel-graph kernel scalars"),
                    contents: bytemuck::cast_slice(&block),
                    usage: wgpu::BufferUsages::UNIFORM,
                })
        });
        if let Some(uniform) = &uniform {
            resources.push(uniform.as_entire_binding());
        }
        let entries: Vec<wgpu::BindGroupEntry<'_>> = resources
            .into_iter()
            .enumerate()
            .map(|(binding, resource)| wgpu::BindGroupEntry {
                binding: binding as u32,
                resource,
            })
            .collect();
        // A view shorter than what the WGSL's types need is refused here by wgpu.
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.name()),
            layout: &module.layout,
            entries: &entries,
        });
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(failed(kernel, error.to_string()));
        }
        let dispatch = ResolvedDispatch::new(
            DispatchName::Named(Arc::clone(&module.name)),
            NodeKind::Kernel,
            module.pipeline.clone(),
            vec![(0, bind_group)],
            grid,
        );
        Ok(Command::Dispatch(dispatch))
    }
}

impl DriverKernels for WgpuDevice {
    type Module = WgpuKernelModule;

    fn load_kernel(&self, kernel: &Kernel) -> DriverResult<WgpuKernelModule> {
        let source = kernel
            .wgsl_source()
            .ok_or_else(|| DriverError::Api(kernel.missing_source("wgpu", "WGSL")))?;
        check_entry_point(kernel, source)?;
        let device = &self.gpu().device;
        let mut entries = Vec::new();
        let mut scalars = 0;
        for param in kernel.params() {
            match param {
                Param::Buffer { access, .. } => entries.push(wgpu::BindGroupLayoutEntry {
                    binding: entries.len() as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage {
                            read_only: *access == Access::Read,
                        },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                }),
                Param::Scalar { .. } => scalars += 1,
            }
        }
        if scalars > 0 {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: entries.len() as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    // The pipeline is refused if the WGSL's struct is larger than the scalars
                    // declared: at load, not at some launch.
                    min_binding_size: wgpu::BufferSize::new(scalar_block_bytes(scalars)),
                },
                count: None,
            });
        }
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name()),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(kernel.name()),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name()),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name()),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(kernel.name()),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(failed(
                kernel,
                format!(
                    "{error} (bindings: buffer parameters at @group(0) @binding(0..{}), read-only \
                     storage for Access::Read; {})",
                    kernel.params().len() - scalars,
                    if scalars > 0 {
                        format!(
                            "the {scalars} scalars in one uniform struct at @binding({})",
                            kernel.params().len() - scalars
                        )
                    } else {
                        "no scalar block".to_owned()
                    }
                ),
            ));
        }
        Ok(WgpuKernelModule {
            name: Arc::from(kernel.name()),
            pipeline,
            layout,
        })
    }

    unsafe fn launch_kernel(
        &self,
        module: &WgpuKernelModule,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, WgpuBlock>],
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        let command = self.resolve_kernel(module, kernel, grid, args)?;
        self.issue_checked(stream, command, |message| failed(kernel, message))
    }

    unsafe fn gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: Bytes<'_, WgpuBlock>,
        b: Bytes<'_, WgpuBlock>,
        c: Bytes<'_, WgpuBlock>,
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        let command = self.gpu().resolve_gemm(spec, dtype, a, b, c)?;
        self.issue(stream, command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_blocks_are_whole_16_byte_steps() {
        assert_eq!(scalar_block_bytes(1), 16);
        assert_eq!(scalar_block_bytes(4), 16);
        assert_eq!(scalar_block_bytes(5), 32);
    }

    #[test]
    fn entry_points_are_checked_before_the_device_sees_them() {
        let kernel = Kernel::new("k").block([64, 1, 1]).wgsl(
            "@compute @workgroup_size(64) fn k() {}\n@compute @workgroup_size(8) fn other() {}",
        );
        let source = kernel.wgsl_source().unwrap_or_default();
        assert!(check_entry_point(&kernel, source).is_ok());
        let wrong_size = kernel.clone().block([128, 1, 1]);
        let e = check_entry_point(&wrong_size, source).unwrap_err();
        assert!(format!("{e:?}").contains("workgroup_size"), "{e:?}");
        let missing = Kernel::new("absent").wgsl(source.to_owned());
        let e = check_entry_point(&missing, source).unwrap_err();
        assert!(format!("{e:?}").contains("k, other"), "{e:?}");
        let broken = Kernel::new("k").wgsl("fn k( {");
        let e = check_entry_point(&broken, "fn k( {").unwrap_err();
        assert!(matches!(
            e,
            DriverError::Api(GraphError::KernelFailed { .. })
        ));
    }
}
