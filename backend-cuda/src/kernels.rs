//! Users' kernels and GEMM on CUDA.

use accel_graph_api::{FloatType, Gemm, GraphError, kernel::Kernel};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, RawArg},
};

use crate::{CuBlock, CuStream, CudaDevice};

fn unsupported(what: &str) -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: format!("{what} on the CUDA backend"),
    })
}

impl DriverKernels for CudaDevice {
    type Module = ();

    fn load_kernel(&self, _kernel: &Kernel) -> DriverResult<()> {
        Err(unsupported("user kernels"))
    }

    unsafe fn launch_kernel(
        &self,
        _module: &(),
        _kernel: &Kernel,
        _grid: [u32; 3],
        _args: &[RawArg<'_, CuBlock>],
        _stream: &CuStream,
    ) -> DriverResult<()> {
        Err(unsupported("user kernels"))
    }

    unsafe fn gemm(
        &self,
        _spec: &Gemm,
        _dtype: FloatType,
        _a: Bytes<'_, CuBlock>,
        _b: Bytes<'_, CuBlock>,
        _c: Bytes<'_, CuBlock>,
        _stream: &CuStream,
    ) -> DriverResult<()> {
        Err(unsupported("gemm"))
    }
}
