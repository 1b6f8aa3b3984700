//! Portable user kernels: one definition — CUDA C (compiled at run time by NVRTC on CUDA and
//! by hipRTC on HIP), WGSL (wgpu) and a Rust host function (the mock) — launched on the current
//! stream with typed buffer and scalar arguments, and captured into graphs like the portable
//! ops, with the memory of every buffer argument kept alive by the graph.
//!
//! A kernel declares its parameters in order, so every launch is checked before it reaches a
//! device: the number of arguments, each buffer's element type, each scalar's type, and each
//! buffer's length where the kernel states one ([`Extent`]). A mismatch is
//! [`GraphError::KernelArguments`] naming the parameter.
//!
//! ```
//! use accel_graph_api::{prelude::*, kernel::{Access, Kernel, KernelArg}};
//! use accel_graph_mock::MockBackend;
//!
//! // y[i] = a * x[i] + y[i] for i < n, written once for every backend.
//! let saxpy = Kernel::new("saxpy")
//!     .buffer::<f32>("y", Access::ReadWrite)
//!     .scalar::<f32>("a")
//!     .buffer::<f32>("x", Access::Read)
//!     .scalar::<u32>("n")
//!     .cuda(r#"extern "C" __global__ void saxpy(float* y, float a, const float* x, unsigned n) {
//!         unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//!         if (i < n) y[i] = a * x[i] + y[i];
//!     }"#)
//!     .wgsl(r#"
//!         struct Scalars { a: f32, n: u32 }
//!         @group(0) @binding(0) var<storage, read_write> y: array<f32>;
//!         @group(0) @binding(1) var<storage, read> x: array<f32>;
//!         @group(0) @binding(2) var<uniform> s: Scalars;
//!         @compute @workgroup_size(256)
//!         fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
//!             if (id.x < s.n) { y[id.x] = s.a * x[id.x] + y[id.x]; }
//!         }"#)
//!     .host(|args, _launch| {
//!         let [y, a, x, n] = args else { unreachable!("four parameters") };
//!         let (a, n) = (a.scalar::<f32>(), n.scalar::<u32>() as usize);
//!         let x = x.slice::<f32>().to_vec();
//!         for (y, x) in y.slice_mut::<f32>()[..n].iter_mut().zip(&x) {
//!             *y += a * x;
//!         }
//!     });
//!
//! let b = MockBackend::new();
//! let (y, x) = (b.alloc_from(&[1.0f32; 300])?, b.alloc_from(&[2.0f32; 300])?);
//! b.launch_kernel(
//!     &saxpy,
//!     saxpy.grid_for(300),
//!     &[KernelArg::buffer(&y), KernelArg::scalar(0.5f32), KernelArg::buffer(&x), KernelArg::scalar(300u32)],
//! )?;
//! assert_eq!(b.download(&y)?, vec![2.0; 300]);
//! # Ok::<(), GraphError>(())
//! ```
//!
//! ## Bindings on each backend
//!
//! * **CUDA / HIP**: the entry point is `extern "C" __global__ void <name>(...)` with the
//!   parameters in declaration order — a buffer as a pointer to its first element (a view's
//!   first element), a scalar by value. Grids are `grid × block` threads; `block` is the
//!   kernel's ([`Kernel::block`], 256 by default).
//! * **wgpu**: the entry point `<name>`; buffer parameters are `@group(0) @binding(i)` in
//!   declaration order counting buffers only (read-only storage for [`Access::Read`],
//!   read-write otherwise, as `array<T>` of the element type, or of `u32` for elements WGSL has
//!   no type for), and the scalars, if any, one uniform struct at the next binding, fields in
//!   declaration order (4-byte scalars, the block padded to 16 bytes). A view is bound from
//!   its first element, so its byte offset must be a multiple of the adapter's
//!   `min_storage_buffer_offset_alignment` (256 bytes always is); a read-only and a written
//!   parameter on one buffer cannot be bound together in WebGPU and are refused.
//!   `@workgroup_size` must equal [`Kernel::block`]; the dispatch is `grid` workgroups.
//! * **mock**: the host function runs once per launch with every argument: buffers as copies
//!   of their views' elements (written back after the call for parameters that write), scalars
//!   by value. A panic in it is [`GraphError::KernelFailed`].
//!
//! ## Overlapping a kernel with the one before it
//!
//! A kernel launched with [`Kernel::programmatic_dependent_launch`] may begin while the kernel issued
//! before it on its stream still runs — CUDA's programmatic dependent launch, on devices of
//! compute capability 9.0 and later, eagerly and inside graphs. Its blocks can then read what
//! no earlier work writes (weights, say) while the earlier kernel drains, and wait for that
//! kernel only where they need its results. The CUDA source takes the two macros of
//! [`CUDA_GRID_DEPENDENCY`]:
//!
//! * `accel_graph_grid_wait()` — waits until the work before the kernel on its stream has
//!   completed and its writes are visible. **Every thread must call it before it touches
//!   memory that earlier work on the stream may write or read, and before it returns**: the
//!   device does not check this, and a kernel that skips it races with its predecessor. A
//!   marked kernel whose source never calls it is refused before it is compiled, on every
//!   backend ([`check_grid_dependency`]); where the call stands cannot be checked.
//! * `accel_graph_launch_dependents()` — lets the next kernel on the stream, if it is marked
//!   too, begin now (without it, when this kernel's blocks finish).
//!
//! Where the overlap is not available (HIP, other devices, a kernel compiled for an older
//! architecture, `ACCEL_GRAPH_CUDA_PROGRAMMATIC_LAUNCH=0` in the environment) the macros do
//! nothing and the kernel launches in stream order as any other; the WGSL and host versions
//! are unchanged.

