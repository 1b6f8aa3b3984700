//! wgpu backend of accel-graph: software graphs recorded once and re-encoded on replay.
