//! Collectives on HIP: none. AMD's collectives library is RCCL, which hip-sys does not bind
//! and the HIP-on-CUDA shim does not forward, so every communicator is refused with the
//! reason, and the collective conformance cases are skipped with it.

use std::convert::Infallible;

use accel_graph_api::{GraphError, collective::CommId};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{CommSpec, DriverCollectives, RawCollective},
};

use crate::{HBlock, HStream, HipDevice};

fn unsupported() -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: "collectives on the HIP backend: it has no RCCL (hip-sys binds no RCCL, and the \
               HIP-on-CUDA shim forwards no NCCL)"
            .to_owned(),
    })
}

impl DriverCollectives for HipDevice {
    /// No communicator can be made.
    type Comm = Infallible;

    fn comm_support(&self) -> DriverResult<()> {
        Err(unsupported())
    }

    fn comm_unique_id(&self) -> DriverResult<CommId> {
        Err(unsupported())
    }

    fn comm_init(&self, _spec: CommSpec<'_>) -> DriverResult<Infallible> {
        Err(unsupported())
    }

    unsafe fn collective(
        &self,
        comm: &Infallible,
        _call: RawCollective<'_, HBlock>,
        _stream: &HStream,
    ) -> DriverResult<()> {
        match *comm {}
    }

    fn comm_error(&self, comm: &Infallible) -> Option<String> {
        match *comm {}
    }

    fn comm_abort(&self, comm: &Infallible, _reason: &str) {
        match *comm {}
    }
}