mod args;
mod host;

use std::{
    any::TypeId,
    borrow::Cow,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

pub use args::{BufferArg, KernelArg, check_arguments};
pub use host::{HostArg, HostKernelFn, HostLaunch};

use crate::{Element, GraphError, Result};

/// How a kernel uses a buffer parameter: what the race sanitizer and the keep-alive of
/// captured memory go by, and how wgpu binds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only read.
    Read,
    /// Only written (the whole of it or part).
    Write,
    /// Read and written.
    ReadWrite,
}

impl Access {
    /// True for [`Access::Write`] and [`Access::ReadWrite`].
    pub fn writes(self) -> bool {
        !matches!(self, Access::Read)
    }
}

/// The type of a scalar parameter: the 4-byte types every backend passes by value (WGSL's
/// uniform scalars).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `float` / `f32`.
    F32,
    /// `unsigned int` / `u32`.
    U32,
    /// `int` / `i32`.
    I32,
}

impl ScalarType {
    /// The name, as Rust spells it.
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::F32 => "f32",
            ScalarType::U32 => "u32",
            ScalarType::I32 => "i32",
        }
    }
}

/// A scalar argument's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// An `f32`.
    F32(f32),
    /// A `u32`.
    U32(u32),
    /// An `i32`.
    I32(i32),
}

impl Scalar {
    /// Its type.
    pub fn ty(self) -> ScalarType {
        match self {
            Scalar::F32(_) => ScalarType::F32,
            Scalar::U32(_) => ScalarType::U32,
            Scalar::I32(_) => ScalarType::I32,
        }
    }

    /// The value's 4 bytes, as a kernel receives them.
    pub fn bits(self) -> u32 {
        match self {
            Scalar::F32(v) => v.to_bits(),
            Scalar::U32(v) => v,
            Scalar::I32(v) => v as u32,
        }
    }
}

/// A Rust type a kernel scalar can have (`f32`, `u32`, `i32`).
pub trait ScalarValue: Copy + sealed::Sealed {
    /// Its [`ScalarType`].
    const TYPE: ScalarType;
    /// The value as a [`Scalar`].
    fn to_scalar(self) -> Scalar;
    /// The value of a [`Scalar`] of this type.
    fn from_scalar(scalar: Scalar) -> Option<Self>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
}

