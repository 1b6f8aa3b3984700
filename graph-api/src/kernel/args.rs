//! Kernel arguments: typed views and scalars, checked against the kernel's parameters before
//! a launch reaches the device.

use std::fmt;

use super::{Extent, Kernel, Param, Scalar};
use crate::{DeviceBuffer, GraphError, Result, View};

/// One argument of a kernel launch: a view of a buffer of any element type, or a scalar.
/// `M` is the backend's buffer memory ([`PortableOps::Memory`](crate::PortableOps::Memory)).
///
/// ```
/// use accel_graph_api::{prelude::*, kernel::KernelArg};
/// use accel_graph_mock::MockBackend;
/// let b = MockBackend::new();
/// let x = b.alloc_from(&[1u32, 2, 3, 4])?;
/// let args: [KernelArg<'_, _>; 3] =
///     [KernelArg::buffer(&x), KernelArg::buffer(x.view(1..3)?), KernelArg::scalar(7u32)];
/// assert_eq!(args[1].buffer_len(), Some(2));
/// # Ok::<(), GraphError>(())
/// ```
pub enum KernelArg<'a, M> {
    /// A view of a buffer.
    Buffer {
        /// The buffer's memory, whatever its element type.
        memory: &'a M,
        /// The backend instance of the buffer.
        instance: u64,
        /// The element type.
        element: super::ElementType,
        /// The view's first element.
        offset: usize,
        /// The view's elements.
        len: usize,
        /// The device address of the buffer's first element (for messages).
        address: u64,
    },
    /// A scalar, by value.
    Scalar(Scalar),
}

impl<M> Clone for KernelArg<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for KernelArg<'_, M> {}

impl<'a, M> KernelArg<'a, M> {
    /// A buffer argument: `&buffer` (the whole buffer) or a [`View`] of one.
    pub fn buffer<Buf: DeviceBuffer + AsRef<M> + 'a>(view: impl Into<View<'a, Buf>>) -> Self {
        let view = view.into();
        let buffer = view.buffer();
        KernelArg::Buffer {
            memory: buffer.as_ref(),
            instance: buffer.instance_id(),
            element: super::ElementType::of::<Buf::Element>(),
            offset: view.offset(),
            len: view.len(),
            address: buffer.device_address(),
        }
    }

    /// A scalar argument (`f32`, `u32` or `i32`).
    pub fn scalar(value: impl Into<Scalar>) -> Self {
        KernelArg::Scalar(value.into())
    }

    /// The view's length, for a buffer argument.
    pub fn buffer_len(&self) -> Option<usize> {
        match self {
            KernelArg::Buffer { len, .. } => Some(*len),
            KernelArg::Scalar(_) => None,
        }
    }
}

impl<M> fmt::Debug for KernelArg<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelArg::Buffer {
                element,
                offset,
                len,
                address,
                ..
            } => write!(
                f,
                "Buffer<{}>({address:#x}[{offset}..{}])",
                element.name(),
                offset + len
            ),
            KernelArg::Scalar(s) => write!(f, "Scalar({s:?})"),
        }
    }
}

fn mismatch(kernel: &Kernel, message: String) -> GraphError {
    GraphError::KernelArguments {
        kernel: kernel.name().to_owned(),
        message,
    }
}

/// The value of scalar parameter `index` as a count, for an [`Extent`].
fn count_of<M>(kernel: &Kernel, args: &[KernelArg<'_, M>], index: usize) -> Result<usize> {
    match args.get(index) {
        Some(KernelArg::Scalar(Scalar::U32(v))) => Ok(*v as usize),
        Some(KernelArg::Scalar(Scalar::I32(v))) if *v >= 0 => Ok(*v as usize),
        other => Err(mismatch(
            kernel,
            format!(
                "an extent refers to parameter {index}, which is not a u32 or non-negative i32 \
                 scalar argument ({other:?})"
            ),
        )),
    }
}

/// Checks `args` against `kernel`'s parameters: their number, each buffer's element type and
/// instance (`instance`: the launching backend's), each scalar's type, and each buffer's
/// [`Extent`]. Every backend calls it before a launch.
pub fn check_arguments<M>(kernel: &Kernel, instance: u64, args: &[KernelArg<'_, M>]) -> Result<()> {
    let params = kernel.params();
    if params.len() != args.len() {
        return Err(mismatch(
            kernel,
            format!(
                "{} parameters declared ({}), {} arguments given",
                params.len(),
                params
                    .iter()
                    .map(Param::name)
                    .collect::<Vec<_>>()
                    .join(", "),
                args.len()
            ),
        ));
    }
    for (i, (param, arg)) in params.iter().zip(args).enumerate() {
        match (param, arg) {
            (
                Param::Buffer {
                    name,
                    element,
                    extent,
                    ..
                },
                KernelArg::Buffer {
                    element: given,
                    instance: owner,
                    len,
                    ..
                },
            ) => {
                if *owner != instance {
                    return Err(GraphError::ForeignObject { what: "buffer" });
                }
                if element != given {
                    return Err(mismatch(
                        kernel,
                        format!(
                            "parameter {i} ({name}) takes a buffer of {}, got one of {}",
                            element.name(),
                            given.name()
                        ),
                    ));
                }
                let needed = match *extent {
                    Extent::Any => None,
                    Extent::AtLeast(n) => Some(n),
                    Extent::AtLeastScalar { param, factor } => {
                        Some(count_of(kernel, args, param)?.saturating_mul(factor))
                    }
                    Extent::AtLeastProduct { first, second } => Some(
                        count_of(kernel, args, first)?
                            .saturating_mul(count_of(kernel, args, second)?),
                    ),
                };
                if let Some(needed) = needed.filter(|&n| *len < n) {
                    return Err(GraphError::LengthMismatch {
                        op: "kernel argument",
                        expected: needed,
                        got: *len,
                    })
                    .map_err(|e| mismatch(kernel, format!("parameter {i} ({name}): {e}")));
                }
            }
            (Param::Scalar { name, ty }, KernelArg::Scalar(value)) => {
                if value.ty() != *ty {
                    return Err(mismatch(
                        kernel,
                        format!(
                            "parameter {i} ({name}) is a {} scalar, got a {} ({value:?})",
                            ty.name(),
                            value.ty().name()
                        ),
                    ));
                }
            }
            (Param::Buffer { name, .. }, KernelArg::Scalar(value)) => {
                return Err(mismatch(
                    kernel,
                    format!("parameter {i} ({name}) is a buffer, got the scalar {value:?}"),
                ));
            }
            (Param::Scalar { name, ty }, KernelArg::Buffer { element, .. }) => {
                return Err(mismatch(
                    kernel,
                    format!(
                        "parameter {i} ({name}) is a {} scalar, got a buffer of {}",
                        ty.name(),
                        element.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}
