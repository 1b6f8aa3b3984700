//! Users' kernels and GEMM on the simulated device: a kernel runs its host function over
//! copies of its arguments' elements, GEMM the host reference — so a mock test of code built
//! on them checks exactly what the definitions compute.

use std::{
    panic::{self, AssertUnwindSafe},
    sync::Arc,
};

use accel_graph_api::{
    FloatType, Gemm, GraphError, gemm_reference,
    half::{bf16, f16},
    kernel::{Access, ElementType, HostArg, HostKernelFn, HostLaunch, Kernel, Scalar},
};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, DriverKernels, RawArg},
};

use crate::{
    MockDevice,
    memory::{MockBlock, read_bytes, write_bytes},
    ops::MockCommand,
    stream::MockStreamState,
};

/// Bytes of a block an argument or operand touches.
#[derive(Clone)]
pub(crate) struct ByteRange {
    pub(crate) block: Arc<MockBlock>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl ByteRange {
    pub(crate) fn of(bytes: Bytes<'_, Arc<MockBlock>>) -> Self {
        ByteRange {
            block: Arc::clone(bytes.block),
            offset: bytes.offset,
            len: bytes.len,
        }
    }

    fn read(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        read_bytes(&self.block.cells, self.offset, &mut out);
        out
    }

    fn write(&self, data: &[u8]) {
        write_bytes(
            &self.block.cells,
            self.offset,
            &data[..data.len().min(self.len)],
        );
    }
}

impl std::fmt::Display for ByteRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:#x}+{}..{}",
            self.block.address(),
            self.offset,
            self.offset + self.len
        )
    }
}

/// One argument of a recorded kernel launch.
#[derive(Clone)]
pub(crate) enum MockArg {
    Buffer {
        range: ByteRange,
        element: ElementType,
        access: Access,
    },
    Scalar(Scalar),
}

/// A kernel launch, run now or recorded as a node.
#[derive(Clone)]
pub(crate) struct KernelLaunch {
    pub(crate) name: Arc<str>,
    pub(crate) host: HostKernelFn,
    pub(crate) launch: HostLaunch,
    pub(crate) args: Vec<MockArg>,
}

/// A matrix product, run now or recorded as a node.
#[derive(Clone)]
pub(crate) struct GemmLaunch {
    pub(crate) spec: Gemm,
    pub(crate) dtype: FloatType,
    pub(crate) a: ByteRange,
    pub(crate) b: ByteRange,
    pub(crate) c: ByteRange,
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic without a message".to_owned())
}

impl KernelLaunch {
    /// Blocks the launch touches, for the sanitizer.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = &Arc<MockBlock>> {
        self.args.iter().filter_map(|a| match a {
            MockArg::Buffer { range, .. } => Some(&range.block),
            MockArg::Scalar(_) => None,
        })
    }

    /// The node label: name, grid and arguments.
    pub(crate) fn label(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| match a {
                MockArg::Buffer { range, access, .. } => format!("{range}:{access:?}"),
                MockArg::Scalar(s) => format!("{s:?}"),
            })
            .collect();
        format!(
            "kernel {} grid={:?} ({})",
            self.name,
            self.launch.grid,
            args.join(", ")
        )
    }

    /// Runs the host function over copies of the arguments, then writes back what it wrote.
    /// A panic in it (an index out of bounds, an element type read wrongly) is
    /// [`GraphError::KernelFailed`], and nothing is written back.
    pub(crate) fn run(&self) -> DriverResult<()> {
        let mut host_args: Vec<HostArg> = self
            .args
            .iter()
            .map(|a| match a {
                MockArg::Buffer {
                    range,
                    element,
                    access,
                } => HostArg::buffer(&range.read(), *element, *access),
                MockArg::Scalar(s) => HostArg::scalar_arg(*s),
            })
            .collect();
        let ran = panic::catch_unwind(AssertUnwindSafe(|| {
            (self.host)(&mut host_args, &self.launch)
        }));
        if let Err(payload) = ran {
            return Err(DriverError::Api(GraphError::KernelFailed {
                kernel: self.name.to_string(),
                message: panic_message(payload),
            }));
        }
        for (arg, host) in self.args.iter().zip(&host_args) {
            if let (MockArg::Buffer { range, .. }, Some(bytes)) = (arg, host.written_bytes()) {
                range.write(bytes);
            }
        }
        Ok(())
    }
}

