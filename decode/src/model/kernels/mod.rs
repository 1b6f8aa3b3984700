//! The decoder's kernels, each one definition ([`accel_graph::kernel::Kernel`]): CUDA C (NVRTC
//! on CUDA, hipRTC on HIP) for every element type, WGSL for `f32` (wgpu), and a host function
//! for the mock. Each host function calls the `pub fn` of its file that computes the kernel's
//! result on host slices: that function is the kernel's reference, and the host reference of
//! the whole model ([`super::reference`]) calls the same functions, so on the mock the engine
//! equals the reference bit for bit.
//!
//! The CUDA kernels compute in `f32` and round once per stored element, as the host functions
//! do. Where the host's order of operations is cheap to follow (RMSNorm's fixed reduction tree,
//! RoPE, the argmax) they follow it with `__fmul_rn` / `__fadd_rn` (never contracted into a
//! fused multiply-add), so those kernels equal the host on a GPU too; the attention's and
//! SwiGLU's `expf` and the attention's reduction order differ from the host's in the last
//! bits.

pub mod argmax;
pub mod attention;
pub mod embed;
pub mod linear;
pub mod qkv_rope;
pub mod rmsnorm;
pub mod rope;
pub mod swiglu;

use std::{
    any::TypeId,
    collections::HashMap,
    sync::{Arc, Mutex},
};

use accel_graph::{
    Backend, DeviceBuffer, GraphError, Result,
    kernel::{CUDA_GRID_DEPENDENCY, HostArg, Kernel, KernelArg},
};

use crate::DecodeElement;

/// Every kernel of the decoder for one element type.
#[derive(Debug)]
pub struct Kernels {
    /// [`embed`].
    pub embed: Kernel,
    /// [`rmsnorm`].
    pub rmsnorm: Kernel,
    /// [`rope`]: RoPE on queries and keys, keys and values stored into the cache.
    pub rope_kv: Kernel,
    /// [`attention`]: the one-kernel form.
    pub attention: Kernel,
    /// [`attention`]: the flash-decoding form's chunks.
    pub attention_split: Kernel,
    /// [`attention`]: the flash-decoding form's merge.
    pub attention_combine: Kernel,
    /// [`swiglu`].
    pub swiglu: Kernel,
    /// [`argmax`].
    pub argmax: Kernel,
    /// [`linear`]: the small-batch projections taking one row a pass (steps of one row).
    pub one_row: Projections,
    /// [`linear`]: the small-batch projections taking two rows a pass (steps of two rows).
    pub two_rows: Projections,
    /// [`linear`]: the small-batch projections of several rows: [`linear::MAX_ROWS`] rows a
    /// pass, or [`linear::TILE_ROWS`] on tensor cores ([`linear::Variant`]).
    pub rows: Projections,
}

/// The small-batch projections of [`linear`] and [`qkv_rope`] for one number of rows a pass.
#[derive(Debug)]
pub struct Projections {
    /// The projection, `beta` times the output added.
    pub linear: Kernel,
    /// RMSNorm and the projection.
    pub norm_linear: Kernel,
    /// RMSNorm, the gate and up projections and SwiGLU.
    pub norm_gate_up: Kernel,
    /// [`qkv_rope`]: RMSNorm, the QKV projection, RoPE and the cache store.
    pub norm_qkv_rope: Kernel,
    /// How they run (their blocks and grids).
    pub variant: linear::Variant,
}

impl Projections {
    fn new<T: DecodeElement>(variant: linear::Variant, overlap: bool) -> Self {
        let mark = |k: Kernel| k.programmatic_dependent_launch(overlap);
        Projections {
            linear: mark(linear::linear_kernel::<T>(variant)),
            norm_linear: mark(linear::norm_linear_kernel::<T>(variant)),
            norm_gate_up: mark(linear::norm_gate_up_kernel::<T>(variant)),
            norm_qkv_rope: mark(qkv_rope::kernel::<T>(variant)),
            variant,
        }
    }

    /// Issues `out = x · Wᵀ + beta · out` for `rows` rows of `x` (`rows × k`) and `w`
    /// (`n × k`) on the current stream: [`Projections::linear`] with its grid.
    #[allow(clippy::too_many_arguments)]
    pub fn issue_linear<B: Backend, T: DecodeElement>(
        &self,
        b: &B,
        out: &B::Buffer<T>,
        x: &B::Buffer<T>,
        w: &B::Buffer<T>,
        rows: usize,
        n: usize,
        k: usize,
        beta: f32,
    ) -> Result<()> {
        b.launch_kernel(
            &self.linear,
            self.variant.grid(n, false, k),
            &[
                KernelArg::buffer(out),
                KernelArg::buffer(x),
                KernelArg::buffer(w),
                size(rows)?,
                size(n)?,
                size(k)?,
                KernelArg::scalar(beta),
            ],
        )
    }

