//! A model step written once: the training step of a two-layer perceptron — forward, mean
//! squared error, backward and SGD — over any `B: Backend`, from portable user kernels
//! ([`accel_graph::kernel`]) and the portable GEMM.
//!
//! ```text
//! H = relu(X·W1 + b1)        X: batch × input,  W1: input × hidden
//! Y = H·W2 + b2              W2: hidden × output
//! loss = mean((Y - T)²)
//! dY = 2(Y - T)/n;  dW2 = Hᵀ·dY;  db2 = Σ_rows dY;  dH = (dY·W2ᵀ) ⊙ [H > 0]
//! dW1 = Xᵀ·dH;  db1 = Σ_rows dH;  θ -= lr · ∇θ       (θ = W1, b1, W2, b2)
//! ```
//!
//! Parameters and gradients each live in one flat buffer (their tensors are [views](accel_graph::View)
//! of it), so the optimizer is one `axpy` over every parameter. The step allocates its
//! activations with [`Backend::alloc`]: eagerly from the device, inside a capture from the
//! graph's pool — so the same function is the eager step and, through
//! [`accel_graph::utils::FullGraphWrapper`], the graphed one.
//!
//! ```
//! use accel_graph::prelude::*;
//! use accel_graph_examples::mlp::{Mlp, MlpShape, reference};
//!
//! let backend = accel_graph::mock::MockBackend::new();
//! let shape = MlpShape { batch: 4, input: 8, hidden: 16, output: 8 };
//! let init = Mlp::<accel_graph::mock::MockBackend>::initial_params(shape, 1);
//! let model = Mlp::new(&backend, shape, 0.1, &init)?;
//! let (x, t) = reference::inputs(shape, 2);
//! let (dx, dt) = (backend.alloc_from(&x)?, backend.alloc_from(&t)?);
//! let loss = model.step(&dx, &dt)?;
//! // The host reference does the same arithmetic in the same order: the mock equals it.
//! let mut params = init.clone();
//! let want = reference::step(shape, 0.1, &mut params, &x, &t);
//! assert_eq!(backend.download(&loss)?, vec![want]);
//! assert_eq!(backend.download(model.params())?, params);
//! # Ok::<(), GraphError>(())
//! ```

pub mod data_parallel;
mod kernels;
pub mod reference;

use std::ops::Range;

use accel_graph::{
    Backend, DeviceBuffer, Gemm, Result,
    kernel::{Kernel, KernelArg},
};

/// The sizes of the model and of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpShape {
    /// Rows of a batch.
    pub batch: usize,
    /// Features in.
    pub input: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Features out.
    pub output: usize,
}

/// Where each parameter lives in the flat parameter (and gradient) buffer. Each starts at a
/// multiple of 64 elements (256 bytes), where every backend can bind a view of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `W1`, `input × hidden`, row-major.
    pub w1: Range<usize>,
    /// `b1`, `hidden`.
    pub b1: Range<usize>,
    /// `W2`, `hidden × output`, row-major.
    pub w2: Range<usize>,
    /// `b2`, `output`.
    pub b2: Range<usize>,
    /// Elements of the flat buffer.
    pub len: usize,
}

/// Elements between the starts of two parameters: 64 (256 bytes).
const ALIGN: usize = 64;

impl MlpShape {
    /// The flat buffer's layout.
    pub fn layout(&self) -> Layout {
        let mut at = 0;
        let mut next = |len: usize| {
            let range = at..at + len;
            at = (at + len).next_multiple_of(ALIGN);
            range
        };
        let w1 = next(self.input * self.hidden);
        let b1 = next(self.hidden);
        let w2 = next(self.hidden * self.output);
        let b2 = next(self.output);
        Layout {
            w1,
            b1,
            w2,
            b2,
            len: at,
        }
    }

    /// The loss's normaliser: elements of the output, `batch · output`.
    pub fn outputs(&self) -> usize {
        self.batch * self.output
    }
}

/// Compiles (or loads from the kernel cache) every kernel of the model for `backend`, so that
/// no capture compiles them.
pub fn prepare_kernels<B: Backend>(backend: &B) -> Result<()> {
    kernels::all()
        .into_iter()
        .try_for_each(|kernel| backend.prepare_kernel(kernel))
}

/// The model on backend `B`: its parameters, gradients and learning rate.
#[derive(Debug)]
pub struct Mlp<B: Backend> {
    backend: B,
    shape: MlpShape,
    layout: Layout,
    lr: f32,
    params: B::Buffer<f32>,
    grads: B::Buffer<f32>,
}

impl<B: Backend> Mlp<B> {
    /// Deterministic initial parameters (uniform in ±1/√fan_in, as PyTorch's `nn.Linear`
    /// draws them, from a seeded generator), laid out as [`MlpShape::layout`] says.
    pub fn initial_params(shape: MlpShape, seed: u64) -> Vec<f32> {
        reference::initial_params(shape, seed)
    }

    /// The model on `backend` with parameters `params` (a [`MlpShape::layout`] image) and
    /// learning rate `lr`; compiles its kernels, so that no capture compiles them.
    pub fn new(backend: &B, shape: MlpShape, lr: f32, params: &[f32]) -> Result<Self> {
        let layout = shape.layout();
        if params.len() != layout.len {
            return Err(accel_graph::GraphError::LengthMismatch {
                op: "Mlp::new parameters",
                expected: layout.len,
                got: params.len(),
            });
        }
        prepare_kernels(backend)?;
        let grads = backend.alloc(layout.len)?;
        backend.fill(&grads, 0.0)?;
        Ok(Mlp {
            backend: backend.clone(),
            shape,
            params: backend.alloc_from(params)?,
            grads,
            layout,
            lr,
        })
    }

