//! Graph editing on wgpu, in software: recorded commands re-resolved in place (a node update
//! builds the op's bind group and parameter block anew), child graphs as one node holding the
//! child's commands (inlined by instantiation), and conditional nodes emulated by the replay.
//!
//! WebGPU has no way for GPU work to decide what runs next, so a conditional node is decided
//! on the host: when a replay reaches it, the work submitted before it has its condition read
//! back (a copy into a mapped buffer and a wait), and the steps of the branch it picks are
//! submitted; a `while` node repeats that before every iteration. The results are those of
//! the device-side nodes of CUDA, at the cost of a round trip per evaluation.

use accel_graph_api::{
    CaptureErrorMode, ConditionalKind, GraphError, PortableOp, condition_holds, kernel::Kernel,
};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::{Bytes, CapturePoint, DriverEditing, RawArg, Region},
    software::{self, Node},
};

use crate::{
    WgpuBlock, WgpuDevice, WgpuKernelModule,
    command::Command,
    graph::{Planner, Step, WgpuExecutable, WgpuRawGraph},
    nested::Nested,
    stream::WgpuStreamState,
};

/// Iterations after which a `while` node is taken to loop forever (each one reads the
/// condition back): a GPU would hang, the replay reports it instead.
pub use accel_graph_api::WHILE_ITERATION_LIMIT;

/// A recorded conditional node: its condition (4 bytes of a block) and its bodies' commands.
pub(crate) struct WgpuConditional {
    kind: ConditionalKind,
    cond: WgpuBlock,
    offset: u64,
    mask: u32,
    bodies: Vec<Vec<Node<Command>>>,
}

impl WgpuConditional {
    /// The node label.
    pub(crate) fn label(&self) -> String {
        let sizes: Vec<String> = self.bodies.iter().map(|b| b.len().to_string()).collect();
        format!(
            "{} cond={:#x}+{} mask={:#x} bodies=[{}]",
            self.kind,
            self.cond.address(),
            self.offset,
            self.mask,
            sizes.join(", ")
        )
    }

    /// What a replay runs for it.
    pub(crate) fn plan(&self) -> ConditionalPlan {
        ConditionalPlan {
            kind: self.kind,
            cond: self.cond.clone(),
            offset: self.offset,
            mask: self.mask,
            bodies: self
                .bodies
                .iter()
                .map(|nodes| {
                    let mut planner = Planner::default();
                    for node in nodes {
                        planner.push(&node.command);
                    }
                    planner.finish()
                })
                .collect(),
        }
    }
}

/// A conditional node as a replay runs it.
pub(crate) struct ConditionalPlan {
    kind: ConditionalKind,
    cond: WgpuBlock,
    offset: u64,
    mask: u32,
    bodies: Vec<Vec<Step>>,
}

/// The conditional node being captured.
pub struct WgpuConditionalBuild {
    kind: ConditionalKind,
    cond: WgpuBlock,
    offset: u64,
    mask: u32,
    bodies: Vec<Vec<Node<Command>>>,
}

impl WgpuDevice {
    /// Runs the steps of a plan on `stream`.
    pub(crate) fn run_steps(&self, stream: &WgpuStreamState, steps: &[Step]) -> DriverResult<()> {
        for step in steps {
            match step {
                Step::Gpu(commands) => self.submit_run(stream, commands),
                Step::Host(f) => self.run_host(stream, *f)?,
                Step::Conditional(c) => self.run_conditional(stream, c)?,
            }
        }
        Ok(())
    }

    /// Whether the condition holds now, after the work submitted so far (the queue is in
    /// order, so that includes the stream's).
    fn condition(&self, c: &ConditionalPlan) -> DriverResult<bool> {
        let bytes = self.gpu().read_back(4, |encoder, staging| {
            encoder.copy_buffer_to_buffer(c.cond.buffer(), c.offset, staging, 0, 4);
        })?;
        let bits = bytes
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_ne_bytes);
        Ok(condition_holds(bits, c.mask))
    }

    fn run_conditional(&self, stream: &WgpuStreamState, c: &ConditionalPlan) -> DriverResult<()> {
        match (c.kind, c.bodies.as_slice()) {
            (ConditionalKind::If, [then]) => {
                if self.condition(c)? {
                    self.run_steps(stream, then)?;
                }
                Ok(())
            }
            (ConditionalKind::IfElse, [then, otherwise]) => {
                let branch = if self.condition(c)? { then } else { otherwise };
                self.run_steps(stream, branch)
            }
            (ConditionalKind::While, [body]) => {
                let mut iterations = 0u64;
                while self.condition(c)? {
                    if iterations == WHILE_ITERATION_LIMIT {
                        return Err(DriverError::Api(GraphError::WhileLoopLimit {
                            iterations,
                            where_: " in a replay".to_owned(),
                        }));
                    }
                    iterations = iterations.saturating_add(1);
                    self.run_steps(stream, body)?;
                }
                Ok(())
            }
            _ => Err(DriverError::Api(GraphError::Unsupported {
                what: format!("a {} node with {} bodies", c.kind, c.bodies.len()),
            })),
        }
    }

    /// Replaces node `key` of `graph`, and its command in `exec`.
    fn set_command(
        graph: &mut WgpuRawGraph,
        key: usize,
        exec: Option<(&mut WgpuExecutable, usize)>,
        command: Command,
    ) -> DriverResult<()> {
        let missing = || {
            DriverError::Api(GraphError::Unsupported {
                what: format!("node {key} is not a command of this graph's runs"),
            })
        };
        let slot = graph.nodes.get_mut(key).ok_or_else(missing)?;
        if let Some((exec, exec_key)) = exec {
            let (step, place) = exec
                .node_map
                .get(exec_key)
                .copied()
                .flatten()
                .ok_or_else(missing)?;
            let Some(Step::Gpu(run)) = exec.steps.get_mut(step) else {
                return Err(missing());
            };
            *run.get_mut(place).ok_or_else(missing)? = command.clone();
        }
        slot.command = command;
        Ok(())
    }
}

