//! [`DecodeElement`]: the element types the engine's kernels are written for, with the CUDA C
//! each needs to load and store its values as `float`.

use accel_graph::{FloatElement, collective::CommElement};
use half::bf16;

/// An element type of weights, activations and the key/value cache: `f32` or `bf16`. The
/// kernels load every element as `f32`, compute in `f32`, and round once when they store (as
/// PyTorch's kernels do for `bf16`).
///
/// `f32` kernels have WGSL sources (wgpu); `bf16` ones have none (WGSL has no 16-bit
/// bfloat type), so on wgpu a `bf16` model is refused with [`accel_graph::GraphError::Unsupported`]
/// when its kernels are prepared.
///
/// Both are [`CommElement`]s too: a tensor-parallel model ([`crate::tp`]) all-reduces its
/// activations in the element type.
pub trait DecodeElement: FloatElement + CommElement + sealed::Sealed {
    /// Its name in messages (`f32`, `bf16`).
    const NAME: &'static str;
    /// CUDA C defining `elem_t` (the stored type), `__device__ float ld(elem_t)` and
    /// `__device__ elem_t st(float)` (round to nearest even).
    const CUDA_PRELUDE: &'static str;
    /// Whether the kernels have WGSL sources for this element type.
    const WGSL: bool;
    /// Whether the small-batch projections of several rows are built for tensor-core tiles
    /// (`mma.m16n8k16` on bf16, taken on NVIDIA devices of compute capability 8.0 and later:
    /// [`crate::model::kernels::linear::Variant`]).
    const TENSOR_CORE_TILES: bool;
    /// Bytes of one element in memory and in a weight dump ([`crate::dump`]).
    const BYTES: usize;
    /// Writes the element's little-endian bytes into `out` (of [`DecodeElement::BYTES`]).
    fn write_le(self, out: &mut [u8]);
    /// The element whose little-endian bytes are `bytes` (of [`DecodeElement::BYTES`]).
    fn read_le(bytes: &[u8]) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
}

impl DecodeElement for f32 {
    const NAME: &'static str = "f32";
    const CUDA_PRELUDE: &'static str = r#"typedef float elem_t;
__device__ __forceinline__ float ld(elem_t v) { return v; }
__device__ __forceinline__ elem_t st(float f) { return f; }
"#;
    const WGSL: bool = true;
    const TENSOR_CORE_TILES: bool = false;
    const BYTES: usize = 4;
    fn write_le(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        let mut b = [0u8; 4];
        b.copy_from_slice(bytes);
        f32::from_le_bytes(b)
    }
}

impl DecodeElement for bf16 {
    const NAME: &'static str = "bf16";
    // The bits by hand (no cuda_bf16.h, which NVRTC and hipRTC may not find): the upper half of
    // an f32; stores round to nearest even as `half::bf16::from_f32` does, NaN kept quiet.
    const CUDA_PRELUDE: &'static str = r#"typedef unsigned short elem_t;
__device__ __forceinline__ float ld(elem_t v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ elem_t st(float f) {
    unsigned x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (elem_t)((x >> 16) | 0x0040u);
    unsigned r = x + 0x7fffu + ((x >> 16) & 1u);
    return (elem_t)(r >> 16);
}
"#;
    const WGSL: bool = false;
    const TENSOR_CORE_TILES: bool = true;
    const BYTES: usize = 2;
    fn write_le(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        let mut b = [0u8; 2];
        b.copy_from_slice(bytes);
        bf16::from_le_bytes(b)
    }
}
