//! `MockStream`: a light handle naming one simulated stream of one backend instance.

/// A stream of a [`crate::MockBackend`]: a plain handle (backend instance + index), cheap to
/// copy and compare. Index 0 is the default stream, which cannot be captured.
///
/// ```
/// use accel_graph_api::Backend;
/// use accel_graph_mock::MockBackend;
/// let backend = MockBackend::new();
/// let s = backend.new_stream()?;
/// assert!(backend.default_stream().is_default());
/// assert!(!s.is_default());
/// assert_eq!(s, s.clone());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MockStream {
    pub(crate) device: u64,
    pub(crate) index: usize,
}

impl MockStream {
    /// Index of the stream in its backend (0 = default stream; new streams count up from 1,
    /// so the same program gets the same indices).
    pub fn index(&self) -> usize {
        self.index
    }

    /// True for the default stream.
    pub fn is_default(&self) -> bool {
        self.index == 0
    }

    /// The [`accel_graph_api::Backend::instance_id`] of the backend the stream belongs to.
    pub fn instance_id(&self) -> u64 {
        self.device
    }
}
