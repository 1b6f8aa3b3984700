//! Process-wide singletons per backend instance: Megatron's `get_shared_capture_stream()`,
//! `get_shared_graph_pool()` and `get_graph_pool(use_single_mempool)`.
//!
//! Python keeps one module-level stream and pool for the one current device. Here there may be
//! several backends (and several instances of one), so each instance — identified by its type
//! and [`Backend::instance_id`] — gets its own. A `static` inside a generic function would be
//! shared by every monomorphization, hence one registry keyed by `(TypeId, instance id)`.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    sync::{Mutex, MutexGuard, OnceLock},
};

use crate::{Backend, PoolId, Result};

/// Which singleton of an instance an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    CaptureStream,
    GraphPool,
}

type Key = (TypeId, u64, Slot);
type Registry = Mutex<HashMap<Key, Box<dyn Any + Send + Sync>>>;

fn registry() -> MutexGuard<'static, HashMap<Key, Box<dyn Any + Send + Sync>>> {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    // Entries are inserted whole, so a panic elsewhere cannot leave one half-written.
    REGISTRY
        .get_or_init(Registry::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn get_or_try_insert<B: Backend, T: Any + Clone + Send + Sync>(
    backend: &B,
    slot: Slot,
    make: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let key = (TypeId::of::<B>(), backend.instance_id(), slot);
    let mut map = registry();
    if let Some(value) = map.get(&key).and_then(|v| v.downcast_ref::<T>()) {
        return Ok(value.clone());
    }
    let value = make()?;
    map.insert(key, Box::new(value.clone()));
    Ok(value)
}

/// The one stream all full-iteration and optimizer graph captures of `backend` use
/// (Megatron's `get_shared_capture_stream()`): created on first call, the same stream (for
/// the same backend instance, clones included) on every later call, from any thread.
///
/// ```
/// use accel_graph_api::{Backend, utils::shared_capture_stream};
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let a = shared_capture_stream(&backend)?;
/// assert_eq!(a, shared_capture_stream(&backend.clone())?);
/// assert_ne!(a, backend.default_stream());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn shared_capture_stream<B: Backend>(backend: &B) -> Result<B::Stream> {
    get_or_try_insert(backend, Slot::CaptureStream, || backend.new_stream())
}

/// One graph memory pool for every call site of `backend` (Megatron's
/// `get_shared_graph_pool()`): `graph_pool_handle()` mints a new pool each time, this lazy
/// singleton makes e.g. full-iteration and optimizer captures reuse one.
///
/// ```
/// use accel_graph_api::{Backend, utils::shared_graph_pool};
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let pool = shared_graph_pool(&backend);
/// assert!(pool.is_user());
/// assert_eq!(pool, shared_graph_pool(&backend));
/// assert_ne!(pool, shared_graph_pool(&MockBackend::new())); // another instance
/// ```
pub fn shared_graph_pool<B: Backend>(backend: &B) -> PoolId {
    // Making a pool id cannot fail.
    get_or_try_insert(backend, Slot::GraphPool, || Ok(backend.graph_pool_handle()))
        .unwrap_or_else(|_| backend.graph_pool_handle())
}

/// The pool for a full-iteration or optimizer capture (Megatron's
/// `get_graph_pool(use_single_mempool)`): with `use_single_mempool` the process-wide
/// [`shared_graph_pool`], otherwise a new pool for each call.
///
/// ```
/// use accel_graph_api::utils::{graph_pool, shared_graph_pool};
/// use accel_graph_mock::MockBackend;
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

/// Forgets the shared capture stream and graph pool of `backend`'s instance, so the stream
/// handle is dropped (a backend that is done can release its device context); the next call of
/// [`shared_capture_stream`] or [`shared_graph_pool`] makes new ones. Returns how many entries
/// were dropped.
///
/// ```
/// use accel_graph_api::utils::{release_shared_resources, shared_capture_stream, shared_graph_pool};
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let pool = shared_graph_pool(&backend);
/// shared_capture_stream(&backend)?;
/// assert_eq!(release_shared_resources(&backend), 2);
/// assert_ne!(shared_graph_pool(&backend), pool);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub fn release_shared_resources<B: Backend>(backend: &B) -> usize {
    let (ty, id) = (TypeId::of::<B>(), backend.instance_id());
    let removed: Vec<_> = {
        let mut map = registry();
        let keys: Vec<Key> = map
            .keys()
            .filter(|(t, i, _)| *t == ty && *i == id)
            .copied()
            .collect();
        keys.into_iter().filter_map(|k| map.remove(&k)).collect()
    };
    // Dropped outside the lock: a stream's drop may call into the backend.
    removed.len()
}
