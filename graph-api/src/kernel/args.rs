//! Kernel arguments: typed views and scalars, checked against the kernel's parameters before
//! a launch reaches the device.

use std::fmt;

use super::{Kernel, Param, Scalar};
use crate::{DeviceBuffer, GraphError, Result, View};

/// One argument of a kernel launch: a view of a buffer of any element type, or a scalar.
/// `M` is the backend's buffer memory ([`PortableOps::Memory`](crate::PortableOps::Memory)).
///
/// A buffer argument is made only by [`KernelArg::buffer`] from a [`View`], and its parts are
/// read-only ([`BufferArg`]): safe code cannot name bytes outside the buffer it views. Every
/// backend still checks each buffer argument against the live memory it names before a launch
/// (its instance, element type and size), since [`DeviceBuffer`] is a public trait.
///
/// ```
/// use accel_graph_api::{prelude::*, kernel::KernelArg};
/// use accel_graph_mock::MockBackend;
/// let b = MockBackend::new();
/// let x = b.alloc_from(&[1u32, 2, 3, 4])?;
/// let args: [KernelArg<'_, _>; 3] =
///     [KernelArg::buffer(&x), KernelArg::buffer(x.view(1..3)?), KernelArg::scalar(7u32)];
/// assert_eq!(args[1].buffer_len(), Some(2));
/// let KernelArg::Buffer(view) = &args[1] else { unreachable!() };
/// assert_eq!((view.offset(), view.len()), (1, 2));
/// # Ok::<(), GraphError>(())
/// ```
pub enum KernelArg<'a, M> {
    /// A view of a buffer.
    Buffer(BufferArg<'a, M>),
    /// A scalar, by value.
    Scalar(Scalar),
}

/// A buffer argument: elements `offset .. offset + len` of a buffer's memory. Built only by
/// [`KernelArg::buffer`]; its parts can be read, not set.
pub struct BufferArg<'a, M> {
    memory: &'a M,
    instance: u64,
    element: super::ElementType,
    offset: usize,
    len: usize,
    address: u64,
}

impl<M> Clone for BufferArg<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for BufferArg<'_, M> {}

impl<'a, M> BufferArg<'a, M> {
    /// The buffer's memory, whatever its element type.
    pub fn memory(&self) -> &'a M {
        self.memory
    }

    /// The backend instance the buffer says it belongs to.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The element type.
    pub fn element(&self) -> super::ElementType {
        self.element
    }

    /// The view's first element.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The view's elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the view has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the buffer's first element (for messages).
    pub fn address(&self) -> u64 {
        self.address
    }

    /// The view's bytes in its buffer, `None` when they overflow `usize` (only a buffer that
    /// misstates its length can get there).
    pub fn byte_range(&self) -> Option<std::ops::Range<usize>> {
        let start = self.offset.checked_mul(self.element.size())?;
        let end = start.checked_add(self.len.checked_mul(self.element.size())?)?;
        Some(start..end)
    }
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
        KernelArg::Buffer(BufferArg {
            memory: buffer.as_ref(),
            instance: buffer.instance_id(),
            element: super::ElementType::of::<Buf::Element>(),
            offset: view.offset(),
            len: view.len(),
            address: buffer.device_address(),
        })
    }

    /// A scalar argument (`f32`, `u32` or `i32`).
    pub fn scalar(value: impl Into<Scalar>) -> Self {
        KernelArg::Scalar(value.into())
    }

    /// The view's length, for a buffer argument.
    pub fn buffer_len(&self) -> Option<usize> {
        match self {
            KernelArg::Buffer(view) => Some(view.len),
            KernelArg::Scalar(_) => None,
        }
    }
}

impl<M> fmt::Debug for BufferArg<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer<{}>({:#x}[{}..{}])",
            self.element.name(),
            self.address,
            self.offset,
            self.offset.saturating_add(self.len)
        )
    }
}

impl<M> fmt::Debug for KernelArg<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelArg::Buffer(view) => view.fmt(f),
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

/// The value of scalar parameter `index` as a count, for an [`Extent`](super::Extent).
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
/// [`Extent`](super::Extent). Every backend calls it before a launch.
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
                KernelArg::Buffer(BufferArg {
                    element: given,
                    instance: owner,
                    len,
                    ..
                }),
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
                let needed = extent.required(|param| count_of(kernel, args, param))?;
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
            (Param::Scalar { name, ty }, KernelArg::Buffer(BufferArg { element, .. })) => {
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
    check_aliasing(kernel, args)
}

/// Refuses a buffer a kernel writes through one parameter that shares bytes with another
/// buffer parameter. On a device both parameters address the same memory and the threads'
/// order decides what each reads and what is written last; the mock's host function gets a
/// copy per parameter. Neither answer is one a program can rely on, so no backend accepts it.
fn check_aliasing<M>(kernel: &Kernel, args: &[KernelArg<'_, M>]) -> Result<()> {
    let params = kernel.params();
    let buffers: Vec<(usize, &str, bool, std::ops::Range<u64>, u64)> = params
        .iter()
        .zip(args)
        .enumerate()
        .filter_map(|(i, (param, arg))| match (param, arg) {
            (Param::Buffer { name, access, .. }, KernelArg::Buffer(view)) => {
                let bytes = view.byte_range()?;
                let start = view
                    .address()
                    .checked_add(u64::try_from(bytes.start).ok()?)?;
                let end = view.address().checked_add(u64::try_from(bytes.end).ok()?)?;
                Some((
                    i,
                    name.as_ref(),
                    access.writes(),
                    start..end,
                    view.instance(),
                ))
            }
            _ => None,
        })
        .collect();
    for (n, (i, name, writes, bytes, instance)) in buffers.iter().enumerate() {
        for (j, other, other_writes, other_bytes, other_instance) in &buffers[n + 1..] {
            let shared = instance == other_instance
                && bytes.start < other_bytes.end
                && other_bytes.start < bytes.end;
            if shared && (*writes || *other_writes) {
                return Err(mismatch(
                    kernel,
                    format!(
                        "parameters {i} ({name}) and {j} ({other}) share bytes of one buffer, \
                         and {} is written: a buffer a kernel writes may not alias another of \
                         its buffer parameters (what each thread reads would depend on the \
                         order the device runs them in); pass disjoint views, or one parameter",
                        if *writes { name } else { other }
                    ),
                ));
            }
        }
    }
    Ok(())
}
