//! Deterministic simulated accelerator: the reference semantics of accel-graph.
