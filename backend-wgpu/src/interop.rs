//! Users' own wgpu work in accel-graph's stream order and graphs: [`WgpuDispatch`], a
//! dispatch of a compute pipeline of the user's, issued with [`WgpuBackend::dispatch`].
//!
//! # What keeps captured memory alive
//!
//! A recorded dispatch holds its pipeline and bind groups, and wgpu counts references: every
//! `wgpu::Buffer` a bind group references lives as long as the graph holding it, whether or
//! not it was declared. So no replay can reach freed memory, in safe code, whatever is
//! declared.
//!
//! What wgpu cannot know is that an accel-graph buffer's memory is a *pool block*: when the
//! buffer is dropped its block goes back to its pool, which hands it to the next allocation
//! of a fitting size — while a graph that writes the block can still replay. The graph would
//! then write into another buffer's data. Declared memory is kept out of the pools until the
//! graph is reset or dropped, as for the portable ops. Memory is declared
//!
//! * by binding views of accel-graph buffers with [`WgpuDispatch::buffer`] (the backend builds
//!   that bind group: nothing to forget), or
//! * with [`WgpuDispatch::touch`], for accel-graph buffers your own bind groups reference
//!   (through [`WgpuBlock::buffer`](crate::WgpuBlock::buffer)).
//!
//! A buffer your bind group references and you did not declare is safe to keep alive (its
//! buffer handle outlives its replays) but not to drop while a graph can replay it.

use std::sync::Arc;

use accel_graph_api::{Backend, Element, GraphError, NodeKind, Result, View, kernel::Access};
use accel_graph_driver::{BufferMemory, DriverBuffer};

use crate::{
    WgpuBackend, WgpuDevice,
    command::Command,
    error::to_graph_error,
    kernels::{DispatchName, ResolvedDispatch},
};

/// One entry of a bind group the backend builds.
enum Entry<'a> {
    /// A view of an accel-graph buffer: its memory, first byte and bytes.
    View {
        memory: &'a BufferMemory<WgpuDevice>,
        offset: usize,
        len: usize,
        access: Access,
    },
    /// A resource of the user's.
    Resource(wgpu::BindingResource<'a>),
}

