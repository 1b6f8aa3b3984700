//! `Target`: the backend instance a case runs on, and the way to open another instance of the
//! same device.

use std::{fmt, ops::Deref, sync::Arc};

use accel_graph_api::{Backend, GraphError};

/// Opens a new instance of the backend under test: the expression given to
/// [`crate::conformance_main!`], called once per instance needed.
pub type Factory<B> = Arc<dyn Fn() -> Result<B, GraphError> + Send + Sync>;

/// What a case runs on: one backend instance (the suite's *primary* instance, shared by every
/// case of a run) and, when the suite was given a [`Factory`], the means to open *another*
/// instance of the same device.
///
/// It dereferences to the backend, so a case calls backend methods on it directly; helpers that
/// take `&B` get [`Target::backend`].
///
/// ```
/// use accel_graph_api::{Backend, GraphError};
/// use accel_graph_conformance::Target;
/// use accel_graph_mock::{MockBackend, MockConfig};
///
/// let target = Target::open(|| MockBackend::with_config(MockConfig::shared(7)))?;
/// let other = target.another_instance().expect("a factory can open a second instance");
/// assert_ne!(other.instance_id(), target.instance_id()); // through `Deref`
///
/// let single = Target::single(MockBackend::new());
/// assert!(single.another_instance().is_err());
/// # Ok::<(), GraphError>(())
/// ```
pub struct Target<B: Backend> {
    backend: B,
    factory: Option<Factory<B>>,
}

impl<B: Backend> Target<B> {
    /// Opens the primary instance with `factory`, keeping the factory for
    /// [`Target::another_instance`]. The factory's error (no device, no driver) is returned.
    pub fn open(
        factory: impl Fn() -> Result<B, GraphError> + Send + Sync + 'static,
    ) -> Result<Self, GraphError> {
        Self::from_factory(Arc::new(factory))
    }

    /// [`Target::open`] with a factory already shared.
    pub fn from_factory(factory: Factory<B>) -> Result<Self, GraphError> {
        Ok(Target {
            backend: factory()?,
            factory: Some(factory),
        })
    }

    /// A target of one instance only: cases that need another instance are skipped (this is
    /// what [`crate::run_report`] runs on).
    pub fn single(backend: B) -> Self {
        Target {
            backend,
            factory: None,
        }
    }

    /// The primary instance.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Whether [`Target::another_instance`] can open instances (a factory was given).
    pub fn can_open_another(&self) -> bool {
        self.factory.is_some()
    }

    /// A new instance of the same device as the primary one, opened with the factory: a
    /// different [`Backend::instance_id`], the same kind and device name. `Err` says why not
    /// (no factory, the factory failed, or it returned the same instance or another device).
    pub fn another_instance(&self) -> Result<B, String> {
        let factory = self.factory.as_ref().ok_or_else(|| {
            "no factory to open another instance (the suite was given a single instance)".to_owned()
        })?;
        let other = factory().map_err(|e| format!("opening another instance: {e:?}: {e}"))?;
        if other.instance_id() == self.backend.instance_id() {
            return Err(format!(
                "the factory returned the primary instance again (instance id {:#x}): it must \
                 open a new instance each time it is called",
                other.instance_id()
            ));
        }
        let (mine, theirs) = (self.backend.capabilities(), other.capabilities());
        if other.kind() != self.backend.kind() || theirs.device_name != mine.device_name {
            return Err(format!(
                "the factory opened {} on {:?}, the primary instance is {} on {:?}",
                other.kind(),
                theirs.device_name,
                self.backend.kind(),
                mine.device_name
            ));
        }
        Ok(other)
    }
}

impl<B: Backend> Deref for Target<B> {
    type Target = B;

    fn deref(&self) -> &B {
        &self.backend
    }
}

impl<B: Backend> Clone for Target<B> {
    fn clone(&self) -> Self {
        Target {
            backend: self.backend.clone(),
            factory: self.factory.clone(),
        }
    }
}

impl<B: Backend> fmt::Debug for Target<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("backend", &self.backend)
            .field("can_open_another", &self.can_open_another())
            .finish()
    }
}
