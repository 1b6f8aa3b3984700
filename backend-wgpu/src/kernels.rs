//! The kernels on one device: their pipelines, built once when the device opens, and the
//! resolution of one launch (parameter block, bind group, grid). Generic over the table of
//! kernels in `ops.rs`: a new row needs nothing here.

use std::sync::Arc;

use accel_graph_api::{GraphError, NodeKind, PortableOp};
use accel_graph_driver::{DriverError, DriverResult, api::Region};
use wgpu::util::DeviceExt as _;

use crate::{
    memory::WgpuBlock,
    ops::{Kernel, PORTABLE_OPS_WGSL},
};

/// Invocations per workgroup in [`PORTABLE_OPS_WGSL`].
pub const WORKGROUP_SIZE: u32 = crate::wgsl::workgroup_size!();

/// The most workgroups WebGPU guarantees per grid dimension.
const MAX_GROUPS_PER_DIMENSION: u32 = 65_535;

/// The workgroup grid `(x, y)` covering `len` elements with [`WORKGROUP_SIZE`] invocations
/// each; `(0, 0)` for no element. Wide grids fold into a second dimension.
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
    // Launches are bounded by the storage binding size (under 2^32 bytes), so `y` fits.
    (x as u32, u32::try_from(y).unwrap_or(u32::MAX))
}

/// Refuses a kernel over more elements than one storage binding holds (a kernel binds its
/// buffers whole), or than its parameter block counts.
pub(crate) fn check_binding_size(
    limits: &wgpu::Limits,
    op: &'static str,
    len: usize,
) -> DriverResult<()> {
    let max_bytes = limits.max_storage_buffer_binding_size;
    let bytes = (len as u64).checked_mul(4);
    if u32::try_from(len).is_err() || bytes.is_none_or(|b| b > max_bytes) {
        return Err(DriverError::Api(GraphError::Unsupported {
            what: format!(
                "{op} on {len} elements: the adapter binds at most {max_bytes} bytes of \
                 storage per buffer"
            ),
        }));
    }
    Ok(())
}

/// The uniform block of every kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    a: f32,
    /// Always 0: the shader XORs products with it so that they cannot be fused.
    zero: u32,
    /// First element of `y` within its binding.
    y_off: u32,
    /// First element of `x` within its binding (within `y`'s for the `_self` entry points).
    x_off: u32,
    pad: [u32; 3],
}

/// The pipelines of one kernel.
#[derive(Debug)]
struct KernelPipelines {
    main: wgpu::ComputePipeline,
    /// The `<name>_self` entry point (kernels that read a second buffer).
    aliased: Option<wgpu::ComputePipeline>,
}

/// The pipelines and layouts of every kernel on one device.
#[derive(Debug)]
pub(crate) struct Kernels {
    unary_layout: wgpu::BindGroupLayout,
    binary_layout: wgpu::BindGroupLayout,
    /// Indexed by `Kernel as usize`.
    pipelines: Vec<KernelPipelines>,
}

fn layout_entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

fn storage(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    layout_entry(binding, wgpu::BufferBindingType::Storage { read_only })
}

/// A binding of bytes `start..end` of a block, and the element the bound range starts at.
struct Span {
    start: u64,
    end: u64,
}

impl Span {
    /// The bytes of `regions` (views of one block), widened down to the adapter's storage
    /// offset alignment: a binding may start only there, so a view's first element is passed
    /// to the shader as an offset into the binding instead.
    fn of(limits: &wgpu::Limits, regions: &[&Region<'_, WgpuBlock>]) -> Span {
        let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
        let first = regions.iter().map(|r| r.byte_offset() as u64).min();
        let end = regions
            .iter()
            .map(|r| (r.byte_offset() + r.num_bytes()) as u64)
            .max();
        let first = first.unwrap_or(0);
        Span {
            start: first / align * align,
            end: end.unwrap_or(first),
        }
    }

    /// The element `region` starts at within the binding.
    fn element_of(&self, region: &Region<'_, WgpuBlock>) -> u32 {
        ((region.byte_offset() as u64 - self.start) / 4) as u32
    }

    fn binding<'a>(&self, block: &'a WgpuBlock) -> wgpu::BindingResource<'a> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: block.buffer(),
            offset: self.start,
            size: wgpu::BufferSize::new(self.end - self.start),
        })
    }
}

