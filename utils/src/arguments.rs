//! Checks of caller arguments against what a graph was captured with, with PyTorch-like
//! messages: a graph reads fixed buffers of fixed lengths, so anything else is an error rather
//! than silent garbage.

use accel_graph_api::{DeviceBuffer, GraphError, Result};

/// PyTorch's rule for graphed callables, quoted in every arity or length error.
const SAME_FORMAT: &str = "you must pass its arguments in the same order and format they \
                           appeared in that callable's sample_args";

/// Checks that `inputs` has as many buffers as `expected` lengths, each of that length.
/// `what` names the callee in messages, e.g. "graphed callable 0"; it is only evaluated on
/// error, so the check costs no allocation on the hot path.
pub(crate) fn check_inputs<T: DeviceBuffer>(
    what: impl Fn() -> String,
    expected: impl ExactSizeIterator<Item = usize>,
    inputs: &[&T],
) -> Result<()> {
    if inputs.len() != expected.len() {
        return Err(GraphError::ArgumentMismatch(format!(
            "{} takes {} input buffer(s), as in its sample_args, but got {}: {SAME_FORMAT}",
            what(),
            expected.len(),
            inputs.len()
        )));
    }
    for (i, (given, expected_len)) in inputs.iter().zip(expected).enumerate() {
        if given.len() != expected_len {
            return Err(GraphError::ArgumentMismatch(format!(
                "{}: input {i} has {} elements but its sample_args had {expected_len}: \
                 {SAME_FORMAT}",
                what(),
                given.len(),
            )));
        }
    }
    Ok(())
}
