//! Users' kernels and GEMM on HIP.

use accel_graph_api::{FloatType, Gemm, GraphError, kernel::Kernel};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, RawArg},
};

use crate::{HBlock, HipDevice, HStream};

fn unsupported(what: &str) -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: format!("{what} on the HIP backend"),
    })
}

impl DriverKernels for HipDevice {
    type Module = ();

    fn load_kernel(&self, _kernel: &Kernel) -> DriverResult<()> {
        Err(unsupported("user kernels"))
    }

    unsafe fn launch_kernel(
        &self,
        _module: &(),
        _kernel: &Kernel,
        _grid: [u32; 3],
        _args: &[RawArg<'_, HBlock>],
        _stream: &HStream,
    ) -> DriverResult<()> {
        Err(unsupported("user kernels"))
    }

    unsafe fn gemm(
        &self,
        _spec: &Gemm,
        _dtype: FloatType,
        _a: Bytes<'_, HBlock>,
        _b: Bytes<'_, HBlock>,
        _c: Bytes<'_, HBlock>,
        _stream: &HStream,
    ) -> DriverResult<()> {
        Err(unsupported("gemm"))
    }
}
