//! Graph editing on the simulated device: recorded commands patched in place, child graphs as
//! one node holding the child's commands (inlined by instantiation), and conditional nodes
//! emulated — the node reads its condition from simulated memory each time it runs, so a
//! replay decides exactly where a GPU would, after the work before it.

use std::sync::Arc;

use accel_graph_api::{
    CaptureErrorMode, ConditionalKind, GraphError, PortableOp, condition_holds,
    kernel::{HostKernelFn, HostLaunch, Kernel},
};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, CapturePoint, DriverEditing, RawArg, Region},
    software::{self, Node},
};

use crate::{
    MockDevice,
    counters::Counters,
    graph::{MockExecutable, MockRawGraph},
    kernels::{ByteRange, KernelLaunch, MockArg},
    memory::MockBlock,
    ops::{Cells, MockCommand},
    sanitizer::ReplayAccesses,
    stream::MockStreamState,
};

/// Iterations after which a `while` node is taken to loop forever: a GPU would hang, the
/// simulated device reports it instead.
pub use accel_graph_api::WHILE_ITERATION_LIMIT;

/// A conditional node of the simulated device: its condition (one 32-bit element) and its
/// bodies, each a plan of commands (child graphs inlined).
pub(crate) struct MockConditional {
    pub(crate) kind: ConditionalKind,
    pub(crate) cond: Cells,
    pub(crate) mask: u32,
    pub(crate) bodies: Vec<Vec<MockCommand>>,
}

impl MockConditional {
    /// The node label: kind, condition, and the bodies' sizes.
    pub(crate) fn label(&self) -> String {
        let sizes: Vec<String> = self.bodies.iter().map(|b| b.len().to_string()).collect();
        format!(
            "{} cond={} mask={:#x} bodies=[{}]",
            self.kind,
            self.cond,
            self.mask,
            sizes.join(", ")
        )
    }

    fn holds(&self) -> bool {
        let bits = self
            .cond
            .block
            .cells
            .get(self.cond.offset)
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed));
        condition_holds(bits, self.mask)
    }
}

/// Appends the commands of `nodes` to `out` in their order, child graphs inlined.
pub(crate) fn inline(nodes: &[Node<MockCommand>], out: &mut Vec<MockCommand>) {
    for node in nodes {
        match &node.command {
            MockCommand::Child(inner) => inline(inner, out),
            command => out.push(command.clone()),
        }
    }
}

/// The conditional node being captured: its condition and the bodies captured so far.
pub struct MockConditionalBuild {
    kind: ConditionalKind,
    cond: Cells,
    mask: u32,
    bodies: Vec<Vec<MockCommand>>,
}

impl MockDevice {
    /// Runs a conditional node (`node`: its place in the graph, for reports).
    pub(crate) fn run_conditional(
        &self,
        c: &MockConditional,
        node: Option<usize>,
    ) -> DriverResult<()> {
        let run = |body: &[MockCommand]| -> DriverResult<()> {
            Counters::bump(&self.counters.conditional_bodies_run, 1);
            body.iter()
                .try_for_each(|command| self.execute(command, node))
        };
        match (c.kind, c.bodies.as_slice()) {
            (ConditionalKind::If, [then]) => {
                if c.holds() {
                    run(then)?;
                }
            }
            (ConditionalKind::IfElse, [then, otherwise]) => {
                run(if c.holds() { then } else { otherwise })?;
            }
            (ConditionalKind::While, [body]) => {
                let mut iterations = 0u64;
                while c.holds() {
                    if iterations == WHILE_ITERATION_LIMIT {
                        return Err(DriverError::Api(GraphError::WhileLoopLimit {
                            iterations,
                            where_: format!(" in {}", c.label()),
                        }));
                    }
                    iterations = iterations.saturating_add(1);
                    run(body)?;
                }
            }
            _ => {
                return Err(DriverError::Api(GraphError::Unsupported {
                    what: format!("a {} node with {} bodies", c.kind, c.bodies.len()),
                }));
            }
        }
        Ok(())
    }

    /// The command of `op` over the regions given.
    fn op_command(op: PortableOp<Region<'_, Arc<MockBlock>>>) -> MockCommand {
        MockCommand::Op(op.map(|r| Cells {
            block: Arc::clone(r.block),
            offset: r.offset,
            len: r.len,
        }))
    }

