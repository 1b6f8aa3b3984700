//! `Element`: what a device buffer can hold — any plain-old-data type.

use std::fmt;

/// An element type of a device buffer: any [`bytemuck::Pod`] type (`f32`, `u8`, `i32`,
/// [`half::bf16`], [`half::f16`], your own `#[repr(C)]` structs deriving `Pod`...).
///
/// The element type is part of the buffer's type (`B::Buffer<f32>`, `B::Buffer<u8>`), so
/// handing a `u8` buffer to an op or kernel that wants `f32` is a compile error, and uploads
/// and downloads move exactly the bytes of the elements.
///
/// ```
/// use accel_graph_api::prelude::*;
/// use half::bf16;
/// let backend = accel_graph_mock::MockBackend::new();
/// let weights = backend.alloc_from(&[bf16::from_f32(0.5), bf16::from_f32(-2.0)])?;
/// let bytes = backend.alloc_from(&[7u8, 8, 9])?;
/// assert_eq!(backend.download(&weights)?[1].to_f32(), -2.0);
/// assert_eq!(backend.download(&bytes)?, vec![7, 8, 9]);
/// # Ok::<(), GraphError>(())
/// ```
pub trait Element: bytemuck::Pod + Send + Sync + fmt::Debug {
    /// The element's name in messages (`f32`, `half::bf16`...).
    fn type_name() -> &'static str {
        std::any::type_name::<Self>()
    }
}

impl<T: bytemuck::Pod + Send + Sync + fmt::Debug> Element for T {}

/// The element types dense linear algebra (GEMM) runs on every backend: `f32` and the two
/// 16-bit floats. Accumulation is in `f32` for all three.
pub trait FloatElement: Element + sealed::Sealed {
    /// Which one it is.
    const DTYPE: FloatType;
    /// The value as `f32` (exact).
    fn to_f32(self) -> f32;
    /// The nearest value to `x` (round to nearest even).
    fn from_f32(x: f32) -> Self;
}

/// The floating-point element types of [`FloatElement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatType {
    /// IEEE single precision.
    F32,
    /// bfloat16 ([`half::bf16`]).
    Bf16,
    /// IEEE half precision ([`half::f16`]).
    F16,
}

impl FloatType {
    /// The name (`"f32"`, `"bf16"`, `"f16"`).
    pub fn name(self) -> &'static str {
        match self {
            FloatType::F32 => "f32",
            FloatType::Bf16 => "bf16",
            FloatType::F16 => "f16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            FloatType::F32 => 4,
            FloatType::Bf16 | FloatType::F16 => 2,
        }
    }
}

impl fmt::Display for FloatType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

impl FloatElement for f32 {
    const DTYPE: FloatType = FloatType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl FloatElement for half::bf16 {
    const DTYPE: FloatType = FloatType::Bf16;
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
}

impl FloatElement for half::f16 {
    const DTYPE: FloatType = FloatType::F16;
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_types_round_trip_and_name_themselves() {
        assert_eq!(<half::bf16 as FloatElement>::from_f32(1.5).to_f32(), 1.5);
        assert_eq!(<half::f16 as FloatElement>::from_f32(-0.25).to_f32(), -0.25);
        assert_eq!(<f32 as FloatElement>::DTYPE.size(), 4);
        assert_eq!(half::bf16::DTYPE.to_string(), "bf16");
        assert_eq!(<u8 as Element>::type_name(), "u8");
    }
}
