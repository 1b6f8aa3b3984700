//! Software graphs: the raw graph a capture records, and the replay plan an instantiation
//! makes of it — GPU runs re-encoded into one encoder and one submit per replay, host
//! functions in between.

use accel_graph_api::{GraphError, GraphTopology};
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
pub struct WgpuRawGraph {
    nodes: Vec<Node<Command>>,
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
enum Step {
    /// GPU commands (and event records) encoded together and submitted once.
    Gpu(Vec<Command>),
    /// A host function, run once the work before it has completed.
    Host(HostFunction),
}

/// An instantiated graph: runs of GPU work split only at host functions. What
/// [`accel_graph_api::Graph::executable`] returns.
pub struct WgpuExecutable {
    steps: Vec<Step>,
    /// Some dispatch binds resources its user owns: replays check for validation errors.
    checked: bool,
}

impl WgpuExecutable {
    /// Queue submits per replay.
    pub fn submits(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Gpu(_)))
            .count()
    }

    /// Host functions per replay.
    pub fn host_steps(&self) -> usize {
        self.steps.len() - self.submits()
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

    /// Capture order is a topological order (a node only depends on earlier nodes), and the
    /// one queue runs submissions in order, so running the nodes in capture order keeps every
    /// dependency.
    fn instantiate(&self, graph: &WgpuRawGraph) -> DriverResult<WgpuExecutable> {
        let mut steps = Vec::new();
        let mut run: Vec<Command> = Vec::new();
        let checked = graph
            .nodes
            .iter()
            .any(|n| matches!(&n.command, Command::Dispatch(d) if d.is_foreign()));
        for node in &graph.nodes {
            match &node.command {
                Command::Host(f) => {
                    if !run.is_empty() {
                        steps.push(Step::Gpu(std::mem::take(&mut run)));
                    }
                    steps.push(Step::Host(*f));
                }
                Command::Nothing { .. } | Command::WaitEvent => {}
                gpu => run.push(gpu.clone()),
            }
        }
        if !run.is_empty() {
            steps.push(Step::Gpu(run));
        }
        Ok(WgpuExecutable { steps, checked })
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
        for step in &exec.steps {
            match step {
                Step::Gpu(commands) => self.submit_run(stream, commands),
                Step::Host(f) => self.run_host(stream, *f)?,
            }
        }
        match scope.map(|s| pollster::block_on(s.pop())) {
            Some(Some(error)) => Err(DriverError::Api(GraphError::KernelFailed {
                kernel: "a user pipeline in the replayed graph".to_owned(),
                message: error.to_string(),
            })),
            _ => Ok(()),
        }
    }

    fn node_count(&self, graph: &WgpuRawGraph) -> DriverResult<usize> {
        Ok(graph.nodes.len())
    }

    fn topology(&self, graph: &WgpuRawGraph) -> DriverResult<GraphTopology> {
        Ok(software::topology(&graph.nodes, |c| (c.kind(), c.label())))
    }
}
