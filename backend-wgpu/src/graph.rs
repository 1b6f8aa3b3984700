//! Software graphs: the raw graph a capture records, and the replay plan an instantiation
//! makes of it — GPU runs re-encoded into one encoder and one submit per replay, host
//! functions in between.

use accel_graph_api::{GraphError, GraphTopology, InstantiateFlags};
use accel_graph_driver::{
    DriverError, DriverResult,
    api::DriverGraphs,
    software::{self, Node},
};

use crate::{
    WgpuDevice,
    command::{Command, HostFunction},
    stream::WgpuStreamState,
};

/// A captured graph: the recorded commands with their dependencies, in capture order (a
/// topological order). What [`accel_graph_api::Graph::raw_graph`] returns.
#[derive(Clone)]
pub struct WgpuRawGraph {
    pub(crate) nodes: Vec<Node<Command>>,
}

impl WgpuRawGraph {
    pub(crate) fn new(nodes: Vec<Node<Command>>) -> Self {
        WgpuRawGraph { nodes }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Each node's label (`"axpy grid=(4,1) x 256"`...), in node order.
    pub fn labels(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.command.label()).collect()
    }
}

impl std::fmt::Debug for WgpuRawGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuRawGraph")
            .field("nodes", &self.labels())
            .finish()
    }
}

/// One step of a replay.
pub(crate) enum Step {
    /// GPU commands (and event records) encoded together and submitted once.
    Gpu(Vec<Command>),
    /// A host function, run once the work before it has completed.
    Host(HostFunction),
    /// A conditional node: its condition is read back (after the work before it), and the
    /// steps of the branch it picks run.
    Conditional(crate::nested::Nested<crate::editing::ConditionalPlan>),
}

/// An instantiated graph: runs of GPU work split only at host functions and conditional
/// nodes, child graphs inlined. What [`accel_graph_api::Graph::executable`] returns.
pub struct WgpuExecutable {
    pub(crate) steps: Vec<Step>,
    /// Per node of the raw graph: where its command sits (step, place in the run); `None` for
    /// host functions, child graphs and conditional nodes.
    pub(crate) node_map: Vec<Option<(usize, usize)>>,
    /// Some dispatch binds resources its user owns: replays check for validation errors.
    pub(crate) checked: bool,
}

impl WgpuExecutable {
    /// The plan of `nodes`, in capture order (a topological order, and the one queue runs
    /// submissions in order, so running the nodes in that order keeps every dependency).
    pub(crate) fn plan(nodes: &[Node<Command>]) -> Self {
        let mut planner = Planner::default();
        let node_map = nodes.iter().map(|n| planner.push(&n.command)).collect();
        let steps = planner.finish();
        let checked = steps
            .iter()
            .any(|s| matches!(s, Step::Gpu(run) if run.iter().any(Command::is_foreign_dispatch)));
        WgpuExecutable {
            steps,
            node_map,
            checked,
        }
    }

    /// Queue submits per replay (conditional nodes' branches not counted).
    pub fn submits(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Gpu(run) if run.iter().any(Command::is_gpu_work)))
            .count()
    }

    /// Host functions per replay.
    pub fn host_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Host(_)))
            .count()
    }

    /// Conditional nodes per replay (each reads its condition back when it runs).
    pub fn conditional_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Conditional(_)))
            .count()
    }
}

/// Builds a plan command by command.
#[derive(Default)]
pub(crate) struct Planner {
    steps: Vec<Step>,
    run: Vec<Command>,
}

impl Planner {
    /// Adds `command`; returns where it sits when it is one command of a run.
    pub(crate) fn push(&mut self, command: &Command) -> Option<(usize, usize)> {
        match command {
            Command::Host(f) => {
                self.flush();
                self.steps.push(Step::Host(*f));
                None
            }
            Command::Child(inner) => {
                for node in inner.iter() {
                    self.push(&node.command);
                }
                None
            }
            Command::Conditional(c) => {
                self.flush();
                self.steps
                    .push(Step::Conditional(crate::nested::Nested::new(c.plan())));
                None
            }
            // Nodes that touch nothing stay in the run (encoding skips them), so that an
            // update can turn one into work in its place.
            command => {
                self.run.push(command.clone());
                Some((self.steps.len(), self.run.len() - 1))
            }
        }
    }

    fn flush(&mut self) {
        if !self.run.is_empty() {
            self.steps.push(Step::Gpu(std::mem::take(&mut self.run)));
        }
    }

    /// The steps.
    pub(crate) fn finish(mut self) -> Vec<Step> {
        self.flush();
        self.steps
    }
}

impl std::fmt::Debug for WgpuExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuExecutable")
            .field("steps", &self.steps.len())
            .field("submits", &self.submits())
            .finish()
    }
}

impl DriverGraphs for WgpuDevice {
    type Exec = WgpuExecutable;

    /// The flags are honoured trivially: nothing is allocated inside a graph and the queue
    /// runs submissions in order (device launch is refused by the driver layer).
    fn instantiate(
        &self,
        graph: &WgpuRawGraph,
        _flags: InstantiateFlags,
    ) -> DriverResult<WgpuExecutable> {
        Ok(WgpuExecutable::plan(&graph.nodes))
    }

    fn upload_exec(&self, _exec: &WgpuExecutable, _stream: &WgpuStreamState) -> DriverResult<()> {
        // Nothing to upload: a replay encodes its commands afresh.
        Ok(())
    }

    /// A graph with dispatches of users' pipelines replays inside an error scope: their bind
    /// groups may reference resources destroyed or mapped since capture, which wgpu refuses
    /// at the submit; that is this replay's error instead of an uncaptured one.
    unsafe fn launch_exec(
        &self,
        exec: &WgpuExecutable,
        stream: &WgpuStreamState,
    ) -> DriverResult<()> {
        let scope = exec.checked.then(|| {
            self.gpu()
                .device
                .push_error_scope(wgpu::ErrorFilter::Validation)
        });
        let ran = self.run_steps(stream, &exec.steps);
        match scope.map(|s| pollster::block_on(s.pop())) {
            Some(Some(error)) => Err(DriverError::Api(GraphError::KernelFailed {
                kernel: "a user pipeline in the replayed graph".to_owned(),
                message: error.to_string(),
            })),
            _ => ran,
        }
    }

    fn node_count(&self, graph: &WgpuRawGraph) -> DriverResult<usize> {
        Ok(graph.nodes.len())
    }

    fn topology(&self, graph: &WgpuRawGraph) -> DriverResult<GraphTopology> {
        Ok(software::topology(&graph.nodes, |c| (c.kind(), c.label())))
    }
}