impl DriverEditing for WgpuDevice {
    type NodeKey = usize;
    type Conditional = WgpuConditionalBuild;

    fn capture_point(&self, stream: &WgpuStreamState) -> DriverResult<Option<CapturePoint<usize>>> {
        Ok(self.capture.point(stream.key()))
    }

    fn clone_graph(&self, graph: &WgpuRawGraph) -> DriverResult<WgpuRawGraph> {
        Ok(graph.clone())
    }

    fn find_in_clone(
        &self,
        key: usize,
        _original: &WgpuRawGraph,
        _clone: &WgpuRawGraph,
    ) -> DriverResult<usize> {
        Ok(key)
    }

    fn update_exec(
        &self,
        exec: &mut WgpuExecutable,
        source: &WgpuRawGraph,
        graph: &WgpuRawGraph,
    ) -> DriverResult<()> {
        software::same_topology(&source.nodes, &graph.nodes, Command::kind)?;
        *exec = WgpuExecutable::plan(&graph.nodes);
        Ok(())
    }

    unsafe fn set_op(
        &self,
        graph: &mut WgpuRawGraph,
        key: usize,
        exec: Option<(&mut WgpuExecutable, usize)>,
        op: PortableOp<Region<'_, WgpuBlock>>,
    ) -> DriverResult<()> {
        let command = self.resolve(op)?;
        Self::set_command(graph, key, exec, command)
    }

    unsafe fn set_kernel(
        &self,
        graph: &mut WgpuRawGraph,
        key: usize,
        exec: Option<(&mut WgpuExecutable, usize)>,
        module: &WgpuKernelModule,
        kernel: &Kernel,
        grid: [u32; 3],
        args: &[RawArg<'_, WgpuBlock>],
    ) -> DriverResult<()> {
        // A new bind group (and scalar block) over the new arguments, as a launch makes; the
        // node's place in its run is kept.
        let command = self.resolve_kernel(module, kernel, grid, args)?;
        Self::set_command(graph, key, exec, command)
    }

    unsafe fn launch_child(
        &self,
        child: &WgpuRawGraph,
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        self.issue(stream, Command::Child(Nested::new(child.nodes.clone())))
    }

    fn conditional_support(&self, _kind: ConditionalKind) -> Result<(), String> {
        Ok(())
    }

    unsafe fn begin_conditional(
        &self,
        _stream: &WgpuStreamState,
        kind: ConditionalKind,
        cond: Bytes<'_, WgpuBlock>,
        mask: u32,
    ) -> DriverResult<WgpuConditionalBuild> {
        Ok(WgpuConditionalBuild {
            kind,
            cond: cond.block.clone(),
            offset: cond.offset as u64,
            mask,
            bodies: Vec::with_capacity(kind.bodies()),
        })
    }

    unsafe fn begin_branch(
        &self,
        _conditional: &mut WgpuConditionalBuild,
        _branch: usize,
        body: &WgpuStreamState,
        _mode: CaptureErrorMode,
    ) -> DriverResult<()> {
        // A capture of its own: the body's commands form the body's graph.
        self.capture.begin(body.key())
    }

    unsafe fn end_branch(
        &self,
        conditional: &mut WgpuConditionalBuild,
        _branch: usize,
        body: &WgpuStreamState,
    ) -> DriverResult<()> {
        conditional.bodies.push(self.capture.end(body.key())?);
        Ok(())
    }

    unsafe fn end_conditional(
        &self,
        conditional: WgpuConditionalBuild,
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        let node = WgpuConditional {
            kind: conditional.kind,
            cond: conditional.cond,
            offset: conditional.offset,
            mask: conditional.mask,
            bodies: conditional.bodies,
        };
        self.issue(stream, Command::Conditional(Nested::new(node)))
    }
}
