//! `Command`: one unit of fully resolved stream work. Eager ops encode a command and submit it
//! at once; a capture records commands, and replay re-encodes the recorded ones.

use accel_graph_api::{HostCallback, NodeKind};

use crate::kernels::{Kernel, ResolvedDispatch};

/// A piece of stream work with every GPU object it needs already built.
#[derive(Clone)]
pub(crate) enum Command {
    /// A portable kernel launch.
    Dispatch(ResolvedDispatch),
    /// `dst[..bytes] = src[..bytes]`.
    Copy {
        src: wgpu::Buffer,
        dst: wgpu::Buffer,
        bytes: u64,
    },
    /// A host function run in stream order.
    Host(HostCallback),
    /// Work that touches nothing (an op on an empty buffer, a copy onto itself): still a node,
    /// so graphs of generic code have the same shape on every backend.
    Nothing { kind: NodeKind, label: &'static str },
}

impl Command {
    /// The node kind this command shows as in `nodes()` and DOT dumps.
    pub(crate) fn kind(&self) -> NodeKind {
        match self {
            Command::Dispatch(d) if d.kernel == Kernel::Fill => NodeKind::Memset,
            Command::Dispatch(_) => NodeKind::Kernel,
            Command::Copy { .. } => NodeKind::Memcpy,
            Command::Host(_) => NodeKind::Host,
            Command::Nothing { kind, .. } => *kind,
        }
    }

    /// The node label.
    pub(crate) fn label(&self) -> String {
        match self {
            Command::Dispatch(d) => format!(
                "{} grid=({},{}) x {}",
                d.kernel.name(),
                d.groups.0,
                d.groups.1,
                crate::kernels::WORKGROUP_SIZE
            ),
            Command::Copy { bytes, .. } => format!("copy {bytes} bytes"),
            Command::Host(_) => "host_callback".to_owned(),
            Command::Nothing { label, .. } => (*label).to_owned(),
        }
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.label())
    }
}

/// Encodes a run of GPU commands (no host command) into `encoder`: consecutive dispatches share
/// one compute pass, copies go between passes.
pub(crate) fn encode_gpu_run<'a>(
    encoder: &mut wgpu::CommandEncoder,
    commands: impl IntoIterator<Item = &'a Command>,
) {
    // `forget_lifetime` lets the pass live in a variable next to the encoder; wgpu then locks the
    // encoder at run time until the pass drops, which happens before every copy.
    let mut pass: Option<wgpu::ComputePass<'static>> = None;
    for command in commands {
        match command {
            Command::Dispatch(d) => {
                if d.groups.0 == 0 {
                    continue;
                }
                let p = match &mut pass {
                    Some(p) => p,
                    None => pass.insert(
                        encoder
                            .begin_compute_pass(&Default::default())
                            .forget_lifetime(),
                    ),
                };
                d.encode(p);
            }
            Command::Copy { src, dst, bytes } => {
                // A pass borrows the encoder; close it before a copy.
                drop(pass.take());
                encoder.copy_buffer_to_buffer(src, 0, dst, 0, *bytes);
            }
            Command::Host(_) | Command::Nothing { .. } => {}
        }
    }
}