    /// Issues `out = rmsnorm(x) · norm · Wᵀ` (RMSNorm's `eps`) on the current stream:
    /// [`Projections::norm_linear`] with its grid.
    #[allow(clippy::too_many_arguments)]
    pub fn issue_norm_linear<B: Backend, T: DecodeElement>(
        &self,
        b: &B,
        out: &B::Buffer<T>,
        x: &B::Buffer<T>,
        norm: &B::Buffer<T>,
        w: &B::Buffer<T>,
        rows: usize,
        n: usize,
        k: usize,
        eps: f32,
    ) -> Result<()> {
        b.launch_kernel(
            &self.norm_linear,
            self.variant.grid(n, false, k),
            &[
                KernelArg::buffer(out),
                KernelArg::buffer(x),
                KernelArg::buffer(norm),
                KernelArg::buffer(w),
                size(rows)?,
                size(n)?,
                size(k)?,
                KernelArg::scalar(eps),
            ],
        )
    }

    /// Issues `act = swiglu(rmsnorm(x) · norm · [G; U]ᵀ)` on the current stream:
    /// [`Projections::norm_gate_up`] with its grid, `gate_up` holding the `inter` gate rows,
    /// then the `inter` up rows (each `k` long). A `gate_up` shorter than `2 · inter · k` is
    /// [`accel_graph::GraphError::ViewOutOfRange`].
    #[allow(clippy::too_many_arguments)]
    pub fn issue_norm_gate_up<B: Backend, T: DecodeElement>(
        &self,
        b: &B,
        act: &B::Buffer<T>,
        x: &B::Buffer<T>,
        norm: &B::Buffer<T>,
        gate_up: &B::Buffer<T>,
        rows: usize,
        inter: usize,
        k: usize,
        eps: f32,
    ) -> Result<()> {
        let half = inter.checked_mul(k).ok_or_else(|| {
            GraphError::ArgumentMismatch(format!("{inter} × {k} gate rows: past usize"))
        })?;
        b.launch_kernel(
            &self.norm_gate_up,
            self.variant.grid(inter, true, k),
            &[
                KernelArg::buffer(act),
                KernelArg::buffer(x),
                KernelArg::buffer(norm),
                KernelArg::buffer(gate_up.view(..half)?),
                KernelArg::buffer(gate_up.view(half..half.saturating_mul(2))?),
                size(rows)?,
                size(inter)?,
                size(k)?,
                KernelArg::scalar(eps),
            ],
        )
    }
}

impl Kernels {
    /// Issues `h = rmsnorm(x) · norm` for `rows` rows of `k` (RMSNorm's `eps`) on the current
    /// stream: [`rmsnorm`], a block per row.
    #[allow(clippy::too_many_arguments)]
    pub fn issue_rmsnorm<B: Backend, T: DecodeElement>(
        &self,
        b: &B,
        h: &B::Buffer<T>,
        x: &B::Buffer<T>,
        norm: &B::Buffer<T>,
        rows: usize,
        k: usize,
        eps: f32,
    ) -> Result<()> {
        b.launch_kernel(
            &self.rmsnorm,
            [u32::try_from(rows).map_err(|_| too_large(rows))?, 1, 1],
            &[
                KernelArg::buffer(h),
                KernelArg::buffer(x),
                KernelArg::buffer(norm),
                size(rows)?,
                size(k)?,
                KernelArg::scalar(eps),
            ],
        )
    }

    /// Issues `act = silu(gate) · up` for `rows` rows of `gate_up` (`inter` gate columns, then
    /// `inter` up columns per row) on the current stream: [`swiglu`].
    pub fn issue_swiglu<B: Backend, T: DecodeElement>(
        &self,
        b: &B,
        act: &B::Buffer<T>,
        gate_up: &B::Buffer<T>,
        rows: usize,
        inter: usize,
    ) -> Result<()> {
        b.launch_kernel(
            &self.swiglu,
            self.swiglu.grid_for(rows.saturating_mul(inter)),
            &[
                KernelArg::buffer(act),
                KernelArg::buffer(gate_up),
                size(rows)?,
                size(inter)?,
            ],
        )
    }
}

/// A size as the kernels' `u32` scalar; past `u32::MAX` it is
/// [`GraphError::ArgumentMismatch`].
fn size<M>(n: usize) -> Result<KernelArg<'static, M>> {
    u32::try_from(n)
        .map(KernelArg::scalar)
        .map_err(|_| too_large(n))
}