macro_rules! scalar_value {
    ($t:ty, $variant:ident) => {
        impl ScalarValue for $t {
            const TYPE: ScalarType = ScalarType::$variant;
            fn to_scalar(self) -> Scalar {
                Scalar::$variant(self)
            }
            fn from_scalar(scalar: Scalar) -> Option<Self> {
                match scalar {
                    Scalar::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }

        impl From<$t> for Scalar {
            fn from(v: $t) -> Scalar {
                Scalar::$variant(v)
            }
        }
    };
}
scalar_value!(f32, F32);
scalar_value!(u32, U32);
scalar_value!(i32, I32);

/// The element type of a buffer parameter, compared by identity at launch.
#[derive(Debug, Clone, Copy)]
pub struct ElementType {
    id: TypeId,
    name: &'static str,
    size: usize,
}

impl ElementType {
    /// The element type `T`.
    pub fn of<T: Element>() -> Self {
        ElementType {
            id: TypeId::of::<T>(),
            name: T::type_name(),
            size: std::mem::size_of::<T>(),
        }
    }

    /// Its name (`f32`, `half::bf16`...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Bytes per element.
    pub fn size(&self) -> usize {
        self.size
    }

    /// True for `T`.
    pub fn is<T: Element>(&self) -> bool {
        self.id == TypeId::of::<T>()
    }

    /// The WGSL type of one array element, when WGSL has one (`f32`, `u32`, `i32`).
    pub fn wgsl(&self) -> Option<&'static str> {
        if self.is::<f32>() {
            Some("f32")
        } else if self.is::<u32>() {
            Some("u32")
        } else if self.is::<i32>() {
            Some("i32")
        } else {
            None
        }
    }
}

impl PartialEq for ElementType {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for ElementType {}

/// How many elements a buffer argument must have, in terms of the launch: checked before the
/// launch, so a kernel written for `n` elements is never handed a shorter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// Any length.
    Any,
    /// At least this many elements.
    AtLeast(usize),
    /// At least the value of the scalar parameter at this index (a `u32` or a non-negative
    /// `i32`), times `factor`.
    AtLeastScalar {
        /// Index of the scalar parameter among all parameters.
        param: usize,
        /// Multiplier.
        factor: usize,
    },
    /// At least the product of the scalar parameters at these two indices (an `m × n`
    /// matrix).
    AtLeastProduct {
        /// Index of the first scalar parameter.
        first: usize,
        /// Index of the second scalar parameter.
        second: usize,
    },
    /// At least the product of the scalar parameters at these indices (a tensor of any rank:
    /// a key/value cache of `slots × heads × positions × head_dim`). An empty list is 1.
    ///
    /// ```
    /// use accel_graph_api::kernel::{Access, Extent, Kernel};
    /// // `cache` holds `slots × heads × len × dim` elements: parameters 1 to 4.
    /// let k = Kernel::new("store")
    ///     .buffer_with_extent::<f32>("cache", Access::Write, Extent::AtLeastProductOf(&[1, 2, 3, 4]))
    ///     .scalar::<u32>("slots")
    ///     .scalar::<u32>("heads")
    ///     .scalar::<u32>("len")
    ///     .scalar::<u32>("dim");
    /// assert_eq!(k.params().len(), 5);
    /// ```
    AtLeastProductOf(&'static [usize]),
    /// At least the sum of products of scalar parameters, one product per term (a packed
    /// buffer: queries, keys and values side by side are `rows × heads × dim + 2 × rows ×
    /// kv_heads × dim`, a term repeated for a factor of 2). No terms is 0; an empty term is 1.
    ///
    /// ```
    /// use accel_graph_api::kernel::{Access, Extent, Kernel};
    /// // `qkv` holds `rows × (heads + 2 × kv_heads) × dim` elements: parameters 1 to 4.
    /// const QKV: Extent = Extent::AtLeastSumOfProducts(&[&[1, 2, 4], &[1, 3, 4], &[1, 3, 4]]);
    /// let k = Kernel::new("split_qkv")
    ///     .buffer_with_extent::<f32>("qkv", Access::Read, QKV)
    ///     .scalar::<u32>("rows")
    ///     .scalar::<u32>("heads")
    ///     .scalar::<u32>("kv_heads")
    ///     .scalar::<u32>("dim");
    /// let sizes = [0usize, 2, 8, 2, 64];
    /// assert_eq!(QKV.required(|i| Ok::<_, ()>(sizes[i])), Ok(Some(2 * 12 * 64)));
    /// ```
    AtLeastSumOfProducts(&'static [&'static [usize]]),
}

impl Extent {
    /// The elements a buffer must have, `None` for [`Extent::Any`]: `count(i)` gives the value
    /// of scalar parameter `i` as a count (its error, for a parameter that is not one, is
    /// returned as it is). Products and sums saturate at `usize::MAX`. The one evaluation of an extent,
    /// for the launch's argument check and for graph editing's.
    ///
    /// ```
    /// use accel_graph_api::kernel::Extent;
    /// let sizes = [3usize, 4, 5];
    /// let count = |i: usize| sizes.get(i).copied().ok_or(i);
    /// assert_eq!(Extent::AtLeastProductOf(&[0, 1, 2]).required(count), Ok(Some(60)));
    /// assert_eq!(Extent::AtLeastScalar { param: 1, factor: 2 }.required(count), Ok(Some(8)));
    /// assert_eq!(Extent::AtLeastProductOf(&[0, 7]).required(count), Err(7));
    /// assert_eq!(Extent::AtLeastSumOfProducts(&[&[0, 1], &[2]]).required(count), Ok(Some(17)));
    /// assert_eq!(Extent::Any.required(count), Ok(None));
    /// ```
    pub fn required<E>(
        &self,
        mut count: impl FnMut(usize) -> std::result::Result<usize, E>,
    ) -> std::result::Result<Option<usize>, E> {
        Ok(match *self {
            Extent::Any => None,
            Extent::AtLeast(n) => Some(n),
            Extent::AtLeastScalar { param, factor } => Some(count(param)?.saturating_mul(factor)),
            Extent::AtLeastProduct { first, second } => {
                Some(count(first)?.saturating_mul(count(second)?))
            }
            Extent::AtLeastProductOf(params) => Some(product(params, &mut count)?),
            Extent::AtLeastSumOfProducts(terms) => {
                Some(terms.iter().try_fold(0usize, |sum, term| {
                    Ok(sum.saturating_add(product(term, &mut count)?))
                })?)
            }
        })
    }
}

/// The product of the counts of `params`, saturating; 1 for none.
fn product<E>(
    params: &[usize],
    count: &mut impl FnMut(usize) -> std::result::Result<usize, E>,
) -> std::result::Result<usize, E> {
    params
        .iter()
        .try_fold(1usize, |product, &p| Ok(product.saturating_mul(count(p)?)))
}

/// One parameter of a kernel.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// A buffer (a view of one).
    Buffer {
        /// Its name in messages.
        name: Cow<'static, str>,
        /// The element type.
        element: ElementType,
        /// How the kernel uses it.
        access: Access,
        /// The length it must have.
        extent: Extent,
    },
    /// A scalar passed by value.
    Scalar {
        /// Its name in messages.
        name: Cow<'static, str>,
        /// Its type.
        ty: ScalarType,
    },
}

