//! `DefaultBackend`: the most capable backend compiled in, chosen at compile time.

use accel_graph_api::Result;

/// The most capable backend enabled by cargo features: CUDA, else HIP, else wgpu, else the mock.
///
/// A compile-time choice cannot know whether the machine has the device; use
/// [`crate::BackendChoice::Auto`] to fall back at run time.
#[cfg(feature = "cuda")]
pub type DefaultBackend = accel_graph_cuda::CudaBackend;
/// The most capable backend enabled by cargo features: CUDA, else HIP, else wgpu, else the mock.
#[cfg(all(not(feature = "cuda"), feature = "hip"))]
pub type DefaultBackend = accel_graph_hip::HipBackend;
/// The most capable backend enabled by cargo features: CUDA, else HIP, else wgpu, else the mock.
#[cfg(all(not(feature = "cuda"), not(feature = "hip"), feature = "wgpu"))]
pub type DefaultBackend = accel_graph_wgpu::WgpuBackend;
/// The most capable backend enabled by cargo features: CUDA, else HIP, else wgpu, else the mock.
#[cfg(all(
    not(feature = "cuda"),
    not(feature = "hip"),
    not(feature = "wgpu"),
    feature = "mock"
))]
pub type DefaultBackend = accel_graph_mock::MockBackend;

/// Creates the [`DefaultBackend`] on its first device.
///
/// ```
/// # #[cfg(all(feature = "mock", not(any(feature = "cuda", feature = "hip", feature = "wgpu"))))]
/// # {
/// use accel_graph::Backend;
/// let backend = accel_graph::default_backend()?;
/// assert_eq!(backend.kind(), accel_graph::BackendKind::Mock);
/// # }
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
pub fn default_backend() -> Result<DefaultBackend> {
    #[cfg(feature = "cuda")]
    return accel_graph_cuda::CudaBackend::new(0);
    #[cfg(all(not(feature = "cuda"), feature = "hip"))]
    return accel_graph_hip::HipBackend::new(0);
    #[cfg(all(not(feature = "cuda"), not(feature = "hip"), feature = "wgpu"))]
    return accel_graph_wgpu::WgpuBackend::new(0);
    #[cfg(all(
        not(feature = "cuda"),
        not(feature = "hip"),
        not(feature = "wgpu"),
        feature = "mock"
    ))]
    return Ok(accel_graph_mock::MockBackend::new());
}
