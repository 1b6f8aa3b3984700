//! `Outputs`: what a graphed call returns — the graph's static output buffers (overwritten by
//! the next replay, so only borrowed) or, after an eager fallback, buffers of its own.

use std::ops::Deref;

use accel_graph_api::Backend;

/// Output buffers of a graphed call.
///
/// After a replay these are the graph's *static* outputs: PyTorch returns aliases of them
/// (`o.detach()`), which the next replay overwrites; here the borrow makes that visible — copy
/// what you need to keep before calling again. After an eager fallback the buffers are owned.
/// Either way it dereferences to `[B::Buffer<f32>]`.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer};
/// use accel_graph_utils::Outputs;
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let owned = Outputs::<MockBackend>::Eager(vec![backend.alloc_from(&[1.0])?]);
/// assert!(!owned.is_replayed());
/// assert_eq!(owned.len(), 1);
/// assert_eq!(backend.download(&owned[0])?, vec![1.0]);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug)]
pub enum Outputs<'a, B: Backend> {
    /// The graph's static outputs, written by the replay just launched.
    Static(&'a [B::Buffer<f32>]),
    /// Outputs of an eager run (mode mismatch or no graph for this input).
    Eager(Vec<B::Buffer<f32>>),
}

impl<B: Backend> Outputs<'_, B> {
    /// True when the outputs come from a graph replay.
    pub fn is_replayed(&self) -> bool {
        matches!(self, Outputs::Static(_))
    }
}

impl<B: Backend> Deref for Outputs<'_, B> {
    type Target = [B::Buffer<f32>];

    fn deref(&self) -> &[B::Buffer<f32>] {
        match self {
            Outputs::Static(buffers) => buffers,
            Outputs::Eager(buffers) => buffers,
        }
    }
}
