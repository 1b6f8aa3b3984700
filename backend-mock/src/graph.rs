//! Simulated graphs: the raw graph a capture records, the flat plan a replay runs, and the
//! sanitizer that checks each node's memory as it runs.

use std::sync::Arc;

use accel_graph_api::{GraphTopology, InstantiateFlags};
use accel_graph_driver::{
    DriverResult,
    api::DriverGraphs,
    software::{self, Node},
};

use crate::{
    FaultSite, MockDevice,
    counters::Counters,
    ops::MockCommand,
    sanitizer::{QueuedOrder, ReplayAccesses},
    stream::MockStreamState,
};

/// A captured graph of the mock: the recorded commands with their dependencies, in capture
/// order (a topological order). What [`accel_graph_api::Graph::raw_graph`] returns.
#[derive(Clone)]
pub struct MockRawGraph {
    pub(crate) nodes: Vec<Node<MockCommand>>,
}

impl MockRawGraph {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Each node's label (`"add_scalar x=0x7f0000000000[4] c=1"`...), in node order.
    pub fn labels(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.command.label()).collect()
    }
}

impl std::fmt::Debug for MockRawGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockRawGraph")
            .field("nodes", &self.labels())
            .finish()
    }
}

/// An instantiated mock graph: its commands in one flat vector, resolved to memory, so a
/// replay does no lookup, takes no lock and allocates nothing per node. Child graphs are
/// inlined (their commands take their place); conditional nodes stay one command each,
/// deciding when they run. What [`accel_graph_api::Graph::executable`] returns.
pub struct MockExecutable {
    pub(crate) commands: Vec<MockCommand>,
    /// Per node of the raw graph: its command's place in `commands` (`None` for a child
    /// graph, inlined as several).
    pub(crate) node_map: Vec<Option<usize>>,
    /// What a replay touches, for the race sanitizer (empty when it is off).
    pub(crate) accesses: ReplayAccesses,
}

impl MockExecutable {
    /// The plan of `nodes`: their commands in capture order, child graphs inlined.
    pub(crate) fn plan(device: &MockDevice, nodes: &[Node<MockCommand>]) -> Self {
        let mut commands = Vec::with_capacity(nodes.len());
        let mut node_map = Vec::with_capacity(nodes.len());
        for node in nodes {
            match &node.command {
                MockCommand::Child(inner) => {
                    node_map.push(None);
                    crate::editing::inline(inner, &mut commands);
                }
                command => {
                    node_map.push(Some(commands.len()));
                    commands.push(command.clone());
                }
            }
        }
        let accesses = if device.races.enabled() {
            ReplayAccesses::of(&commands)
        } else {
            ReplayAccesses::default()
        };
        MockExecutable {
            commands,
            node_map,
            accesses,
        }
    }
}

impl MockExecutable {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

impl std::fmt::Debug for MockExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockExecutable")
            .field("nodes", &self.commands.len())
            .finish()
    }
}

impl DriverGraphs for MockDevice {
    type Exec = MockExecutable;

    /// The flags are honoured trivially: the simulated device allocates nothing inside a
    /// graph and runs nodes in capture order (device launch is refused by the driver layer).
    fn instantiate(
        &self,
        graph: &MockRawGraph,
        _flags: InstantiateFlags,
    ) -> DriverResult<MockExecutable> {
        self.alive()?;
        self.fault(FaultSite::Instantiate)?;
        Counters::bump(&self.counters.instantiations, 1);
        // Capture order is a topological order (a node only depends on earlier nodes), so the
        // plan runs the nodes in order; a wider device would run independent branches
        // concurrently, with the same result, since branches of a valid graph do not race.
        Ok(MockExecutable::plan(self, &graph.nodes))
    }

    fn upload_exec(
        &self,
        _exec: &MockExecutable,
        _stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        self.alive()
    }

    unsafe fn launch_exec(
        &self,
        exec: &MockExecutable,
        stream: &Arc<MockStreamState>,
    ) -> DriverResult<()> {
        self.alive()?;
        self.fault(FaultSite::Replay)?;
        if self.faults.check(FaultSite::DeviceFault).is_err() {
            self.break_device();
            return self.alive();
        }
        if stream.is_stalled() {
            let ticket = self.queued_replay_order(stream, &exec.accesses);
            for (node, command) in exec.commands.iter().enumerate() {
                // A stalled stream queues the replay's work in order, as a GPU would.
                let _ = stream.queue_if_stalled(command.clone(), |_| {
                    ticket.as_ref().map(|t| QueuedOrder::replay_node(t, node))
                });
            }
        } else {
            // One unit of work on the stream: checked, or refused, before any node runs.
            self.sanitize_replay(stream, &exec.accesses)?;
            for (node, command) in exec.commands.iter().enumerate() {
                // The sanitizer checks each node as it runs: a host node may release memory
                // later nodes touch.
                self.execute(command, Some(node))?;
            }
        }
        Counters::bump(&self.counters.replays, 1);
        Counters::bump(&self.counters.nodes_replayed, exec.commands.len() as u64);
        Ok(())
    }

    fn node_count(&self, graph: &MockRawGraph) -> DriverResult<usize> {
        Ok(graph.nodes.len())
    }

    fn topology(&self, graph: &MockRawGraph) -> DriverResult<GraphTopology> {
        Ok(software::topology(&graph.nodes, |c| (c.kind(), c.label())))
    }
}