impl Kernels {
    /// Compiles [`PORTABLE_OPS_WGSL`] and builds every kernel's pipelines. Errors (with
    /// wgpu's validation message) if the device rejects them.
    pub(crate) fn new(device: &wgpu::Device) -> Result<Self, String> {
        // Validation errors go to the device's logging handler otherwise; caught here, a
        // device that cannot build the kernels is unavailable instead of silently broken.
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("accel-graph portable ops"),
            source: wgpu::ShaderSource::Wgsl(PORTABLE_OPS_WGSL.into()),
        });
        let uniform = layout_entry(0, wgpu::BufferBindingType::Uniform);
        let unary_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("accel-graph unary"),
            entries: &[uniform, storage(1, false)],
        });
        let binary_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("accel-graph binary"),
            entries: &[uniform, storage(1, false), storage(2, true)],
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
        let pipelines = Kernel::ALL
            .iter()
            .map(|k| match k.self_entry() {
                Some(aliased) => KernelPipelines {
                    main: pipeline(&binary_layout, k.name()),
                    aliased: Some(pipeline(&unary_layout, aliased)),
                },
                None => KernelPipelines {
                    main: pipeline(&unary_layout, k.name()),
                    aliased: None,
                },
            })
            .collect();
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(format!("building the portable-op kernels failed: {error}"));
        }
        Ok(Kernels {
            unary_layout,
            binary_layout,
            pipelines,
        })
    }

    /// Resolves `kernel` for `op` over the elements of its operand views (the first written,
    /// the second read): the pipeline, a bind group with its own parameter block, and the
    /// grid. The length was checked by [`check_binding_size`] and is not zero.
    pub(crate) fn resolve(
        &self,
        device: &wgpu::Device,
        limits: &wgpu::Limits,
        kernel: Kernel,
        op: PortableOp<Region<'_, WgpuBlock>>,
    ) -> ResolvedDispatch {
        let (kind, a) = (op.node_kind(), op.scalar());
        let (y, x) = op.operands();
        let len = y.len;
        // Operands in one block (the same buffer, or two views of it) are bound once: WebGPU
        // forbids one buffer as read-write and read-only storage in one dispatch.
        let shared = x.filter(|x| x.block.address() == y.block.address());
        let y_span = match &shared {
            Some(x) => Span::of(limits, &[&y, x]),
            None => Span::of(limits, &[&y]),
        };
        let x_span = x
            .filter(|_| shared.is_none())
            .map(|x| Span::of(limits, &[&x]));
        let x_off = match (&shared, &x, &x_span) {
            (Some(x), _, _) => y_span.element_of(x),
            (None, Some(x), Some(span)) => span.element_of(x),
            _ => 0,
        };
        let params = Params {
            n: u32::try_from(len).unwrap_or(u32::MAX),
            a,
            zero: 0,
            y_off: y_span.element_of(&y),
            x_off,
            pad: [0; 3],
        };
        let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("accel-graph params"),
            contents: bytemuck::bytes_of(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let mut entries = vec![
            wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: y_span.binding(y.block),
            },
        ];
        let pipelines = &self.pipelines[kernel as usize];
        let (entry, pipeline, layout) = match (x, kernel.self_entry(), &pipelines.aliased) {
            // One buffer read and written: the entry point reading `x` from `y`'s binding.
            (Some(_), Some(entry), Some(aliased)) if shared.is_some() => {
                (entry, aliased, &self.unary_layout)
            }
            (Some(x), Some(_), Some(_)) => {
                if let Some(span) = &x_span {
                    entries.push(wgpu::BindGroupEntry {
                        binding: 2,
                        resource: span.binding(x.block),
                    });
                }
                (kernel.name(), &pipelines.main, &self.binary_layout)
            }
            _ => (kernel.name(), &pipelines.main, &self.unary_layout),
        };
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout,
            entries: &entries,
        });
        let (x, y) = dispatch_size(len);
        ResolvedDispatch::new(
            DispatchName::Op(entry),
            kind,
            pipeline.clone(),
            vec![(0, bind_group)],
            [x, y, 1],
        )
    }
}

/// What a dispatch shows as in labels: a portable op's entry point (with its 1-D workgroups),
/// or the name of a user kernel, a GEMM or a user pipeline, made once per kernel or launch.
#[derive(Debug, Clone)]
pub(crate) enum DispatchName {
    /// A portable op's entry point.
    Op(&'static str),
    /// Anything else.
    Named(Arc<str>),
}

/// One fully resolved kernel launch: everything a replay needs, so a replay only encodes.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedDispatch {
    name: DispatchName,
    kind: NodeKind,
    pipeline: wgpu::ComputePipeline,
    /// Bind groups and their indices.
    bind_groups: Vec<(u32, wgpu::BindGroup)>,
    groups: [u32; 3],
    /// The dispatch binds resources its user owns (a user pipeline's bind groups), which may
    /// be destroyed or mapped after capture: replays of it check for validation errors.
    foreign: bool,
}

impl ResolvedDispatch {
    /// A dispatch of `pipeline` over `groups` workgroups with `bind_groups`.
    pub(crate) fn new(
        name: DispatchName,
        kind: NodeKind,
        pipeline: wgpu::ComputePipeline,
        bind_groups: Vec<(u32, wgpu::BindGroup)>,
        groups: [u32; 3],
    ) -> Self {
        ResolvedDispatch {
            name,
            kind,
            pipeline,
            bind_groups,
            groups,
            foreign: false,
        }
    }

    /// Marks the dispatch as binding resources its user owns.
    pub(crate) fn foreign(mut self) -> Self {
        self.foreign = true;
        self
    }

    /// True when the dispatch binds resources its user owns.
    pub(crate) fn is_foreign(&self) -> bool {
        self.foreign
    }

    /// The node kind the launch shows as.
    pub(crate) fn kind(&self) -> NodeKind {
        self.kind
    }

    /// The node label: entry point or name, and grid.
    pub(crate) fn label(&self) -> String {
        let [x, y, z] = self.groups;
        match &self.name {
            DispatchName::Op(entry) => format!("{entry} grid=({x},{y}) x {WORKGROUP_SIZE}"),
            DispatchName::Named(name) => format!("{name} grid=({x},{y},{z})"),
        }
    }

    /// Encodes the launch into a compute pass.
    pub(crate) fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        for (index, group) in &self.bind_groups {
            pass.set_bind_group(*index, group, &[]);
        }
        let [x, y, z] = self.groups;
        pass.dispatch_workgroups(x, y, z);
    }
}
