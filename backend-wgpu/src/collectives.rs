//! Collectives on wgpu: none. WebGPU has no communication between devices (no collectives,
//! no memory shared between adapters), so every communicator is refused with the reason,
//! and the collective conformance cases are skipped with it.

use std::convert::Infallible;

use accel_graph_api::{GraphError, collective::CommId};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{CommSpec, DriverCollectives, RawCollective},
};

use crate::{WgpuBlock, WgpuDevice, WgpuStreamState};

fn unsupported() -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: "collectives on the wgpu backend: WebGPU has no communication between devices (no \
               collective operations, no memory shared between adapters)"
            .to_owned(),
    })
}

impl DriverCollectives for WgpuDevice {
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
        _call: RawCollective<'_, WgpuBlock>,
        _stream: &WgpuStreamState,
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
