//! What a kernel's host function (the mock's version of the kernel) receives.

use std::{fmt, sync::Arc};

use super::{Access, ElementType, Scalar, ScalarValue};
use crate::Element;

/// A kernel's host function: called once per launch with the arguments and the launch
/// dimensions.
pub type HostKernelFn = Arc<dyn Fn(&mut [HostArg], &HostLaunch) + Send + Sync>;

/// The launch a host function stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLaunch {
    /// Blocks (workgroups) per dimension.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: [u32; 3],
}

impl HostLaunch {
    /// Threads along x: `grid[0] * block[0]`.
    pub fn threads_x(&self) -> usize {
        self.grid[0] as usize * self.block[0] as usize
    }
}

/// One argument as a host function sees it: a buffer's elements (a copy of the view, written
/// back after the call when the parameter writes) or a scalar.
pub struct HostArg {
    kind: Kind,
}

enum Kind {
    Buffer {
        /// 16-byte aligned storage, so any element type can be viewed in it.
        words: Vec<u128>,
        bytes: usize,
        element: ElementType,
        access: Access,
    },
    Scalar(Scalar),
}

impl HostArg {
    /// A buffer argument holding `bytes` (the view's elements).
    pub fn buffer(bytes: &[u8], element: ElementType, access: Access) -> Self {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        HostArg {
            kind: Kind::Buffer {
                words,
                bytes: bytes.len(),
                element,
                access,
            },
        }
    }

    /// A scalar argument.
    pub fn scalar_arg(value: Scalar) -> Self {
        HostArg {
            kind: Kind::Scalar(value),
        }
    }

    fn check<T: Element>(&self) -> (&[u128], usize) {
        match &self.kind {
            Kind::Buffer {
                words,
                bytes,
                element,
                ..
            } => {
                assert!(
                    element.is::<T>(),
                    "the argument holds {} elements, read as {}",
                    element.name(),
                    T::type_name()
                );
                (words, *bytes)
            }
            Kind::Scalar(s) => panic!("a scalar argument ({s:?}) read as a buffer"),
        }
    }

    /// The buffer's elements. Panics (reported as a failed kernel) if the argument is a
    /// scalar or holds another element type.
    pub fn slice<T: Element>(&self) -> &[T] {
        let (words, bytes) = self.check::<T>();
        bytemuck::cast_slice(&bytemuck::cast_slice::<u128, u8>(words)[..bytes])
    }

    /// The buffer's elements, to write. Panics as [`HostArg::slice`] does, and for a parameter
    /// declared [`Access::Read`].
    pub fn slice_mut<T: Element>(&mut self) -> &mut [T] {
        self.check::<T>();
        match &mut self.kind {
            Kind::Buffer {
                words,
                bytes,
                access,
                ..
            } => {
                assert!(
                    access.writes(),
                    "a buffer parameter declared Access::Read was written"
                );
                bytemuck::cast_slice_mut(&mut bytemuck::cast_slice_mut::<u128, u8>(words)[..*bytes])
            }
            Kind::Scalar(_) => unreachable!("checked above"),
        }
    }

    /// The scalar's value. Panics if the argument is a buffer or a scalar of another type.
    pub fn scalar<T: ScalarValue>(&self) -> T {
        match &self.kind {
            Kind::Scalar(s) => T::from_scalar(*s)
                .unwrap_or_else(|| panic!("a {} scalar read as {}", s.ty().name(), T::TYPE.name())),
            Kind::Buffer { element, .. } => {
                panic!("a buffer of {} read as a scalar", element.name())
            }
        }
    }

    /// The bytes to write back: the buffer's contents if the parameter writes, else `None`.
    pub fn written_bytes(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::Buffer {
                words,
                bytes,
                access,
                ..
            } if access.writes() => Some(&bytemuck::cast_slice::<u128, u8>(words)[..*bytes]),
            _ => None,
        }
    }
}

impl fmt::Debug for HostArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Buffer {
                bytes,
                element,
                access,
                ..
            } => f
                .debug_struct("HostArg::Buffer")
                .field("element", &element.name())
                .field("bytes", bytes)
                .field("access", access)
                .finish(),
            Kind::Scalar(s) => f.debug_tuple("HostArg::Scalar").field(s).finish(),
        }
    }
}