fn too_large(n: usize) -> GraphError {
    GraphError::ArgumentMismatch(format!("size {n}: the kernels take sizes up to u32::MAX"))
}

impl Kernels {
    /// The kernels for `T`, built once per process (clones of one definition share its
    /// compiled code on each backend instance), each launched in stream order.
    pub fn get<T: DecodeElement>() -> Arc<Kernels> {
        Self::cached::<T>(false)
    }

    /// The same kernels launched to overlap the kernel before them where the device can
    /// (programmatic dependent launch: every kernel's entry point first waits for the kernel
    /// before it, so launched either way it computes the same), built once per process.
    pub fn overlapped<T: DecodeElement>() -> Arc<Kernels> {
        Self::cached::<T>(true)
    }

    fn cached<T: DecodeElement>(overlap: bool) -> Arc<Kernels> {
        /// The kernels of an element type, launched to overlap or not.
        type ByElement = HashMap<(TypeId, bool), Arc<Kernels>>;
        static ALL: Mutex<Option<ByElement>> = Mutex::new(None);
        let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
        all.get_or_insert_with(HashMap::new)
            .entry((TypeId::of::<T>(), overlap))
            .or_insert_with(|| {
                let mark = |k: Kernel| k.programmatic_dependent_launch(overlap);
                Arc::new(Kernels {
                    embed: mark(embed::kernel::<T>()),
                    rmsnorm: mark(rmsnorm::kernel::<T>()),
                    rope_kv: mark(rope::kernel::<T>()),
                    attention: mark(attention::kernel::<T>()),
                    attention_split: mark(attention::split_kernel::<T>()),
                    attention_combine: mark(attention::combine_kernel::<T>()),
                    swiglu: mark(swiglu::kernel::<T>()),
                    argmax: mark(argmax::kernel::<T>()),
                    one_row: Projections::new::<T>(linear::Variant::for_rows::<T>(1), overlap),
                    two_rows: Projections::new::<T>(linear::Variant::for_rows::<T>(2), overlap),
                    rows: Projections::new::<T>(
                        linear::Variant::for_rows::<T>(linear::MAX_ROWS),
                        overlap,
                    ),
                })
            })
            .clone()
    }

    /// The small-batch projections a step of `rows` rows runs ([`linear::pass_rows`]).
    pub fn projections(&self, rows: usize) -> &Projections {
        match linear::pass_rows(rows) {
            1 => &self.one_row,
            2 => &self.two_rows,
            _ => &self.rows,
        }
    }

    /// Every kernel.
    pub fn all(&self) -> [&Kernel; 20] {
        [
            &self.embed,
            &self.rmsnorm,
            &self.rope_kv,
            &self.attention,
            &self.attention_split,
            &self.attention_combine,
            &self.swiglu,
            &self.argmax,
            &self.one_row.linear,
            &self.one_row.norm_linear,
            &self.one_row.norm_gate_up,
            &self.one_row.norm_qkv_rope,
            &self.two_rows.linear,
            &self.two_rows.norm_linear,
            &self.two_rows.norm_gate_up,
            &self.two_rows.norm_qkv_rope,
            &self.rows.linear,
            &self.rows.norm_linear,
            &self.rows.norm_gate_up,
            &self.rows.norm_qkv_rope,
        ]
    }
}

/// A kernel named `name` with the CUDA C `body` (after `T`'s prelude) and, for element types
/// WGSL has, the WGSL `wgsl`.
///
/// Every kernel here is written for programmatic dependent launch ([`Kernels::overlapped`]):
/// each thread of each entry point first waits for the kernel before it
/// (`accel_graph_grid_wait()`, in the projections through `lin_start`), before it touches the
/// step's buffers or returns, then lets the next kernel launch — so on a device that has it, a
/// kernel's blocks are scheduled while the one before it drains. Launched in stream order
/// ([`Kernels::get`]) the wait returns at once (measured on an H200: the same step time as
/// without it).
fn with_sources<T: DecodeElement>(
    kernel: Kernel,
    body: &str,
    wgsl: impl Into<std::borrow::Cow<'static, str>>,
) -> Kernel {
    // 64-bit indices without <stddef.h> (NVRTC and hipRTC compile without system headers).
    let kernel = kernel.cuda(format!(
        "typedef unsigned long long idx_t;\n{CUDA_GRID_DEPENDENCY}\n{}\n{body}",
        T::CUDA_PRELUDE
    ));
    if T::WGSL { kernel.wgsl(wgsl) } else { kernel }
}

/// A `u32` scalar argument as a `usize`.
fn scalar(arg: &HostArg) -> usize {
    arg.scalar::<u32>() as usize
}
