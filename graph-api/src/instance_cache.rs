//! `InstanceCache`: values kept per backend instance, keyed by their type.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

use crate::Result;

/// Values kept for one backend instance and dropped with it, at most one per type: where
/// per-instance singletons live (a utility's shared capture stream, shared graph pool), so
/// that they neither outlive the instance nor leak across instances.
///
/// ```
/// use accel_graph_api::{Backend, InstanceCache};
/// #[derive(Debug, PartialEq)]
/// struct Answer(u32);
/// let cache = InstanceCache::default();
/// let a = cache.get_or_try_init(|| Ok(Answer(42)))?;
/// let b = cache.get_or_try_init(|| Ok(Answer(7)))?; // already there
/// assert_eq!((a.0, b.0), (42, 42));
/// assert!(cache.remove::<Answer>());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Default)]
pub struct InstanceCache {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl InstanceCache {
    /// The value of type `T`, made by `init` on first use. `init` runs without the cache's
    /// lock held (it may call into the backend); if two threads race, one value wins and both
    /// get it. An error of `init` is returned and nothing is kept.
    pub fn get_or_try_init<T: Any + Send + Sync>(
        &self,
        init: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        if let Some(value) = self.get::<T>() {
            return Ok(value);
        }
        let made: Arc<dyn Any + Send + Sync> = Arc::new(init()?);
        let mut values = self.lock();
        if let Some(winner) = values.get(&TypeId::of::<T>()).cloned() {
            drop(values);
            // The value that lost the race is dropped without the lock held.
            drop(made);
            return Ok(downcast(winner));
        }
        values.insert(TypeId::of::<T>(), Arc::clone(&made));
        Ok(downcast(made))
    }

    /// The value of type `T`, if one is kept.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.lock().get(&TypeId::of::<T>()).cloned().map(downcast)
    }

    /// Drops the value of type `T`; true if there was one.
    pub fn remove<T: Any>(&self) -> bool {
        let removed = self.lock().remove(&TypeId::of::<T>());
        // Dropped after the lock is released: a value's drop may call into the backend.
        removed.is_some()
    }

    /// Drops every value; returns how many there were.
    pub fn clear(&self) -> usize {
        let values = std::mem::take(&mut *self.lock());
        values.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Arc<dyn Any + Send + Sync>>> {
        // Entries are inserted or removed whole, so a panic elsewhere cannot tear one.
        self.values.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Every entry is stored under its own `TypeId`, so the downcast cannot fail.
fn downcast<T: Any + Send + Sync>(value: Arc<dyn Any + Send + Sync>) -> Arc<T> {
    match value.downcast::<T>() {
        Ok(value) => value,
        Err(_) => unreachable!("instance cache entries are keyed by their own type"),
    }
}

impl fmt::Debug for InstanceCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceCache")
            .field("values", &self.lock().len())
            .finish()
    }
}
