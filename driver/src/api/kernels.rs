//! `DriverKernels`: users' portable kernels and the GEMM op.

use accel_graph_api::{
    FloatType, Gemm,
    kernel::{Access, ElementType, Kernel, Scalar},
};

use super::{DriverOps, DriverResult};

/// Bytes `offset .. offset + len` of a block: the memory a kernel argument or a GEMM operand
/// touches.
#[derive(Debug)]
pub struct Bytes<'a, B> {
    /// The block.
    pub block: &'a B,
    /// The first byte (a view's offset into its buffer, which starts at the block's start).
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

impl<B> Clone for Bytes<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Bytes<'_, B> {}

/// One argument of a kernel launch, resolved to memory.
#[derive(Debug)]
pub enum RawArg<'a, B> {
    /// A buffer parameter's view.
    Buffer {
        /// Its bytes.
        bytes: Bytes<'a, B>,
        /// Its element type.
        element: ElementType,
        /// How the kernel uses it.
        access: Access,
    },
    /// A scalar.
    Scalar(Scalar),
}

impl<B> Clone for RawArg<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for RawArg<'_, B> {}

/// Users' kernels and the GEMM op of a driver.
pub trait DriverKernels: DriverOps {
    /// A kernel compiled and loaded for the device (a module and its function, a pipeline, a
    /// host function).
    type Module: Send + Sync + 'static;

    /// Compiles and loads `kernel` (called once per kernel and backend instance, in relaxed
    /// capture mode: it is no stream work). Errors: the kernel lacks this driver's source,
    /// the compiler is missing or rejects it.
    fn load_kernel(&self, kernel: &Kernel) -> DriverResult<Self::Module>;

    /// Launches `module` (compiled from `kernel`) over `grid` blocks on `stream` (recorded if
    /// it is capturing). `args` match the kernel's parameters (checked by the driver layer).
    ///
    /// # Safety
    /// Every buffer argument's bytes must lie inside its live block. If `stream` is
    /// capturing, the caller must keep the blocks alive as long as any executable made from
    /// the capture can launch. The kernel's own code must stay within the memory its
    /// arguments give it (the device cannot check that; the mock's host functions can).
    unsafe fn launch_kernel(
        &self,
        module: &Self::Module,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, Self::Block>],
        stream: &Self::Stream,
    ) -> DriverResult<()>;

    /// Issues the matrix product `spec` on operands of `dtype` on `stream` (recorded if it is
    /// capturing). The operands' lengths were checked against `spec`.
    ///
    /// # Safety
    /// As [`launch_kernel`](Self::launch_kernel): the operands' bytes lie inside their live
    /// blocks, kept alive by the caller while a captured product can replay.
    unsafe fn gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: Bytes<'_, Self::Block>,
        b: Bytes<'_, Self::Block>,
        c: Bytes<'_, Self::Block>,
        stream: &Self::Stream,
    ) -> DriverResult<()>;
}
