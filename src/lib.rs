//! accel-graph facade (placeholder until the facade lands).