impl Param {
    /// The parameter's name.
    pub fn name(&self) -> &str {
        match self {
            Param::Buffer { name, .. } | Param::Scalar { name, .. } => name,
        }
    }
}

/// Process-wide kernel identities: what backends key their compiled modules by.
static NEXT_KERNEL: AtomicU64 = AtomicU64::new(1);

#[derive(Clone)]
struct Definition {
    id: u64,
    name: Cow<'static, str>,
    params: Vec<Param>,
    block: [u32; 3],
    cuda: Option<Cow<'static, str>>,
    cuda_options: Vec<String>,
    wgsl: Option<Cow<'static, str>>,
    host: Option<HostKernelFn>,
    programmatic: bool,
}

/// CUDA C macros for kernels launched with [`Kernel::programmatic_dependent_launch`] (see the
/// [module documentation](self#overlapping-a-kernel-with-the-one-before-it)): prepend it to
/// the kernel's CUDA source. Off NVIDIA devices of compute capability 9.0 and later (hipRTC, an
/// older architecture) both macros do nothing.
pub const CUDA_GRID_DEPENDENCY: &str = r#"
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && !defined(__HIP_PLATFORM_AMD__)
#define accel_graph_grid_wait() asm volatile("griddepcontrol.wait;" ::: "memory")
#define accel_graph_launch_dependents() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define accel_graph_grid_wait() do {} while (0)
#define accel_graph_launch_dependents() do {} while (0)
#endif
"#;

