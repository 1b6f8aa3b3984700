//! Examples and benchmarks of accel-graph: generic code run on every enabled backend.
