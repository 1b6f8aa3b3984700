//! [`Nested`]: work inside a node — a child graph's commands, a conditional node's bodies and
//! their plans — shared behind a trait object.
//!
//! Why not a plain `Arc<T>`: these types contain commands again, and deriving `Send`/`Sync`
//! for a recursive type makes the compiler walk wgpu-core's resource types once more per
//! path of recursion. That depth exceeds the default recursion limit in every crate that asks
//! whether a graph or a backend is `Send` (moving a backend into a thread does). A trait
//! object's auto traits come from its declared bounds instead, so the walk stops here, and the
//! one place that proves them structurally is [`Nested::new`], inside this crate.

use std::{ops::Deref, sync::Arc};

/// Shared nested work of type `T`.
pub(crate) struct Nested<T: 'static>(Arc<dyn Holds<T>>);

/// A `T` reachable through a trait object that is `Send + Sync` by declaration.
trait Holds<T>: Send + Sync {
    fn get(&self) -> &T;
}

impl<T: Send + Sync> Holds<T> for T {
    fn get(&self) -> &T {
        self
    }
}

impl<T: Send + Sync + 'static> Nested<T> {
    /// Shares `value` (which is `Send + Sync`, checked here).
    pub(crate) fn new(value: T) -> Self {
        Nested(Arc::new(value))
    }
}

impl<T: 'static> Deref for Nested<T> {
    type Target = T;

    fn deref(&self) -> &T {
        <dyn Holds<T> as Holds<T>>::get(&*self.0)
    }
}

impl<T: 'static> Clone for Nested<T> {
    fn clone(&self) -> Self {
        Nested(Arc::clone(&self.0))
    }
}