    /// Replaces node `key` of `graph`, and its command in `exec`.
    fn set_command(
        &self,
        graph: &mut MockRawGraph,
        key: usize,
        exec: Option<(&mut MockExecutable, usize)>,
        command: MockCommand,
    ) -> DriverResult<()> {
        self.alive()?;
        let missing = || {
            DriverError::Api(GraphError::Unsupported {
                what: format!("node {key} is not a node of this graph"),
            })
        };
        let slot = graph.nodes.get_mut(key).ok_or_else(missing)?;
        // The graph was checked for races when it was captured; a rebinding may make two
        // branches touch the same bytes: check again before anything changes.
        let old = std::mem::replace(&mut slot.command, command.clone());
        let checked = self.sanitize_graph(&graph.nodes);
        if let Some(slot) = graph.nodes.get_mut(key) {
            slot.command = old;
        }
        checked?;
        let slot = graph.nodes.get_mut(key).ok_or_else(missing)?;
        if let Some((exec, exec_key)) = exec {
            let place = exec
                .node_map
                .get(exec_key)
                .copied()
                .flatten()
                .ok_or_else(missing)?;
            let target = exec.commands.get_mut(place).ok_or_else(missing)?;
            *target = command.clone();
            if self.races.enabled() {
                exec.accesses = ReplayAccesses::of(&exec.commands);
            }
            Counters::bump(&self.counters.node_updates, 1);
        }
        slot.command = command;
        Ok(())
    }
}

impl DriverEditing for MockDevice {
    type NodeKey = usize;
    type Conditional = MockConditionalBuild;

    fn capture_point(
        &self,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<Option<CapturePoint<usize>>> {
        Ok(self.capture.point(stream.index()))
    }

    fn clone_graph(&self, graph: &MockRawGraph) -> DriverResult<MockRawGraph> {
        self.alive()?;
        Ok(graph.clone())
    }

    fn find_in_clone(
        &self,
        key: usize,
        _original: &MockRawGraph,
        _clone: &MockRawGraph,
    ) -> DriverResult<usize> {
        Ok(key)
    }

    fn update_exec(
        &self,
        exec: &mut MockExecutable,
        source: &MockRawGraph,
        graph: &MockRawGraph,
    ) -> DriverResult<()> {
        self.alive()?;
        software::same_topology(&source.nodes, &graph.nodes, MockCommand::kind)?;
        *exec = MockExecutable::plan(self, &graph.nodes);
        Counters::bump(&self.counters.graph_updates, 1);
        Ok(())
    }

    unsafe fn set_op(
        &self,
        graph: &mut MockRawGraph,
        key: usize,
        exec: Option<(&mut MockExecutable, usize)>,
        op: PortableOp<Region<'_, Arc<MockBlock>>>,
    ) -> DriverResult<()> {
        self.set_command(graph, key, exec, Self::op_command(op))
    }

    unsafe fn set_kernel(
        &self,
        graph: &mut MockRawGraph,
        key: usize,
        exec: Option<(&mut MockExecutable, usize)>,
        module: &HostKernelFn,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, Arc<MockBlock>>],
    ) -> DriverResult<()> {
        let launch = KernelLaunch {
            name: Arc::from(kernel.name()),
            host: Arc::clone(module),
            launch: HostLaunch {
                grid,
                block: kernel.block_dims(),
            },
            args: args
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
                .collect(),
        };
        self.set_command(graph, key, exec, MockCommand::Kernel(Arc::new(launch)))
    }

    unsafe fn launch_child(
        &self,
        child: &MockRawGraph,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        self.issue(stream, MockCommand::Child(Arc::new(child.nodes.clone())))
    }

    fn conditional_support(&self, _kind: ConditionalKind) -> Result<(), String> {
        Ok(())
    }

    unsafe fn begin_conditional(
        &self,
        _stream: &Arc<MockStreamState>,
        kind: ConditionalKind,
        cond: Bytes<'_, Arc<MockBlock>>,
        mask: u32,
    ) -> DriverResult<MockConditionalBuild> {
        self.alive()?;
        Ok(MockConditionalBuild {
            kind,
            cond: Cells {
                block: Arc::clone(cond.block),
                offset: cond.offset / 4,
                len: 1,
            },
            mask,
            bodies: Vec::with_capacity(kind.bodies()),
        })
    }

    unsafe fn begin_branch(
        &self,
        _conditional: &mut MockConditionalBuild,
        _branch: usize,
        body: &Arc<MockStreamState>,
        _mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        self.alive()?;
        // A capture of its own: the body's commands form the body's graph.
        self.capture.begin(body.index())
    }

    unsafe fn end_branch(
        &self,
        conditional: &mut MockConditionalBuild,
        _branch: usize,
        body: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        let nodes = self.capture.end(body.index())?;
        self.sanitize_graph(&nodes)?;
        let mut plan = Vec::with_capacity(nodes.len());
        inline(&nodes, &mut plan);
        conditional.bodies.push(plan);
        Ok(())
    }

    unsafe fn end_conditional(
        &self,
        conditional: MockConditionalBuild,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        let node = MockConditional {
            kind: conditional.kind,
            cond: conditional.cond,
            mask: conditional.mask,
            bodies: conditional.bodies,
        };
        self.issue(stream, MockCommand::Conditional(Arc::new(node)))
    }
}
