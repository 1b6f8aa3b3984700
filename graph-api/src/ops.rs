//! The portable op set: element-wise `f32` work every backend runs (and captures), written
//! once as data ([`PortableOp`]) so that a new op is one variant here plus one match arm in
//! each backend's `ops.rs`.

use crate::{DeviceBuffer, Element, GraphError, NodeKind, Result, View};

/// One portable op over operands of type `T`: `&Buffer` where users issue it, a backend's
/// resolved memory where a backend runs it ([`PortableOp::map`]).
///
/// Every op writes its first operand (`x`, `dst` or `y`) and reads the second, if any. The
/// arithmetic is exactly [`PortableOp::element`] on every backend, bit for bit: no fused
/// multiply-add, IEEE single precision, round to nearest even.
///
/// ```
/// use accel_graph_api::PortableOp;
/// let op = PortableOp::Axpy { y: "y", a: 2.0, x: "x" };
/// assert_eq!(op.name(), "axpy");
/// assert_eq!(op.map(str::len).operands(), (1, Some(1)));
/// assert_eq!(op.element(1.0, 3.0), 7.0); // y + a * x
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PortableOp<T> {
    /// `x[i] = value`.
    Fill {
        /// The buffer written.
        x: T,
        /// The value.
        value: f32,
    },
    /// `dst[i] = src[i]` (equal lengths).
    Copy {
        /// The buffer written.
        dst: T,
        /// The buffer read.
        src: T,
    },
    /// `x[i] += c`.
    AddScalar {
        /// The buffer updated.
        x: T,
        /// The addend.
        c: f32,
    },
    /// `x[i] *= a`.
    Scale {
        /// The buffer updated.
        x: T,
        /// The factor.
        a: f32,
    },
    /// `y[i] += a * x[i]` (equal lengths; the product is rounded before the sum).
    Axpy {
        /// The buffer updated.
        y: T,
        /// The factor of `x`.
        a: f32,
        /// The buffer read.
        x: T,
    },
    /// `y[i] *= x[i]` (equal lengths).
    Mul {
        /// The buffer updated.
        y: T,
        /// The buffer read.
        x: T,
    },
}

impl<T> PortableOp<T> {
    /// The op's name (`"fill"`, `"axpy"`, ...), as errors and node labels spell it.
    pub fn name(&self) -> &'static str {
        match self {
            PortableOp::Fill { .. } => "fill",
            PortableOp::Copy { .. } => "copy",
            PortableOp::AddScalar { .. } => "add_scalar",
            PortableOp::Scale { .. } => "scale",
            PortableOp::Axpy { .. } => "axpy",
            PortableOp::Mul { .. } => "mul",
        }
    }

    /// The graph node kind the op becomes when captured.
    pub fn node_kind(&self) -> NodeKind {
        match self {
            PortableOp::Fill { .. } => NodeKind::Memset,
            PortableOp::Copy { .. } => NodeKind::Memcpy,
            _ => NodeKind::Kernel,
        }
    }

    /// The scalar parameter (`value`, `c` or `a`), 0 for ops without one.
    pub fn scalar(&self) -> f32 {
        match self {
            PortableOp::Fill { value: s, .. }
            | PortableOp::AddScalar { c: s, .. }
            | PortableOp::Scale { a: s, .. }
            | PortableOp::Axpy { a: s, .. } => *s,
            PortableOp::Copy { .. } | PortableOp::Mul { .. } => 0.0,
        }
    }

    /// The operands: the one written, and the one read (if the op reads another buffer).
    pub fn operands(self) -> (T, Option<T>) {
        match self {
            PortableOp::Fill { x, .. }
            | PortableOp::AddScalar { x, .. }
            | PortableOp::Scale { x, .. } => (x, None),
            PortableOp::Copy { dst, src } => (dst, Some(src)),
            PortableOp::Axpy { y, x, .. } | PortableOp::Mul { y, x } => (y, Some(x)),
        }
    }

    /// Whether the op reads the operand it writes (`add_scalar`, `scale`, `axpy` do; `fill`
    /// and `copy` overwrite it).
    pub fn reads_output(&self) -> bool {
        !matches!(self, PortableOp::Fill { .. } | PortableOp::Copy { .. })
    }

    /// The same op over references to its operands.
    pub fn as_ref(&self) -> PortableOp<&T> {
        match self {
            PortableOp::Fill { x, value } => PortableOp::Fill { x, value: *value },
            PortableOp::Copy { dst, src } => PortableOp::Copy { dst, src },
            PortableOp::AddScalar { x, c } => PortableOp::AddScalar { x, c: *c },
            PortableOp::Scale { x, a } => PortableOp::Scale { x, a: *a },
            PortableOp::Axpy { y, a, x } => PortableOp::Axpy { y, a: *a, x },
            PortableOp::Mul { y, x } => PortableOp::Mul { y, x },
        }
    }

    /// The same op over other operands: how a backend swaps buffers for its own memory.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PortableOp<U> {
        match self {
            PortableOp::Fill { x, value } => PortableOp::Fill { x: f(x), value },
            PortableOp::Copy { dst, src } => PortableOp::Copy {
                dst: f(dst),
                src: f(src),
            },
            PortableOp::AddScalar { x, c } => PortableOp::AddScalar { x: f(x), c },
            PortableOp::Scale { x, a } => PortableOp::Scale { x: f(x), a },
            PortableOp::Axpy { y, a, x } => PortableOp::Axpy {
                y: f(y),
                a,
                x: f(x),
            },
            PortableOp::Mul { y, x } => PortableOp::Mul { y: f(y), x: f(x) },
        }
    }

    /// The new value of one element: `out` is the written operand's element, `input` the
    /// read operand's (ignored by ops without one). The definition every backend's kernel
    /// follows; the mock and the conformance models run it as is.
    #[inline]
    pub fn element(&self, out: f32, input: f32) -> f32 {
        match self {
            PortableOp::Fill { value, .. } => *value,
            PortableOp::Copy { .. } => input,
            PortableOp::AddScalar { c, .. } => out + *c,
            PortableOp::Scale { a, .. } => out * *a,
            // Rust never contracts `a * b + c` into a fused multiply-add, so the product is
            // rounded first, as the kernels of the other backends are written to do.
            PortableOp::Axpy { a, .. } => {
                let product = *a * input;
                out + product
            }
            PortableOp::Mul { .. } => out * input,
        }
    }
}

