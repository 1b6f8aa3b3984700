//! `Op`: one unit of work on a stream, executed eagerly or recorded as a graph node.

use std::fmt::Write as _;

use accel_graph_api::{HostCallback, NodeKind};

use crate::{kernels, memory::Region};

/// A portable op with its memory resolved to blocks, so executing it needs no lookup.
#[derive(Clone)]
pub(crate) enum Op {
    Fill { x: Region, value: f32 },
    Copy { dst: Region, src: Region },
    AddScalar { x: Region, c: f32 },
    Scale { x: Region, a: f32 },
    Axpy { y: Region, a: f32, x: Region },
    Host { f: HostCallback },
}

impl Op {
    /// Runs the op. The only place where op semantics live: eager execution and replay share it.
    #[inline]
    pub(crate) fn execute(&self) {
        match self {
            Op::Fill { x, value } => kernels::fill(x.cells(), *value),
            Op::Copy { dst, src } => kernels::copy(dst.cells(), src.cells()),
            Op::AddScalar { x, c } => kernels::add_scalar(x.cells(), *c),
            Op::Scale { x, a } => kernels::scale(x.cells(), *a),
            Op::Axpy { y, a, x } => kernels::axpy(y.cells(), *a, x.cells()),
            Op::Host { f } => f(),
        }
    }

    /// The graph node kind the op becomes when captured.
    pub(crate) fn kind(&self) -> NodeKind {
        match self {
            Op::Fill { .. } => NodeKind::Memset,
            Op::Copy { .. } => NodeKind::Memcpy,
            Op::AddScalar { .. } | Op::Scale { .. } | Op::Axpy { .. } => NodeKind::Kernel,
            Op::Host { .. } => NodeKind::Host,
        }
    }

    /// The memory the op touches.
    pub(crate) fn regions(&self) -> impl Iterator<Item = &Region> {
        let (a, b) = match self {
            Op::Fill { x, .. } | Op::AddScalar { x, .. } | Op::Scale { x, .. } => (Some(x), None),
            Op::Copy { dst, src } => (Some(dst), Some(src)),
            Op::Axpy { y, x, .. } => (Some(y), Some(x)),
            Op::Host { .. } => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// A label naming the op and the addresses it touches (deterministic: no pointer of the
    /// host process, no process-wide counter).
    pub(crate) fn label(&self) -> String {
        let mut s = String::new();
        let _ = match self {
            Op::Fill { x, value } => write!(s, "fill x={x} value={value}"),
            Op::Copy { dst, src } => write!(s, "copy dst={dst} src={src}"),
            Op::AddScalar { x, c } => write!(s, "add_scalar x={x} c={c}"),
            Op::Scale { x, a } => write!(s, "scale x={x} a={a}"),
            Op::Axpy { y, a, x } => write!(s, "axpy y={y} a={a} x={x}"),
            Op::Host { .. } => write!(s, "host_callback"),
        };
        s
    }
}
