//! The portable ops on simulated memory, and every command a mock stream runs or records.
//! Eager execution and graph replay both run [`MockDevice::execute`], so a replay gives the
//! eager result bit for bit.

use std::{
    ffi::c_void,
    fmt::Write as _,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
};

use accel_graph_api::{GraphError, NodeKind, PortableOp};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{DriverOps, HostFn, Region},
    software::Node,
};

use crate::{
    MockDevice, counters::Counters, event::MockEventState, memory::MockBlock,
    stream::MockStreamState,
};

/// The `f32` elements an op touches: `len` of a block from element `offset` on.
#[derive(Clone)]
pub(crate) struct Cells {
    pub(crate) block: Arc<MockBlock>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Cells {
    /// The elements; the range is within the block (the driver layer guarantees it).
    #[inline]
    fn get(&self) -> &[AtomicU32] {
        let cells = &self.block.cells;
        let start = self.offset.min(cells.len());
        &cells[start..start + self.len.min(cells.len() - start)]
    }
}

impl std::fmt::Display for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.offset == 0 {
            write!(f, "{:#x}[{}]", self.block.address(), self.len)
        } else {
            write!(
                f,
                "{:#x}[{}..{}]",
                self.block.address(),
                self.offset,
                self.offset + self.len
            )
        }
    }
}

/// A host function with its data pointer, as the driver layer hands it over.
#[derive(Clone, Copy)]
pub(crate) struct HostFunction {
    func: HostFn,
    data: *mut c_void,
}

// SAFETY: the driver layer keeps `data` alive and callable from any thread for as long as the
// host function can run (that is `launch_host`'s contract); the pointer is only passed back.
unsafe impl Send for HostFunction {}
// SAFETY: as above; the value is never mutated.
unsafe impl Sync for HostFunction {}

/// One unit of stream work, run now or recorded as a graph node.
#[derive(Clone)]
pub(crate) enum MockCommand {
    /// A portable op.
    Op(PortableOp<Cells>),
    /// A host function.
    Host(HostFunction),
    /// The record of an external event (a node of its own in a graph).
    RecordEvent(Arc<MockEventState>),
    /// A wait on an external event (a node of its own in a graph; the mock's streams are
    /// synchronous, so it orders nothing more, except for the race sanitizer).
    WaitEvent(Arc<MockEventState>),
    /// A user kernel's launch.
    Kernel(Arc<crate::kernels::KernelLaunch>),
    /// A matrix product.
    Gemm(Arc<crate::kernels::GemmLaunch>),
    /// A child graph: another graph's recorded commands, run in their order (inlined into the
    /// plan an instantiation makes).
    Child(Arc<Vec<Node<MockCommand>>>),
    /// A conditional node: bodies run or skipped by a condition in simulated memory, read when
    /// the node runs.
    Conditional(Arc<crate::editing::MockConditional>),
}

impl MockCommand {
    /// The node kind the command shows as.
    pub(crate) fn kind(&self) -> NodeKind {
        match self {
            MockCommand::Op(op) => op.node_kind(),
            MockCommand::Kernel(_) | MockCommand::Gemm(_) => NodeKind::Kernel,
            MockCommand::Host(_) => NodeKind::Host,
            MockCommand::RecordEvent(_) => NodeKind::EventRecord,
            MockCommand::WaitEvent(_) => NodeKind::EventWait,
            MockCommand::Child(_) => NodeKind::Graph,
            MockCommand::Conditional(_) => NodeKind::Conditional,
        }
    }

    /// A label naming the command and the addresses it touches (deterministic: no pointer of
    /// the host process).
    pub(crate) fn label(&self) -> String {
        match self {
            MockCommand::Op(op) => op_label(op),
            MockCommand::Kernel(k) => k.label(),
            MockCommand::Gemm(g) => g.label(),
            MockCommand::Host(_) => "host_callback".to_owned(),
            MockCommand::RecordEvent(_) => "event_record".to_owned(),
            MockCommand::WaitEvent(_) => "event_wait".to_owned(),
            MockCommand::Child(nodes) => format!("child graph ({} nodes)", nodes.len()),
            MockCommand::Conditional(c) => c.label(),
        }
    }