/// A dispatch of a compute pipeline of your own, issued with [`WgpuBackend::dispatch`] on the
/// backend's current stream: encoded and submitted in stream order, or — on a capturing
/// stream — recorded (pipeline, bind groups, workgroup counts) and replayed in order with the
/// portable ops, kernels and GEMMs of the graph.
///
/// Bind groups come two ways: ones you built ([`bind_group`](Self::bind_group)), and ones the
/// backend builds from the pipeline's layout with views of accel-graph buffers
/// ([`buffer`](Self::buffer)) and resources of yours ([`resource`](Self::resource)).
/// Accel-graph buffers your own bind groups reference must be declared with
/// [`touch`](Self::touch) if they may be dropped while a graph can replay the dispatch: see
/// [what keeps captured memory alive](crate#user-pipelines-in-graphs).
///
/// The pipeline and the bind groups must come from the backend's device. A mistake wgpu
/// finds (a bind group that does not fit the pipeline, a missing group) is
/// [`GraphError::KernelFailed`] from `dispatch`, not an error at a later submit.
///
/// ```no_run
/// use accel_graph_api::{prelude::*, kernel::Access};
/// use accel_graph_wgpu::{WgpuBackend, WgpuDispatch};
///
/// let backend = WgpuBackend::new(0)?;
/// let module = backend.device().create_shader_module(wgpu::ShaderModuleDescriptor {
///     label: None,
///     source: wgpu::ShaderSource::Wgsl(
///         "@group(0) @binding(0) var<storage, read_write> v: array<f32>;
///          @compute @workgroup_size(64) fn twice(@builtin(global_invocation_id) i: vec3<u32>) {
///              if (i.x < arrayLength(&v)) { v[i.x] = 2.0 * v[i.x]; }
///          }"
///         .into(),
///     ),
/// });
/// let pipeline = backend.device().create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
///     label: Some("twice"),
///     layout: None,
///     module: &module,
///     entry_point: Some("twice"),
///     compilation_options: Default::default(),
///     cache: None,
/// });
/// let x = backend.alloc_from(&[1.0f32; 100])?;
/// let stream = backend.new_stream()?;
/// let mut graph = backend.graph(GraphOptions::new())?;
/// backend.capture_on(&stream, &mut graph, || {
///     backend.add_scalar(&x, 1.0)?;
///     backend.dispatch(
///         &WgpuDispatch::new(&pipeline, [2, 1, 1]).buffer(0, 0, &x, Access::ReadWrite),
///     )
/// })?;
/// graph.replay()?;
/// assert_eq!(backend.download(&x)?, vec![4.0; 100]);
/// # Ok::<(), GraphError>(())
/// ```
pub struct WgpuDispatch<'a> {
    pipeline: &'a wgpu::ComputePipeline,
    workgroups: [u32; 3],
    label: Option<&'a str>,
    groups: Vec<(u32, wgpu::BindGroup)>,
    entries: Vec<(u32, u32, Entry<'a>)>,
    touches: Vec<(&'a BufferMemory<WgpuDevice>, Access)>,
}

impl<'a> WgpuDispatch<'a> {
    /// A dispatch of `pipeline` over `workgroups` workgroups (x, y, z), with no bind group
    /// yet.
    pub fn new(pipeline: &'a wgpu::ComputePipeline, workgroups: [u32; 3]) -> Self {
        WgpuDispatch {
            pipeline,
            workgroups,
            label: None,
            groups: Vec::new(),
            entries: Vec::new(),
            touches: Vec::new(),
        }
    }

    /// Names the dispatch in graph dumps and errors (`dispatch` by default).
    pub fn label(mut self, label: &'a str) -> Self {
        self.label = Some(label);
        self
    }

    /// Sets bind group `index` to one you built. Declare the accel-graph buffers it
    /// references with [`touch`](Self::touch).
    pub fn bind_group(mut self, index: u32, group: &wgpu::BindGroup) -> Self {
        self.groups.push((index, group.clone()));
        self
    }

    /// Binds `view` (of an accel-graph buffer of this backend) at `@group(group)
    /// @binding(binding)` of a bind group the backend builds from the pipeline's layout, as
    /// a storage buffer from the view's first element (which must lie on the adapter's
    /// `min_storage_buffer_offset_alignment`) to the word at or after its last; and declares
    /// the buffer, used as `access`.
    pub fn buffer<T: Element>(
        mut self,
        group: u32,
        binding: u32,
        view: impl Into<View<'a, DriverBuffer<WgpuDevice, T>>>,
        access: Access,
    ) -> Self {
        let view = view.into();
        self.entries.push((
            group,
            binding,
            Entry::View {
                memory: view.buffer().as_ref(),
                offset: view.byte_offset(),
                len: view.num_bytes(),
                access,
            },
        ));
        self
    }

    /// Binds a resource of yours (a buffer, texture, sampler) at `@group(group)
    /// @binding(binding)` of a bind group the backend builds.
    pub fn resource(
        mut self,
        group: u32,
        binding: u32,
        resource: wgpu::BindingResource<'a>,
    ) -> Self {
        self.entries
            .push((group, binding, Entry::Resource(resource)));
        self
    }

    /// Declares that the dispatch uses `buffer` (of this backend) as `access` through a bind
    /// group of yours, so that a graph recording it keeps the buffer's memory out of its pool
    /// until the graph is reset.
    pub fn touch<B: AsRef<BufferMemory<WgpuDevice>>>(
        mut self,
        buffer: &'a B,
        access: Access,
    ) -> Self {
        self.touches.push((buffer.as_ref(), access));
        self
    }

    /// Every accel-graph buffer the dispatch declares.
    fn declared(&self) -> impl Iterator<Item = (&'a BufferMemory<WgpuDevice>, Access)> + '_ {
        let views = self.entries.iter().filter_map(|(_, _, e)| match e {
            Entry::View { memory, access, .. } => Some((*memory, *access)),
            Entry::Resource(_) => None,
        });
        self.touches.iter().copied().chain(views)
    }
}

impl std::fmt::Debug for WgpuDispatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuDispatch")
            .field("label", &self.label)
            .field("workgroups", &self.workgroups)
            .field(
                "bind_groups",
                &self.groups.iter().map(|g| g.0).collect::<Vec<_>>(),
            )
            .field("entries", &self.entries.len())
            .field("declared", &self.declared().count())
            .finish()
    }
}

impl WgpuBackend {
    /// The backend on a wgpu device you opened, with its queue (the pair
    /// `Adapter::request_device` returned): its adapter, limits and features, and your
    /// uncaptured-error handler, which this backend leaves in place.
    ///
    /// Passing a device a backend already uses (one made by `from_device`, or a backend's own
    /// [`device()`](Self::device)) gives an instance on that device, in its capture domain; a
    /// new device is a capture domain of its own (a `global` capture on it forbids unsafe
    /// calls through the instances on it only).
    ///
    /// The device needs compute shaders and the limits the backend's kernels bind (three
    /// storage buffers and one uniform buffer per stage, 256 invocations per workgroup, 2 KiB
    /// of workgroup memory): WebGPU's defaults and wgpu's `downlevel_defaults` have them.
    /// Timing events need `Features::TIMESTAMP_QUERY` (optional:
    /// `capabilities().event_timing` says).
    ///
    /// Errors: [`GraphError::BackendUnavailable`] naming what the device lacks;
    /// [`GraphError::ArgumentMismatch`] for a known device with another queue. (A queue of
    /// another, unknown device cannot be told apart here: wgpu reports its first submit.)
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> Result<Self> {
        Ok(WgpuBackend::from(accel_graph_driver::DriverBackend::new(
            WgpuDevice::adopt(device, queue)?,
        )))
    }

