//! The two forms of a captured graph: the raw graph ([`RawGraph`], nodes with dependencies, for
//! introspection and DOT) and the executable one ([`ReplayPlan`], GPU runs split only at host
//! callbacks, each run re-encoded into one command encoder and one submit).

use std::sync::Arc;

use accel_graph_api::{GraphTopology, HostCallback, Result};

use crate::{capture::RecordedNode, command::Command, gpu::Gpu, stream::WgpuStream};

/// The raw graph: what the capture recorded.
#[derive(Debug, Clone)]
pub(crate) struct RawGraph {
    pub(crate) nodes: Arc<[RecordedNode]>,
}

impl RawGraph {
    /// Nodes and edges.
    pub(crate) fn topology(&self) -> GraphTopology {
        let mut t = GraphTopology::default();
        for node in self.nodes.iter() {
            t.add_node(node.command.kind(), node.command.label());
        }
        for (id, node) in self.nodes.iter().enumerate() {
            for &dep in &node.deps {
                t.add_edge(dep, id);
            }
        }
        t
    }

    /// The executable form. Nodes were recorded after their dependencies, so recording order
    /// is a topological order; the single in-order queue then keeps every dependency.
    pub(crate) fn instantiate(&self) -> ReplayPlan {
        let mut steps = Vec::new();
        let mut run: Vec<Command> = Vec::new();
        for node in self.nodes.iter() {
            match &node.command {
                Command::Host(f) => {
                    if !run.is_empty() {
                        steps.push(Step::Gpu(std::mem::take(&mut run)));
                    }
                    steps.push(Step::Host(Arc::clone(f)));
                }
                Command::Nothing { .. } => {}
                gpu => run.push(gpu.clone()),
            }
        }
        if !run.is_empty() {
            steps.push(Step::Gpu(run));
        }
        ReplayPlan { steps }
    }
}

/// One step of a replay.
enum Step {
    /// GPU commands encoded together and submitted once.
    Gpu(Vec<Command>),
    /// A host callback, run once the work before it has completed.
    Host(HostCallback),
}

/// The executable graph.
pub(crate) struct ReplayPlan {
    steps: Vec<Step>,
}

impl std::fmt::Debug for ReplayPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let submits = self
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Gpu(_)))
            .count();
        f.debug_struct("ReplayPlan")
            .field("steps", &self.steps.len())
            .field("submits", &submits)
            .finish()
    }
}

impl ReplayPlan {
    /// Runs the plan on `stream`.
    pub(crate) fn replay(&self, gpu: &Gpu, stream: &WgpuStream) -> Result<()> {
        for step in &self.steps {
            match step {
                Step::Gpu(commands) => submit_commands(gpu, stream, commands),
                Step::Host(f) => run_host(gpu, stream, f)?,
            }
        }
        Ok(())
    }
}

/// Encodes `commands` (GPU work only) into one encoder and submits it on `stream`.
pub(crate) fn submit_commands(gpu: &Gpu, stream: &WgpuStream, commands: &[Command]) {
    let mut encoder = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    crate::command::encode_gpu_run(&mut encoder, commands);
    let index = gpu.queue.submit([encoder.finish()]);
    stream.state().last_submission = Some(index);
}

/// Runs a host callback in `stream`'s order: after the work submitted before it. The queue is
/// in order, so waiting for the stream's last submission covers every earlier submission too.
pub(crate) fn run_host(gpu: &Gpu, stream: &WgpuStream, f: &HostCallback) -> Result<()> {
    let last = stream.state().last_submission.clone();
    gpu.wait(last)?;
    f();
    Ok(())
}