/// A portable kernel: its parameters and its sources for each backend. Cheap to clone
/// (clones share the definition, and the backends' compiled code of it).
///
/// Built once, e.g. in a `static` `LazyLock` or at start-up, then launched with
/// [`Backend::launch_kernel`](crate::Backend::launch_kernel); see the [module
/// documentation](self) for an example and for how each backend binds the parameters.
#[derive(Clone)]
pub struct Kernel {
    def: Arc<Definition>,
}

impl Kernel {
    /// A kernel whose entry point is `name` (in the CUDA C and WGSL sources), with no
    /// parameter and no source yet.
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Kernel {
            def: Arc::new(Definition {
                id: NEXT_KERNEL.fetch_add(1, Ordering::Relaxed),
                name: name.into(),
                params: Vec::new(),
                block: [256, 1, 1],
                cuda: None,
                cuda_options: Vec::new(),
                wgsl: None,
                host: None,
                programmatic: false,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Definition)) -> Self {
        let def = Arc::make_mut(&mut self.def);
        f(def);
        // An edited definition is a new kernel: compiled code of the old one must not serve.
        def.id = NEXT_KERNEL.fetch_add(1, Ordering::Relaxed);
        self
    }

    /// Adds a buffer parameter of elements `T` of any length.
    pub fn buffer<T: Element>(self, name: impl Into<Cow<'static, str>>, access: Access) -> Self {
        self.buffer_with_extent::<T>(name, access, Extent::Any)
    }

    /// Adds a buffer parameter of elements `T` that must have `extent` elements.
    pub fn buffer_with_extent<T: Element>(
        self,
        name: impl Into<Cow<'static, str>>,
        access: Access,
        extent: Extent,
    ) -> Self {
        let name = name.into();
        self.edit(|d| {
            d.params.push(Param::Buffer {
                name,
                element: ElementType::of::<T>(),
                access,
                extent,
            })
        })
    }

    /// Adds a scalar parameter of type `T` (`f32`, `u32`, `i32`).
    pub fn scalar<T: ScalarValue>(self, name: impl Into<Cow<'static, str>>) -> Self {
        let name = name.into();
        self.edit(|d| d.params.push(Param::Scalar { name, ty: T::TYPE }))
    }

    /// Sets the threads per block (the workgroup size of the WGSL entry point); 256 by default.
    /// A launch checks it against the backend's `capabilities().launch_limits` (CUDA's: at
    /// most 1,024 threads in all, none of its dimensions 0) and refuses a block beyond them as
    /// [`GraphError::KernelArguments`].
    pub fn block(self, block: [u32; 3]) -> Self {
        self.edit(|d| d.block = block)
    }

    /// Sets the CUDA C source (also compiled by hipRTC on HIP: keep to what both accept).
    pub fn cuda(self, source: impl Into<Cow<'static, str>>) -> Self {
        let source = source.into();
        self.edit(|d| d.cuda = Some(source))
    }

    /// Adds an NVRTC/hipRTC option (`-DTILE=16`, `--use_fast_math`...).
    pub fn cuda_option(self, option: impl Into<String>) -> Self {
        let option = option.into();
        self.edit(|d| d.cuda_options.push(option))
    }

    /// Sets the WGSL source.
    pub fn wgsl(self, source: impl Into<Cow<'static, str>>) -> Self {
        let source = source.into();
        self.edit(|d| d.wgsl = Some(source))
    }

    /// Sets the host function the mock runs.
    pub fn host(self, f: impl Fn(&mut [HostArg], &HostLaunch) + Send + Sync + 'static) -> Self {
        let f: HostKernelFn = Arc::new(f);
        self.edit(|d| d.host = Some(f))
    }

    /// Whether a launch of this kernel may begin before the kernel issued before it on the
    /// stream has finished, where the device can (CUDA's programmatic dependent launch, compute
    /// capability 9.0 and later); `false` by default. With `true` the CUDA source must use
    /// [`CUDA_GRID_DEPENDENCY`]'s `accel_graph_grid_wait()` in every thread before it touches
    /// memory that earlier work may write or read, and before it returns (see the [module
    /// documentation](self#overlapping-a-kernel-with-the-one-before-it)); elsewhere the kernel
    /// launches in stream order as any other. A source written for it runs correctly with
    /// `false` too (the wait then returns at once), so one source can serve both. Marked, a
    /// kernel whose source never waits is refused at its first launch or preparation
    /// ([`check_grid_dependency`]).
    pub fn programmatic_dependent_launch(self, allowed: bool) -> Self {
        self.edit(|d| d.programmatic = allowed)
    }

    /// Whether the kernel is marked [`programmatic_dependent_launch`](Self::programmatic_dependent_launch).
    pub fn is_programmatic(&self) -> bool {
        self.def.programmatic
    }

    /// The kernel's identity (clones share it; any edit makes a new one).
    pub fn id(&self) -> u64 {
        self.def.id
    }

    /// The entry point's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Param] {
        &self.def.params
    }

