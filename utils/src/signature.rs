//! `StepSignature` and `SignaturePolicy`: what a full-iteration graph was captured for, and
//! what to do when a step does not match it.

use std::fmt;

use accel_graph_api::DeviceBuffer;

/// The shape of a step's inputs: the number of microbatches and the length of every input of
/// every microbatch. A graph replays only for steps of the signature it was captured with.
///
/// ```
/// use accel_graph_api::{Backend, DeviceBuffer};
/// use accel_graph_utils::StepSignature;
/// use accel_graph_mock::MockBackend;
///
/// let backend = MockBackend::new();
/// let (x, y) = (backend.alloc::<f32>(4)?, backend.alloc::<f32>(2)?);
/// let sig = StepSignature::of(&[&[&x, &y], &[&x, &y]]);
/// assert_eq!(sig.microbatches(), 2);
/// assert_eq!(sig.to_string(), "2 microbatch(es) with input lengths [[4, 2], [4, 2]]");
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepSignature {
    input_lens: Vec<Vec<usize>>,
}

impl StepSignature {
    /// The signature of `microbatches[m][i]`.
    pub fn of<T: DeviceBuffer>(microbatches: &[&[&T]]) -> Self {
        StepSignature {
            input_lens: microbatches
                .iter()
                .map(|inputs| inputs.iter().map(|b| b.len()).collect())
                .collect(),
        }
    }

    /// Whether `microbatches` has this signature (no allocation).
    pub fn matches<T: DeviceBuffer>(&self, microbatches: &[&[&T]]) -> bool {
        self.input_lens.len() == microbatches.len()
            && self
                .input_lens
                .iter()
                .zip(microbatches)
                .all(|(lens, inputs)| {
                    lens.len() == inputs.len()
                        && lens.iter().zip(*inputs).all(|(l, b)| *l == b.len())
                })
    }

    /// Number of microbatches.
    pub fn microbatches(&self) -> usize {
        self.input_lens.len()
    }

    /// `[microbatch][input]` lengths.
    pub fn input_lens(&self) -> &[Vec<usize>] {
        &self.input_lens
    }
}

impl fmt::Display for StepSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} microbatch(es) with input lengths {:?}",
            self.input_lens.len(),
            self.input_lens
        )
    }
}

/// What [`super::FullGraphWrapper`] does when a step's [`StepSignature`] differs from the one
/// its stage's graph was captured with.
///
/// ```
/// use accel_graph_utils::SignaturePolicy;
/// assert_eq!(SignaturePolicy::default(), SignaturePolicy::Error);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignaturePolicy {
    /// Fail with [`GraphError::ArgumentMismatch`](accel_graph_api::GraphError::ArgumentMismatch); the graph stays as captured. The
    /// default: a silent recapture can hide a shape bug and grows memory use.
    #[default]
    Error,
    /// Drop the stage's graph and static buffers and capture the step again for the new
    /// signature.
    Recapture,
}