impl<T: Copy> PortableOp<T> {
    /// Checks the operands' lengths (both operands of a two-buffer op have equal lengths);
    /// `len` reads an operand's length.
    pub fn check_lengths(&self, len: impl Fn(T) -> usize) -> Result<()> {
        if let (out, Some(input)) = self.operands() {
            let (expected, got) = (len(out), len(input));
            if expected != got {
                return Err(GraphError::LengthMismatch {
                    op: self.name(),
                    expected,
                    got,
                });
            }
        }
        Ok(())
    }
}

/// The portable op set on a backend's buffers, issued on the current stream: run at once, or
/// recorded when the stream is capturing. Every [`Backend`](crate::Backend) has it (it is a
/// supertrait), so generic code over `B: Backend` calls these methods directly.
///
/// Operands are `f32` [views](View): pass `&buffer` for a whole buffer, or `buffer.view(..)?`
/// for part of one. A backend implements only [`PortableOps::launch`]; the named methods build
/// the op.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer, PortableOps};
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// let (y, x) = (backend.alloc_from(&[1.0, 2.0])?, backend.alloc_from(&[10.0, 20.0])?);
/// backend.axpy(&y, 0.5, &x)?;
/// backend.scale(&y, 2.0)?;
/// backend.fill(y.view(1..)?, 0.0)?;
/// assert_eq!(backend.download(&y)?, vec![12.0, 0.0]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub trait PortableOps {
    /// The memory under a buffer of any element type: what kernel arguments
    /// ([`KernelArg`](crate::kernel::KernelArg)) carry.
    type Memory: Send + Sync + 'static;
    /// The backend's device buffer of elements `T`.
    type Buffer<T: Element>: DeviceBuffer<Element = T> + AsRef<Self::Memory> + 'static;

    /// Issues `op` on the current stream. Errors: a buffer of another backend instance
    /// ([`GraphError::ForeignObject`]), operands of unequal lengths
    /// ([`GraphError::LengthMismatch`]), a capture that was invalidated
    /// ([`GraphError::CaptureInvalidated`]), or the device's own error.
    fn launch(&self, op: PortableOp<View<'_, Self::Buffer<f32>>>) -> Result<()>;

    /// `x[i] = value`.
    fn fill<'a>(&self, x: impl Into<View<'a, Self::Buffer<f32>>>, value: f32) -> Result<()> {
        self.launch(PortableOp::Fill { x: x.into(), value })
    }

    /// `dst[i] = src[i]` (equal lengths).
    fn copy<'a, 'b>(
        &self,
        dst: impl Into<View<'a, Self::Buffer<f32>>>,
        src: impl Into<View<'b, Self::Buffer<f32>>>,
    ) -> Result<()> {
        self.launch(PortableOp::Copy {
            dst: dst.into(),
            src: src.into(),
        })
    }

    /// `x[i] += c`.
    fn add_scalar<'a>(&self, x: impl Into<View<'a, Self::Buffer<f32>>>, c: f32) -> Result<()> {
        self.launch(PortableOp::AddScalar { x: x.into(), c })
    }

    /// `x[i] *= a`.
    fn scale<'a>(&self, x: impl Into<View<'a, Self::Buffer<f32>>>, a: f32) -> Result<()> {
        self.launch(PortableOp::Scale { x: x.into(), a })
    }

    /// `y[i] += a * x[i]` (equal lengths; product rounded before the sum: no fused
    /// multiply-add, so results are reproducible bit for bit).
    fn axpy<'a, 'b>(
        &self,
        y: impl Into<View<'a, Self::Buffer<f32>>>,
        a: f32,
        x: impl Into<View<'b, Self::Buffer<f32>>>,
    ) -> Result<()> {
        self.launch(PortableOp::Axpy {
            y: y.into(),
            a,
            x: x.into(),
        })
    }

    /// `y[i] *= x[i]` (equal lengths).
    fn mul<'a, 'b>(
        &self,
        y: impl Into<View<'a, Self::Buffer<f32>>>,
        x: impl Into<View<'b, Self::Buffer<f32>>>,
    ) -> Result<()> {
        self.launch(PortableOp::Mul {
            y: y.into(),
            x: x.into(),
        })
    }
}
