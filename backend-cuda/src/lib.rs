//! CUDA backend of accel-graph: native stream capture through cudarc (dynamic loading).