    /// Issues `work` — a dispatch of a compute pipeline of yours — on the current stream:
    /// encoded and submitted now, in stream order, or recorded if the stream captures (see
    /// [`WgpuDispatch`]).
    ///
    /// Errors: [`GraphError::ForeignObject`] for a buffer of another backend instance;
    /// [`GraphError::ArgumentMismatch`] for a bind group index set twice;
    /// [`GraphError::Unsupported`] for a view whose offset the adapter cannot bind or
    /// workgroup counts beyond the adapter's; [`GraphError::KernelFailed`] with wgpu's
    /// message for a dispatch wgpu refuses; the capture's errors.
    pub fn dispatch(&self, work: &WgpuDispatch<'_>) -> Result<()> {
        let name = work.label.unwrap_or("dispatch");
        for (memory, _) in work.declared() {
            if memory.instance_id() != self.instance_id() {
                return Err(GraphError::ForeignObject { what: "buffer" });
            }
        }
        let gpu = self.driver().gpu();
        let max_groups = gpu.limits.max_compute_workgroups_per_dimension;
        if work.workgroups.iter().any(|&g| g > max_groups) {
            return Err(GraphError::Unsupported {
                what: format!(
                    "dispatch {name}: {:?} workgroups; the adapter runs at most {max_groups} per \
                     dimension",
                    work.workgroups
                ),
            });
        }
        let mut indices: Vec<u32> = work.groups.iter().map(|g| g.0).collect();
        let mut built: Vec<u32> = work.entries.iter().map(|e| e.0).collect();
        built.sort_unstable();
        built.dedup();
        indices.extend(&built);
        indices.sort_unstable();
        if let Some(w) = indices.windows(2).find(|w| w[0] == w[1]) {
            return Err(GraphError::ArgumentMismatch(format!(
                "dispatch {name}: bind group {} is set twice (a bind group of yours, and entries \
                 the backend would build a group of, are different groups)",
                w[0]
            )));
        }
        let mut groups = work.groups.clone();
        // Mistakes in the entries (a binding the layout lacks, a wrong type) are wgpu
        // validation errors: caught here, reported as this call's error.
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        for &group in &built {
            let mut entries = Vec::new();
            for (_, binding, entry) in work.entries.iter().filter(|e| e.0 == group) {
                let resource = match entry {
                    Entry::View {
                        offset,
                        len,
                        access,
                        memory,
                    } => {
                        self.view_binding(name, group, *binding, memory, *offset, *len, *access)?
                    }
                    Entry::Resource(resource) => resource.clone(),
                };
                entries.push(wgpu::BindGroupEntry {
                    binding: *binding,
                    resource,
                });
            }
            let layout = work.pipeline.get_bind_group_layout(group);
            let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(name),
                layout: &layout,
                entries: &entries,
            });
            groups.push((group, bind_group));
        }
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(GraphError::KernelFailed {
                kernel: name.to_owned(),
                message: error.to_string(),
            });
        }
        groups.sort_unstable_by_key(|g| g.0);
        let stream = self.current_stream();
        // Kept before the dispatch is recorded, as the driver layer keeps the portable ops'.
        for (memory, _) in work.declared() {
            memory.track_raw_use(stream.raw())?;
        }
        let dispatch = ResolvedDispatch::new(
            DispatchName::Named(Arc::from(name)),
            NodeKind::Kernel,
            work.pipeline.clone(),
            groups,
            work.workgroups,
        )
        .foreign();
        self.driver()
            .issue_checked(stream.raw(), Command::Dispatch(dispatch), |message| {
                accel_graph_driver::DriverError::Api(GraphError::KernelFailed {
                    kernel: name.to_owned(),
                    message,
                })
            })
            .map_err(|e| to_graph_error("dispatch", e))
    }

    /// The storage binding of bytes `offset .. offset + len` of `memory`.
    #[allow(clippy::too_many_arguments)]
    fn view_binding<'m>(
        &'m self,
        name: &str,
        group: u32,
        binding: u32,
        memory: &'m BufferMemory<WgpuDevice>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<wgpu::BindingResource<'m>> {
        let gpu = self.driver().gpu();
        if len == 0 {
            // A binding holds at least a word, which an empty view may not have.
            let empty = if access.writes() {
                &gpu.empty.write
            } else {
                &gpu.empty.read
            };
            return Ok(empty.as_entire_binding());
        }
        let align = gpu.limits.min_storage_buffer_offset_alignment;
        if !(offset as u64).is_multiple_of(u64::from(align)) {
            return Err(GraphError::Unsupported {
                what: format!(
                    "dispatch {name}: the view at @group({group}) @binding({binding}) starts {offset} \
                     bytes into its buffer; the adapter binds storage only at multiples of \
                     {align} bytes (min_storage_buffer_offset_alignment)"
                ),
            });
        }
        let size = (len as u64).next_multiple_of(4);
        let max = gpu.limits.max_storage_buffer_binding_size;
        if size > max {
            return Err(GraphError::Unsupported {
                what: format!(
                    "dispatch {name}: the view at @group({group}) @binding({binding}) is {size} \
                     bytes; the adapter binds at most {max} bytes of storage per buffer"
                ),
            });
        }
        Ok(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: memory.block().buffer(),
            offset: offset as u64,
            size: wgpu::BufferSize::new(size),
        }))
    }
}