    /// The flat parameter buffer.
    pub fn params(&self) -> &B::Buffer<f32> {
        &self.params
    }

    /// The model's sizes.
    pub fn shape(&self) -> MlpShape {
        self.shape
    }

    fn launch(
        &self,
        kernel: &Kernel,
        threads: usize,
        args: &[KernelArg<'_, B::Memory>],
    ) -> Result<()> {
        self.backend
            .launch_kernel(kernel, kernel.grid_for(threads), args)
    }

    /// One training step on inputs `x` (`batch × input`) and targets `t` (`batch × output`),
    /// issued on the current stream: updates the parameters in place and returns the loss (one
    /// element, computed before the update).
    pub fn step(&self, x: &B::Buffer<f32>, t: &B::Buffer<f32>) -> Result<B::Buffer<f32>> {
        self.step_with(x, t, |_| Ok(()))
    }

    /// [`Mlp::step`] with a hook on the gradients: `reduce` gets the flat gradient buffer
    /// (laid out as the parameters) after the backward pass and before the SGD update, on the
    /// current stream. A data-parallel step all-reduces it there
    /// ([`DataParallelMlp`](data_parallel::DataParallelMlp)).
    pub fn step_with(
        &self,
        x: &B::Buffer<f32>,
        t: &B::Buffer<f32>,
        reduce: impl FnOnce(&B::Buffer<f32>) -> Result<()>,
    ) -> Result<B::Buffer<f32>> {
        let (b, s, l) = (&self.backend, self.shape, &self.layout);
        let (p, g) = (&self.params, &self.grads);
        let (n_hidden, n_out) = (s.batch * s.hidden, s.outputs());
        let scalar = |n: usize| KernelArg::scalar(n as u32);
        // Forward.
        let h = b.alloc::<f32>(n_hidden)?;
        b.gemm(
            &Gemm::new(s.batch, s.hidden, s.input),
            x,
            p.view(l.w1.clone())?,
            &h,
        )?;
        self.launch(
            &kernels::BIAS_RELU,
            n_hidden,
            &[
                KernelArg::buffer(&h),
                KernelArg::buffer(p.view(l.b1.clone())?),
                scalar(s.batch),
                scalar(s.hidden),
            ],
        )?;
        let y = b.alloc::<f32>(n_out)?;
        b.gemm(
            &Gemm::new(s.batch, s.output, s.hidden),
            &h,
            p.view(l.w2.clone())?,
            &y,
        )?;
        self.launch(
            &kernels::BIAS_ADD,
            n_out,
            &[
                KernelArg::buffer(&y),
                KernelArg::buffer(p.view(l.b2.clone())?),
                scalar(s.batch),
                scalar(s.output),
            ],
        )?;
        // Loss and its gradient.
        let (dy, sq) = (b.alloc::<f32>(n_out)?, b.alloc::<f32>(n_out)?);
        self.launch(
            &kernels::MSE_GRAD,
            n_out,
            &[
                KernelArg::buffer(&dy),
                KernelArg::buffer(&sq),
                KernelArg::buffer(&y),
                KernelArg::buffer(t),
                KernelArg::scalar(reference::grad_scale(s)),
                scalar(n_out),
            ],
        )?;
        let loss = b.alloc::<f32>(1)?;
        b.launch_kernel(
            &kernels::SUM,
            [1, 1, 1],
            &[
                KernelArg::buffer(&loss),
                KernelArg::buffer(&sq),
                scalar(n_out),
            ],
        )?;
        b.scale(&loss, reference::mean_scale(s))?;
        // Backward.
        b.gemm(
            &Gemm::new(s.hidden, s.output, s.batch).transpose_a(true),
            &h,
            &dy,
            g.view(l.w2.clone())?,
        )?;
        self.launch(
            &kernels::COLSUM,
            s.output,
            &[
                KernelArg::buffer(g.view(l.b2.clone())?),
                KernelArg::buffer(&dy),
                scalar(s.batch),
                scalar(s.output),
            ],
        )?;
        let dh = b.alloc::<f32>(n_hidden)?;
        b.gemm(
            &Gemm::new(s.batch, s.hidden, s.output).transpose_b(true),
            &dy,
            p.view(l.w2.clone())?,
            &dh,
        )?;
        self.launch(
            &kernels::RELU_BACKWARD,
            n_hidden,
            &[
                KernelArg::buffer(&dh),
                KernelArg::buffer(&h),
                scalar(n_hidden),
            ],
        )?;
        b.gemm(
            &Gemm::new(s.input, s.hidden, s.batch).transpose_a(true),
            x,
            &dh,
            g.view(l.w1.clone())?,
        )?;
        self.launch(
            &kernels::COLSUM,
            s.hidden,
            &[
                KernelArg::buffer(g.view(l.b1.clone())?),
                KernelArg::buffer(&dh),
                scalar(s.batch),
                scalar(s.hidden),
            ],
        )?;
        reduce(g)?;
        // SGD on every parameter at once: θ += (-lr) · ∇θ.
        b.axpy(p, -self.lr, g)?;
        Ok(loss)
    }

    /// Elements of the flat parameter buffer.
    pub fn num_params(&self) -> usize {
        self.params.len()
    }
}