    /// Threads per block.
    pub fn block_dims(&self) -> [u32; 3] {
        self.def.block
    }

    /// The CUDA C source, if set.
    pub fn cuda_source(&self) -> Option<&str> {
        self.def.cuda.as_deref()
    }

    /// The NVRTC/hipRTC options.
    pub fn cuda_options(&self) -> &[String] {
        &self.def.cuda_options
    }

    /// The WGSL source, if set.
    pub fn wgsl_source(&self) -> Option<&str> {
        self.def.wgsl.as_deref()
    }

    /// The host function, if set.
    pub fn host_fn(&self) -> Option<&HostKernelFn> {
        self.def.host.as_ref()
    }

    /// The grid that covers `n` threads along x with this kernel's block:
    /// `[ceil(n / block.x), 1, 1]` (at least one block).
    pub fn grid_for(&self, n: usize) -> [u32; 3] {
        let per_block = self.def.block[0].max(1) as usize;
        let blocks = n.div_ceil(per_block).max(1);
        [u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1]
    }

    /// [`GraphError::Unsupported`] naming the source this backend (`backend`, needing
    /// `what`) would run, when the kernel lacks it.
    pub fn missing_source(&self, backend: &'static str, what: &str) -> GraphError {
        GraphError::Unsupported {
            what: format!(
                "kernel {}: no {what} source, which the {backend} backend runs (set it with \
                 Kernel::{})",
                self.name(),
                match what {
                    "CUDA C" => "cuda",
                    "WGSL" => "wgsl",
                    _ => "host",
                }
            ),
        }
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.def.name)
            .field("id", &self.def.id)
            .field("params", &self.def.params)
            .field("block", &self.def.block)
            .field("cuda", &self.def.cuda.is_some())
            .field("wgsl", &self.def.wgsl.is_some())
            .field("host", &self.def.host.is_some())
            .field("programmatic", &self.def.programmatic)
            .finish()
    }
}

