//! `ModuleMode` and `Callable`: what `make_graphed_callables` accepts — a piece of stream work
//! with buffer inputs and outputs that knows whether it is training or evaluating, as an
//! `nn.Module` knows its `training` flag.

use accel_graph_api::{Backend, Result};

/// Whether a callable runs in training or evaluation mode (`nn.Module.training`).
///
/// A graph captures the mode the callable was in; a call made in the other mode runs the
/// callable eagerly, because its work may differ (dropout, statistics updates).
///
/// ```
/// use accel_graph_utils::ModuleMode;
/// assert_eq!(ModuleMode::default(), ModuleMode::Train);
/// assert_eq!(ModuleMode::Eval.to_string(), "eval");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ModuleMode {
    /// Training (`module.train()`), the default as in PyTorch.
    #[default]
    Train,
    /// Evaluation (`module.eval()`).
    Eval,
}

impl std::fmt::Display for ModuleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModuleMode::Train => "train",
            ModuleMode::Eval => "eval",
        })
    }
}

/// Stream work that can be graphed: takes device buffers, issues portable or native work on
/// the current stream, returns new buffers.
///
/// Closures `FnMut(&B, &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>>` implement it (always in
/// [`ModuleMode::Train`]); [`Modal`] adds a switchable mode; implement it on your own type for
/// anything richer.
///
/// The callable must do the same device work on every call with same-shaped inputs, allocate
/// its outputs with [`Backend::alloc`] (during capture they come from the graph's pool), and
/// not read results back to the host (a blocking call that invalidates a capture).
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{Callable, ModuleMode};
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let mut double = |b: &MockBackend, inputs: &[&accel_graph_mock::MockBuffer]| {
///     let out = b.alloc(inputs[0].len())?;
///     b.copy(&out, inputs[0])?;
///     b.scale(&out, 2.0)?;
///     Ok(vec![out])
/// };
/// let x = backend.alloc_from(&[1.0, 2.0])?;
/// let out = double.call(&backend, &[&x])?;
/// assert_eq!(backend.download(&out[0])?, vec![2.0, 4.0]);
/// assert_eq!(Callable::<MockBackend>::mode(&double), ModuleMode::Train);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub trait Callable<B: Backend> {
    /// Runs the work on `backend`'s current stream and returns the output buffers.
    fn call(&mut self, backend: &B, inputs: &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>>;

    /// The mode the callable is in now.
    fn mode(&self) -> ModuleMode {
        ModuleMode::Train
    }
}

impl<B, F> Callable<B> for F
where
    B: Backend,
    F: FnMut(&B, &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>>,
{
    fn call(&mut self, backend: &B, inputs: &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>> {
        self(backend, inputs)
    }
}

/// Boxed callables, so callables of different types can be graphed together.
impl<B: Backend> Callable<B> for Box<dyn Callable<B> + '_> {
    fn call(&mut self, backend: &B, inputs: &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>> {
        (**self).call(backend, inputs)
    }

    fn mode(&self) -> ModuleMode {
        (**self).mode()
    }
}

/// A closure with a switchable [`ModuleMode`], which it receives on every call — the analogue of an
/// `nn.Module` with `train()` / `eval()`.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_utils::{Callable, Modal, ModuleMode};
/// use accel_graph_mock::MockBackend;
///
/// type Buf = accel_graph_mock::MockBuffer;
/// let backend = MockBackend::new();
/// // Dropout stand-in: scale by 0.5 in training only.
/// let mut layer = Modal::new(ModuleMode::Train, |b: &MockBackend, mode: ModuleMode, inputs: &[&Buf]| {
///     let out = b.alloc(inputs[0].len())?;
///     b.copy(&out, inputs[0])?;
///     if mode == ModuleMode::Train {
///         b.scale(&out, 0.5)?;
///     }
///     Ok(vec![out])
/// });
/// let x = backend.alloc_from(&[4.0])?;
/// assert_eq!(backend.download(&layer.call(&backend, &[&x])?[0])?, vec![2.0]);
/// layer.eval();
/// assert_eq!(backend.download(&layer.call(&backend, &[&x])?[0])?, vec![4.0]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Modal<F> {
    mode: ModuleMode,
    f: F,
}

impl<F> Modal<F> {
    /// A callable in `mode` running `f(backend, mode, inputs)`.
    pub fn new(mode: ModuleMode, f: F) -> Self {
        Modal { mode, f }
    }

    /// Switches the mode (the next graphed call in another mode than captured runs eagerly).
    pub fn set_mode(&mut self, mode: ModuleMode) {
        self.mode = mode;
    }

    /// `set_mode(ModuleMode::Train)`.
    pub fn train(&mut self) {
        self.set_mode(ModuleMode::Train);
    }

    /// `set_mode(ModuleMode::Eval)`.
    pub fn eval(&mut self) {
        self.set_mode(ModuleMode::Eval);
    }

    /// The current mode.
    pub fn current_mode(&self) -> ModuleMode {
        self.mode
    }
}

impl<B, F> Callable<B> for Modal<F>
where
    B: Backend,
    F: FnMut(&B, ModuleMode, &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>>,
{
    fn call(&mut self, backend: &B, inputs: &[&B::Buffer<f32>]) -> Result<Vec<B::Buffer<f32>>> {
        (self.f)(backend, self.mode, inputs)
    }

    fn mode(&self) -> ModuleMode {
        self.mode
    }
}