    /// The address of the first block the command touches that went back to the device.
    fn released_address(&self) -> Option<u64> {
        let released = |block: &Arc<MockBlock>| block.is_released().then(|| block.address());
        match self {
            MockCommand::Op(op) => {
                let (out, input) = op.as_ref().operands();
                [Some(out), input]
                    .into_iter()
                    .flatten()
                    .find_map(|c| released(&c.block))
            }
            MockCommand::Kernel(k) => k.blocks().find_map(released),
            MockCommand::Gemm(g) => g.blocks().into_iter().find_map(released),
            MockCommand::Child(nodes) => nodes.iter().find_map(|n| n.command.released_address()),
            MockCommand::Conditional(c) => released(&c.cond.block).or_else(|| {
                c.bodies
                    .iter()
                    .flatten()
                    .find_map(MockCommand::released_address)
            }),
            _ => None,
        }
    }
}

/// The label of `op` over operands printed as `address[elements]` (a node's label; the race
/// sanitizer's reports name work the same way).
pub(crate) fn op_label<T: std::fmt::Display>(op: &PortableOp<T>) -> String {
    let mut s = String::new();
    let _ = match op {
        PortableOp::Fill { x, value } => write!(s, "fill x={x} value={value}"),
        PortableOp::Copy { dst, src } => write!(s, "copy dst={dst} src={src}"),
        PortableOp::AddScalar { x, c } => write!(s, "add_scalar x={x} c={c}"),
        PortableOp::Scale { x, a } => write!(s, "scale x={x} a={a}"),
        PortableOp::Axpy { y, a, x } => write!(s, "axpy y={y} a={a} x={x}"),
        PortableOp::Mul { y, x } => write!(s, "mul y={y} x={x}"),
    };
    s
}