/// Refuses a kernel marked [`Kernel::programmatic_dependent_launch`] whose CUDA C never waits
/// for the kernel before it — no `accel_graph_grid_wait()`, `griddepcontrol.wait` or
/// `cudaGridDependencySynchronize()` outside [`CUDA_GRID_DEPENDENCY`]'s own definitions — as
/// [`GraphError::KernelFailed`], on every backend before the kernel is compiled: on a device
/// that overlaps it, such a kernel would read its predecessor's output unfinished. Where the
/// wait stands in the source cannot be checked; that it is missing can.
pub fn check_grid_dependency(kernel: &Kernel) -> Result<()> {
    let Some(source) = kernel.cuda_source().filter(|_| kernel.is_programmatic()) else {
        return Ok(());
    };
    let own = source.replace(CUDA_GRID_DEPENDENCY, "");
    let waits = [
        "accel_graph_grid_wait(",
        "griddepcontrol.wait",
        "cudaGridDependencySynchronize(",
    ];
    if waits.iter().any(|w| own.contains(w)) {
        return Ok(());
    }
    Err(GraphError::KernelFailed {
        kernel: kernel.name().to_owned(),
        message: "it is marked programmatic_dependent_launch(true) but its CUDA C never waits \
                  for the kernel before it: call accel_graph_grid_wait() (CUDA_GRID_DEPENDENCY) \
                  in every thread before touching memory earlier work uses, or do not mark it"
            .to_owned(),
    })
}

/// Validates a launch of `kernel` over `grid` against the device's `limits` (its backend's
/// [`Capabilities::launch_limits`](crate::Capabilities)): every dimension of the grid and of
/// the kernel's block at least 1 and within the limits, and the block's threads in all too.
/// Anything else is [`GraphError::KernelArguments`], before the launch reaches a device (where
/// CUDA would refuse it as an invalid value, and the mock would run it).
pub fn check_grid(
    kernel: &Kernel,
    grid: [u32; 3],
    limits: &crate::capabilities::LaunchLimits,
) -> Result<()> {
    let refuse = |message: String| {
        Err(GraphError::KernelArguments {
            kernel: kernel.name().to_owned(),
            message,
        })
    };
    let block = kernel.block_dims();
    if grid.contains(&0) {
        return refuse(format!("grid {grid:?} has an empty dimension"));
    }
    if block.contains(&0) {
        return refuse(format!(
            "block {block:?} has an empty dimension (set it with Kernel::block)"
        ));
    }
    if let Some(axis) = beyond(grid, limits.max_grid) {
        return refuse(format!(
            "grid {grid:?} exceeds this device's {:?} blocks per dimension (along {axis})",
            limits.max_grid
        ));
    }
    if let Some(axis) = beyond(block, limits.max_block) {
        return refuse(format!(
            "block {block:?} exceeds this device's {:?} threads per dimension (along {axis})",
            limits.max_block
        ));
    }
    // In u64: three u32 factors of up to 2^32 would overflow a u32 product.
    let threads: u64 = block.iter().map(|&d| u64::from(d)).product();
    if threads > u64::from(limits.max_threads_per_block) {
        return refuse(format!(
            "block {block:?} has {threads} threads; this device runs at most {} per block",
            limits.max_threads_per_block
        ));
    }
    Ok(())
}

/// The first axis (`x`, `y`, `z`) along which `dims` exceeds `max`.
fn beyond(dims: [u32; 3], max: [u32; 3]) -> Option<&'static str> {
    ["x", "y", "z"]
        .into_iter()
        .zip(dims.into_iter().zip(max))
        .find_map(|(axis, (d, m))| (d > m).then_some(axis))
}
