//! The portable ops on wgpu, from one table.
//!
//! Every element-wise op is the same compute kernel around a different expression, so each is
//! one row of the table below: its entry point, whether it reads a second buffer, and the new
//! value of the written element as a WGSL expression of `y` (that element), `x` (the element
//! read) and `a` (the op's scalar). The macros of `wgsl.rs` make of the table the `Kernel`
//! enum and the WGSL of every entry point ([`PORTABLE_OPS_WGSL`], built at compile time);
//! `kernels.rs` builds a pipeline per row. A binary row also gets a `<name>_self` entry
//! point for the op applied to one buffer twice (`axpy(x, a, x)`), which WebGPU cannot bind
//! as two operands.
//!
//! Adding a portable op is one row of the table and one arm of `kernel_of`, both here.

use std::ffi::c_void;

use accel_graph_api::{NodeKind, PortableOp};
use accel_graph_driver::{
    DriverResult,
    api::{DriverOps, HostFn, Region},
};

use crate::{
    WgpuDevice,
    command::{Command, HostFunction},
    kernels::check_binding_size,
    memory::WgpuBlock,
    stream::WgpuStreamState,
};

// The table. `rounded` keeps a product from being fused into the sum around it.
crate::wgsl::element_kernels! {
    /// `y = a`. A kernel rather than a buffer clear: WebGPU clears only to zero.
    Fill = "fill", unary, "a";
    /// `y += a`.
    AddScalar = "add_scalar", unary, "y + a";
    /// `y *= a`.
    Scale = "scale", unary, "y * a";
    /// `y += a * x`, the product rounded before the sum.
    Axpy = "axpy", binary, "y + rounded(a * x)";
    /// `y *= x`.
    Mul = "mul", binary, "y * x";
    /// `y = x`: a copy between two views of one buffer, which WebGPU's buffer copy refuses.
    CopyWithin = "copy_within", binary, "x";
}

/// The kernel a portable op runs; `None` for `copy`, which is a buffer copy.
fn kernel_of<T>(op: &PortableOp<T>) -> Option<Kernel> {
    match op {
        PortableOp::Fill { .. } => Some(Kernel::Fill),
        PortableOp::Copy { .. } => None,
        PortableOp::AddScalar { .. } => Some(Kernel::AddScalar),
        PortableOp::Scale { .. } => Some(Kernel::Scale),
        PortableOp::Axpy { .. } => Some(Kernel::Axpy),
        PortableOp::Mul { .. } => Some(Kernel::Mul),
    }
}

impl WgpuDevice {
    /// The command that runs `op`: a resolved kernel launch, a buffer copy, or a node that
    /// does nothing.
    pub(crate) fn resolve(&self, op: PortableOp<Region<'_, WgpuBlock>>) -> DriverResult<Command> {
        let (out, input) = op.operands();
        let len = out.len;
        let Some(kernel) = kernel_of(&op) else {
            // A copy: WebGPU forbids copying within one buffer, and onto itself a copy
            // changes nothing, so that (like an empty copy) is a node that does nothing.
            return match input {
                Some(src) if len > 0 && src.block.address() != out.block.address() => {
                    Ok(Command::Copy {
                        src: src.block.buffer().clone(),
                        src_offset: src.byte_offset() as u64,
                        dst: out.block.buffer().clone(),
                        dst_offset: out.byte_offset() as u64,
                        bytes: out.num_bytes() as u64,
                    })
                }
                // Two views of one buffer at different places: a kernel does the copy.
                Some(src) if len > 0 && src.offset != out.offset => {
                    let gpu = self.gpu();
                    check_binding_size(&gpu.limits, op.name(), len)?;
                    Ok(Command::Dispatch(gpu.kernels.resolve(
                        &gpu.device,
                        &gpu.limits,
                        Kernel::CopyWithin,
                        op,
                    )))
                }
                _ => Ok(Command::Nothing {
                    kind: NodeKind::Memcpy,
                    label: "copy (no-op)",
                }),
            };
        };
        let gpu = self.gpu();
        check_binding_size(&gpu.limits, op.name(), len)?;
        if len == 0 {
            // Still a node, so graphs of generic code have the same shape on every backend.
            return Ok(Command::Nothing {
                kind: op.node_kind(),
                label: op.name(),
            });
        }
        Ok(Command::Dispatch(gpu.kernels.resolve(
            &gpu.device,
            &gpu.limits,
            kernel,
            op,
        )))
    }
}

impl DriverOps for WgpuDevice {
    unsafe fn launch_op(
        &self,
        op: PortableOp<Region<'_, WgpuBlock>>,
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        let command = self.resolve(op)?;
        self.issue(stream, command)
    }

    /// Eagerly the function runs on the calling thread once the stream's earlier work has
    /// completed; in a graph it runs at its place during replay, which waits for the work
    /// before it.
    unsafe fn launch_host(
        &self,
        stream: &WgpuStreamState,
        func: HostFn,
        data: *mut c_void,
    ) -> DriverResult<()> {
        self.issue(stream, Command::Host(HostFunction { func, data }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WORKGROUP_SIZE;

    #[test]
    fn every_row_has_an_entry_point_and_an_element_function() {
        for kernel in Kernel::ALL {
            let entry = format!("fn {}(", kernel.name());
            let element = format!("fn {}_element(", kernel.name());
            assert!(PORTABLE_OPS_WGSL.contains(&entry), "{entry}");
            assert!(PORTABLE_OPS_WGSL.contains(&element), "{element}");
            if let Some(aliased) = kernel.self_entry() {
                assert!(PORTABLE_OPS_WGSL.contains(&format!("fn {aliased}(")));
            }
        }
        assert!(PORTABLE_OPS_WGSL.contains("fn axpy_self("));
        assert!(!PORTABLE_OPS_WGSL.contains("fn fill_self("));
        assert!(PORTABLE_OPS_WGSL.contains(&format!("@workgroup_size({WORKGROUP_SIZE})")));
    }

    #[test]
    fn the_wgsl_parses() {
        // naga is wgpu's own front end: a table row with a typo fails here, not on a device.
        let parsed = wgpu::naga::front::wgsl::parse_str(PORTABLE_OPS_WGSL);
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}
