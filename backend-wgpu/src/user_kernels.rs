//! Users' kernels and GEMM on wgpu.

use accel_graph_api::{FloatType, Gemm, GraphError, kernel::Kernel};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, RawArg},
};

use crate::{WgpuBlock, WgpuDevice, WgpuStreamState};

fn unsupported(what: &str) -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: format!("{what} on the wgpu backend"),
    })
}

impl DriverKernels for WgpuDevice {
    type Module = ();

    fn load_kernel(&self, _kernel: &Kernel) -> DriverResult<()> {
        Err(unsupported("user kernels"))
    }

    unsafe fn launch_kernel(
        &self,
        _module: &(),
        _kernel: &Kernel,
        _grid: [u32; 3],
        _args: &[RawArg<'_, WgpuBlock>],
        _stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        Err(unsupported("user kernels"))
    }

    unsafe fn gemm(
        &self,
        _spec: &Gemm,
        _dtype: FloatType,
        _a: Bytes<'_, WgpuBlock>,
        _b: Bytes<'_, WgpuBlock>,
        _c: Bytes<'_, WgpuBlock>,
        _stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        Err(unsupported("gemm"))
    }
}