thread_local! {
    /// Set while a host function runs on this thread (modelling CUDA, which permits no runtime
    /// call inside one).
    static IN_HOST_FUNCTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the thread while a host function runs (restoring the previous mark on drop).
pub(crate) struct HostFunctionRuns(bool);

impl HostFunctionRuns {
    fn enter() -> Self {
        HostFunctionRuns(IN_HOST_FUNCTION.with(|m| m.replace(true)))
    }

    /// True while a host function runs on the calling thread.
    pub(crate) fn active() -> bool {
        IN_HOST_FUNCTION.with(std::cell::Cell::get)
    }
}

impl Drop for HostFunctionRuns {
    fn drop(&mut self) {
        IN_HOST_FUNCTION.with(|m| m.set(self.0));
    }
}

#[inline(always)]
fn load(cell: &AtomicU32) -> f32 {
    f32::from_bits(cell.load(Ordering::Relaxed))
}

#[inline(always)]
fn store(cell: &AtomicU32, value: f32) {
    cell.store(value.to_bits(), Ordering::Relaxed);
}

/// Runs `op` on simulated memory: [`PortableOp::element`] on every element, one loop per op
/// so the compiler sees a plain element-wise loop.
fn run_op(op: &PortableOp<Cells>) {
    match op {
        PortableOp::Fill { x, value } => {
            let bits = value.to_bits();
            x.get()
                .iter()
                .for_each(|c| c.store(bits, Ordering::Relaxed));
        }
        PortableOp::Copy { dst, src } => {
            for (d, s) in dst.get().iter().zip(src.get()) {
                d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        PortableOp::AddScalar { x, .. } | PortableOp::Scale { x, .. } => {
            x.get()
                .iter()
                .for_each(|c| store(c, op.element(load(c), 0.0)));
        }
        PortableOp::Axpy { y, x, .. } | PortableOp::Mul { y, x } => {
            for (yi, xi) in y.get().iter().zip(x.get()) {
                store(yi, op.element(load(yi), load(xi)));
            }
        }
    }
}

impl MockDevice {
    /// Runs `command`, after the sanitizer checked that the memory it touches was not returned
    /// to the device. `node` is the command's node when a graph runs it.
    pub(crate) fn execute(&self, command: &MockCommand, node: Option<usize>) -> DriverResult<()> {
        if let Some(address) = command.released_address() {
            return Err(DriverError::Api(GraphError::DanglingBuffer {
                address,
                node: node.unwrap_or(0),
                label: match node {
                    Some(_) => command.label(),
                    None => format!("{} (queued on a stalled stream)", command.label()),
                },
            }));
        }
        match command {
            MockCommand::Op(op) => run_op(op),
            MockCommand::Host(h) => {
                let _inside = HostFunctionRuns::enter();
                // SAFETY: the driver layer keeps `data` valid while the function can run.
                unsafe { (h.func)(h.data) }
            }
            MockCommand::RecordEvent(event) => event.complete(self.tick()),
            MockCommand::WaitEvent(_) => {}
            MockCommand::Kernel(k) => k.run()?,
            MockCommand::Gemm(g) => g.run(),
            MockCommand::Child(nodes) => {
                for inner in nodes.iter() {
                    self.execute(&inner.command, node)?;
                }
            }
            MockCommand::Conditional(c) => self.run_conditional(c, node)?,
        }
        self.tick();
        Ok(())
    }

    /// Records `command` if `stream` is capturing, else runs it (or queues it on a stalled
    /// stream).
    pub(crate) fn issue(&self, stream: &MockStreamState, command: MockCommand) -> DriverResult<()> {
        self.alive()?;
        // The counters count work (ops, host functions), not event records.
        let work = matches!(
            command,
            MockCommand::Op(_)
                | MockCommand::Host(_)
                | MockCommand::Kernel(_)
                | MockCommand::Gemm(_)
        );
        match self.capture.record(stream.index(), command)? {
            None => {
                Counters::bump(&self.counters.captured_ops, u64::from(work));
                Ok(())
            }
            Some(command) => {
                match stream.queue_if_stalled(command, |c| self.queued_order(stream, c)) {
                    None => Ok(()),
                    Some(command) => {
                        // A race fails the work before it runs.
                        self.sanitize_eager(stream, &command, None)?;
                        Counters::bump(&self.counters.eager_ops, u64::from(work));
                        self.execute(&command, None)
                    }
                }
            }
        }
    }
}

impl DriverOps for MockDevice {
    unsafe fn launch_op(
        &self,
        op: PortableOp<Region<'_, Arc<MockBlock>>>,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        let op = op.map(|r| Cells {
            block: Arc::clone(r.block),
            offset: r.offset,
            len: r.len,
        });
        self.issue(stream, MockCommand::Op(op))
    }

    unsafe fn launch_host(
        &self,
        stream: &Arc<MockStreamState>,
        func: HostFn,
        data: *mut c_void,
    ) -> DriverResult<()> {
        self.issue(stream, MockCommand::Host(HostFunction { func, data }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(v: &[f32]) -> Cells {
        let space = crate::memory::AddressSpace::new(0x1000, None, false).unwrap();
        let block = space.allocate(v.len() * 4).unwrap();
        for (c, x) in block.cells.iter().zip(v) {
            c.store(x.to_bits(), Ordering::Relaxed);
        }
        Cells {
            len: v.len(),
            offset: 0,
            block,
        }
    }

    fn values(c: &Cells) -> Vec<f32> {
        c.get().iter().map(load).collect()
    }

    #[test]
    fn axpy_rounds_the_product_first() {
        // Chosen so that a fused multiply-add would give a different last bit.
        let a = 1.0 + f32::EPSILON;
        let xv = 1.0 - f32::EPSILON / 2.0;
        let yv = -1.0;
        let (y, x) = (cells(&[yv]), cells(&[xv]));
        run_op(&PortableOp::Axpy { y: y.clone(), a, x });
        let unfused = yv + a * xv;
        assert_eq!(values(&y)[0].to_bits(), unfused.to_bits());
        assert_ne!(a.mul_add(xv, yv).to_bits(), unfused.to_bits());
    }

    #[test]
    fn elementwise_ops() {
        let x = cells(&[1.0, 2.0]);
        run_op(&PortableOp::AddScalar {
            x: x.clone(),
            c: 1.0,
        });
        run_op(&PortableOp::Scale {
            x: x.clone(),
            a: 3.0,
        });
        assert_eq!(values(&x), vec![6.0, 9.0]);
        let y = cells(&[0.0, 0.0]);
        run_op(&PortableOp::Copy {
            dst: y.clone(),
            src: x.clone(),
        });
        run_op(&PortableOp::Fill {
            x: x.clone(),
            value: -1.0,
        });
        assert_eq!((values(&x), values(&y)), (vec![-1.0, -1.0], vec![6.0, 9.0]));
    }
}
