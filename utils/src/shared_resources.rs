//! Per-instance singletons: Megatron's `get_shared_capture_stream()`,
//! `get_shared_graph_pool()` and `get_graph_pool(use_single_mempool)`.
//!
//! Python keeps one module-level stream and pool for the one current device. Here there may be
//! several backends (and several instances of one), so each instance gets its own, kept in its
//! [`InstanceCache`](accel_graph_api::InstanceCache): they live as long as the instance and go
//! with it, so nothing keeps a dropped backend's device context alive.

use accel_graph_api::{Backend, PoolId, Result};

/// The shared capture stream of an instance (typed by backend, so that one cache entry per
/// backend type exists).
struct SharedCaptureStream<S>(S);

/// The shared graph pool of an instance.
struct SharedGraphPool(PoolId);

/// The one stream all full-iteration and optimizer graph captures of `backend` use
/// (Megatron's `get_shared_capture_stream()`): created on first call, the same stream (for
/// the same backend instance, clones included) on every later call, from any thread.
///
/// ```
/// use accel_graph_api::Backend;
/// use accel_graph_mock::MockBackend;
/// use accel_graph_utils::shared_capture_stream;
///
/// let backend = MockBackend::new();
/// let a = shared_capture_stream(&backend)?;
/// assert_eq!(a, shared_capture_stream(&backend.clone())?);
/// assert_ne!(a, backend.default_stream());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn shared_capture_stream<B: Backend>(backend: &B) -> Result<B::Stream> {
    let shared = backend
        .instance_cache()
        .get_or_try_init(|| Ok(SharedCaptureStream(backend.new_stream()?)))?;
    Ok(shared.0.clone())
}

/// One graph memory pool for every call site of `backend` (Megatron's
/// `get_shared_graph_pool()`): `graph_pool_handle()` mints a new pool each time, this lazy
/// singleton makes e.g. full-iteration and optimizer captures reuse one.
///
/// ```
/// use accel_graph_mock::MockBackend;
/// use accel_graph_utils::shared_graph_pool;
///
/// let backend = MockBackend::new();
/// let pool = shared_graph_pool(&backend);
/// assert!(pool.is_user());
/// assert_eq!(pool, shared_graph_pool(&backend));
/// assert_ne!(pool, shared_graph_pool(&MockBackend::new())); // another instance
/// ```
pub fn shared_graph_pool<B: Backend>(backend: &B) -> PoolId {
    let issue = || Ok(SharedGraphPool(backend.graph_pool_handle()));
    match backend.instance_cache().get_or_try_init(issue) {
        Ok(shared) => shared.0,
        // `issue` cannot fail.
        Err(_) => backend.graph_pool_handle(),
    }
}

/// The pool for a full-iteration or optimizer capture (Megatron's
/// `get_graph_pool(use_single_mempool)`): with `use_single_mempool` the instance's
/// [`shared_graph_pool`], otherwise a new pool for each call.
///
/// ```
/// use accel_graph_mock::MockBackend;
/// use accel_graph_utils::{graph_pool, shared_graph_pool};
///
/// let backend = MockBackend::new();
/// assert_eq!(graph_pool(&backend, true), shared_graph_pool(&backend));
/// assert_ne!(graph_pool(&backend, false), graph_pool(&backend, false));
/// ```
pub fn graph_pool<B: Backend>(backend: &B, use_single_mempool: bool) -> PoolId {
    if use_single_mempool {
        shared_graph_pool(backend)
    } else {
        backend.graph_pool_handle()
    }
}

/// Forgets the shared capture stream and graph pool of `backend`'s instance before the
/// instance goes (the stream handle is dropped now); the next call of
/// [`shared_capture_stream`] or [`shared_graph_pool`] makes new ones. Returns how many were
/// dropped.
///
/// ```
/// use accel_graph_mock::MockBackend;
/// use accel_graph_utils::{release_shared_resources, shared_capture_stream, shared_graph_pool};
///
/// let backend = MockBackend::new();
/// let pool = shared_graph_pool(&backend);
/// shared_capture_stream(&backend)?;
/// assert_eq!(release_shared_resources(&backend), 2);
/// assert_ne!(shared_graph_pool(&backend), pool);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn release_shared_resources<B: Backend>(backend: &B) -> usize {
    let cache = backend.instance_cache();
    usize::from(cache.remove::<SharedCaptureStream<B::Stream>>())
        + usize::from(cache.remove::<SharedGraphPool>())
}
