//! `GraphState`: where a graph object is in its life.

use std::fmt;

/// The state of a graph object.
///
/// ```text
/// Empty --capture_begin--> Capturing --capture_end--> Captured --instantiate/replay--> Ready
///   ^                          |   (keep_graph=false goes straight to Ready)             |
///   +--------------------------+------------------------ reset --------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GraphState {
    /// Nothing captured.
    Empty,
    /// A capture is under way.
    Capturing,
    /// Captured and kept (`keep_graph`), not instantiated yet.
    Captured,
    /// Instantiated: `replay` launches it.
    Ready,
}

impl fmt::Display for GraphState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GraphState::Empty => "empty",
            GraphState::Capturing => "capturing",
            GraphState::Captured => "captured",
            GraphState::Ready => "ready",
        })
    }
}
