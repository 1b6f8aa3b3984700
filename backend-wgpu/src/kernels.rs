//! The portable ops as WGSL compute pipelines, built once per device.

use wgpu::util::DeviceExt as _;

/// WGSL source of the portable ops (`fill`, `add_scalar`, `scale`, `axpy`, `axpy_self`), for
/// code that wants to build the same pipelines itself (the benchmark's hand-built baseline).
///
/// Bindings: `@group(0) @binding(0)` a uniform `Params { n: u32, a: f32, zero: u32, _pad: u32 }`
/// (`zero` must be 0: it keeps `axpy`'s product from being fused into an FMA),
/// `@binding(1)` the read-write `y`, `@binding(2)` the read-only `x` (only `axpy`). Workgroups
/// of 256 invocations; see [`dispatch_size`] for the grid.
pub const PORTABLE_OPS_WGSL: &str = include_str!("shaders/portable_ops.wgsl");

/// Invocations per workgroup in [`PORTABLE_OPS_WGSL`].
pub const WORKGROUP_SIZE: u32 = 256;

/// The most workgroups WebGPU guarantees per grid dimension.
const MAX_GROUPS_PER_DIMENSION: u32 = 65_535;

/// The workgroup grid `(x, y)` covering `len` elements with [`WORKGROUP_SIZE`] invocations each;
/// `(0, 0)` for no element. Wide grids fold into a second dimension.
///
/// ```
/// use accel_graph_wgpu::dispatch_size;
/// assert_eq!(dispatch_size(0), (0, 0));
/// assert_eq!(dispatch_size(1000), (4, 1));
/// assert_eq!(dispatch_size(65_535 * 256 + 1), (65_535, 2));
/// ```
pub fn dispatch_size(len: usize) -> (u32, u32) {
    let groups = len.div_ceil(WORKGROUP_SIZE as usize);
    if groups == 0 {
        return (0, 0);
    }
    let x = groups.min(MAX_GROUPS_PER_DIMENSION as usize);
    let y = groups.div_ceil(x);
    (x as u32, y as u32)
}

/// Which portable kernel a dispatch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    Fill,
    AddScalar,
    Scale,
    Axpy,
    AxpySelf,
}

impl Kernel {
    /// The WGSL entry point, also the node label.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::Fill => "fill",
            Kernel::AddScalar => "add_scalar",
            Kernel::Scale => "scale",
            Kernel::Axpy => "axpy",
            Kernel::AxpySelf => "axpy_self",
        }
    }

    fn reads_x(self) -> bool {
        self == Kernel::Axpy
    }
}

/// The uniform block of every portable kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    a: f32,
    /// Always 0: the shader XORs the axpy product with it so the product cannot be fused.
    zero: u32,
    pad: u32,
}

/// Pipelines and layouts of the portable ops on one device.
#[derive(Debug)]
pub(crate) struct Kernels {
    unary_layout: wgpu::BindGroupLayout,
    binary_layout: wgpu::BindGroupLayout,
    fill: wgpu::ComputePipeline,
    add_scalar: wgpu::ComputePipeline,
    scale: wgpu::ComputePipeline,
    axpy: wgpu::ComputePipeline,
    axpy_self: wgpu::ComputePipeline,
}

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

fn uniform_entry() -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl Kernels {
    /// Compiles the WGSL module and builds one pipeline per entry point.
    pub(crate) fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("accel-graph portable ops"),
            source: wgpu::ShaderSource::Wgsl(PORTABLE_OPS_WGSL.into()),
        });
        let unary_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("accel-graph unary"),
            entries: &[uniform_entry(), storage_entry(1, false)],
        });
        let binary_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("accel-graph binary"),
            entries: &[
                uniform_entry(),
                storage_entry(1, false),
                storage_entry(2, true),
            ],
        });
        let pipeline = |layout: &wgpu::BindGroupLayout, entry: &str| {
            let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(entry),
                bind_group_layouts: &[Some(layout)],
                immediate_size: 0,
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        Kernels {
            fill: pipeline(&unary_layout, "fill"),
            add_scalar: pipeline(&unary_layout, "add_scalar"),
            scale: pipeline(&unary_layout, "scale"),
            axpy: pipeline(&binary_layout, "axpy"),
            axpy_self: pipeline(&unary_layout, "axpy_self"),
            unary_layout,
            binary_layout,
        }
    }

    fn pipeline(&self, kernel: Kernel) -> &wgpu::ComputePipeline {
        match kernel {
            Kernel::Fill => &self.fill,
            Kernel::AddScalar => &self.add_scalar,
            Kernel::Scale => &self.scale,
            Kernel::Axpy => &self.axpy,
            Kernel::AxpySelf => &self.axpy_self,
        }
    }

    /// Resolves one launch of `kernel` over the first `len` elements of `y` (and `x`): the
    /// pipeline, a bind group with its own parameter block, and the grid. Everything a replay
    /// needs, so replay only encodes.
    pub(crate) fn resolve(
        &self,
        device: &wgpu::Device,
        kernel: Kernel,
        len: usize,
        a: f32,
        y: &wgpu::Buffer,
        x: Option<&wgpu::Buffer>,
    ) -> ResolvedDispatch {
        let groups = dispatch_size(len);
        let params = Params {
            n: len as u32,
            a,
            zero: 0,
            pad: 0,
        };
        let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("accel-graph params"),
            contents: bytemuck::bytes_of(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let bytes = wgpu::BufferSize::new(len as u64 * 4);
        fn bind(
            buffer: &wgpu::Buffer,
            bytes: Option<wgpu::BufferSize>,
        ) -> wgpu::BindingResource<'_> {
            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset: 0,
                size: bytes,
            })
        }
        let mut entries = vec![
            wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: bind(y, bytes),
            },
        ];
        let layout = match (kernel.reads_x(), x) {
            (true, Some(x)) => {
                entries.push(wgpu::BindGroupEntry {
                    binding: 2,
                    resource: bind(x, bytes),
                });
                &self.binary_layout
            }
            _ => &self.unary_layout,
        };
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.name()),
            layout,
            entries: &entries,
        });
        ResolvedDispatch {
            kernel,
            pipeline: self.pipeline(kernel).clone(),
            bind_group,
            groups,
        }
    }
}

/// One fully resolved kernel launch.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedDispatch {
    pub(crate) kernel: Kernel,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) bind_group: wgpu::BindGroup,
    pub(crate) groups: (u32, u32),
}

impl ResolvedDispatch {
    /// Encodes the launch into a compute pass.
    pub(crate) fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.groups.0, self.groups.1, 1);
    }
}