/// The host reference over byte images of the operands, in `T`.
fn gemm_as<T: accel_graph_api::FloatElement>(spec: &Gemm, a: &[u8], b: &[u8], c: &mut [u8]) {
    let (a, b) = (
        bytemuck::pod_collect_to_vec::<u8, T>(a),
        bytemuck::pod_collect_to_vec::<u8, T>(b),
    );
    let mut out = bytemuck::pod_collect_to_vec::<u8, T>(c);
    gemm_reference(spec, &a, &b, &mut out);
    c.copy_from_slice(bytemuck::cast_slice(&out));
}

impl GemmLaunch {
    /// Blocks the product touches, for the sanitizer.
    pub(crate) fn blocks(&self) -> [&Arc<MockBlock>; 3] {
        [&self.a.block, &self.b.block, &self.c.block]
    }

    /// The node label.
    pub(crate) fn label(&self) -> String {
        let s = &self.spec;
        format!(
            "gemm {}x{}x{} {}{}{} batch={} a={} b={} c={}",
            s.m,
            s.n,
            s.k,
            self.dtype,
            if s.transpose_a { " A^T" } else { "" },
            if s.transpose_b { " B^T" } else { "" },
            s.batch,
            self.a,
            self.b,
            self.c
        )
    }

    /// Runs the host reference.
    pub(crate) fn run(&self) {
        let (a, b, mut c) = (self.a.read(), self.b.read(), self.c.read());
        match self.dtype {
            FloatType::F32 => gemm_as::<f32>(&self.spec, &a, &b, &mut c),
            FloatType::Bf16 => gemm_as::<bf16>(&self.spec, &a, &b, &mut c),
            FloatType::F16 => gemm_as::<f16>(&self.spec, &a, &b, &mut c),
        }
        self.c.write(&c);
    }
}

impl DriverKernels for MockDevice {
    type Module = HostKernelFn;

    fn load_kernel(&self, kernel: &Kernel) -> DriverResult<HostKernelFn> {
        self.alive()?;
        kernel
            .host_fn()
            .cloned()
            .ok_or_else(|| DriverError::Api(kernel.missing_source("mock", "host function")))
    }

    unsafe fn launch_kernel(
        &self,
        module: &HostKernelFn,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, Arc<MockBlock>>],
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        let args = args
            .iter()
            .map(|a| match *a {
                RawArg::Buffer {
                    bytes,
                    element,
                    access,
                } => MockArg::Buffer {
                    range: ByteRange::of(bytes),
                    element,
                    access,
                },
                RawArg::Scalar(s) => MockArg::Scalar(s),
            })
            .collect();
        let launch = KernelLaunch {
            name: Arc::from(kernel.name()),
            host: Arc::clone(module),
            launch: HostLaunch {
                grid,
                block: kernel.block_dims(),
            },
            args,
        };
        self.issue(stream, MockCommand::Kernel(Arc::new(launch)))
    }

    unsafe fn gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: Bytes<'_, Arc<MockBlock>>,
        b: Bytes<'_, Arc<MockBlock>>,
        c: Bytes<'_, Arc<MockBlock>>,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        let launch = GemmLaunch {
            spec: *spec,
            dtype,
            a: ByteRange::of(a),
            b: ByteRange::of(b),
            c: ByteRange::of(c),
        };
        self.issue(stream, MockCommand::Gemm(Arc::new(launch)))
    }
}
