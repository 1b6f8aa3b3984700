//! HIP backend of accel-graph: stream capture through hip-sys.
