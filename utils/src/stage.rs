//! `Stage`: which kind of step a full-iteration graph captures (Megatron's `"training"` /
//! `"validation"` keys).

use std::fmt;

/// The stage of a step; each stage has its own graph, static buffers and counters.
///
/// ```
/// use accel_graph_utils::Stage;
/// assert_eq!(Stage::Training.to_string(), "training");
/// assert_eq!(Stage::ALL.len(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Forward, backward and optimizer step (`forward_only=False`).
    Training,
    /// Forward only (`forward_only=True`).
    Validation,
}

impl Stage {
    /// Both stages.
    pub const ALL: [Stage; 2] = [Stage::Training, Stage::Validation];

    /// Index into per-stage arrays.
    pub(crate) fn index(self) -> usize {
        match self {
            Stage::Training => 0,
            Stage::Validation => 1,
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Training => "training",
            Stage::Validation => "validation",
        })
    }
}
