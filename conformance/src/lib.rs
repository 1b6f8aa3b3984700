//! The executable specification of accel-graph: one suite, generic over the backend.
