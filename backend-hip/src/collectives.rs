//! Collectives on HIP: none. AMD's collectives library is RCCL, which hip-sys does not bind
//! and the HIP-on-CUDA shim does not forward, so every communicator is refused with the
//! reason, and the collective conformance cases are skipped with it.

use crate::HipDevice;

accel_graph_driver::no_collectives!(
    HipDevice,
    "collectives on the HIP backend: it has no RCCL (hip-sys binds no RCCL, and the HIP-on-CUDA \
     shim forwards no NCCL)"
);
