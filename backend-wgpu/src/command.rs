//! `Command`: one unit of fully resolved stream work, and how it runs. Eager work runs a
//! command at once; a capture records commands, and a replay runs the recorded ones: runs of
//! GPU commands encoded into one encoder and one submit, host functions in between.

use std::{ffi::c_void, sync::Arc};

use accel_graph_api::NodeKind;
use accel_graph_driver::{DriverResult, api::HostFn, software::Node};

use crate::{
    WgpuDevice, event::WgpuEventState, kernels::ResolvedDispatch, stream::WgpuStreamState,
};

/// A host function with its data pointer, as the driver layer hands it over.
#[derive(Clone, Copy)]
pub(crate) struct HostFunction {
    pub(crate) func: HostFn,
    pub(crate) data: *mut c_void,
}

// SAFETY: the driver layer keeps `data` alive and callable from any thread for as long as the
// host function can run (that is `launch_host`'s contract); the pointer is only passed back.
unsafe impl Send for HostFunction {}
// SAFETY: as above; the value is never mutated.
unsafe impl Sync for HostFunction {}

/// A piece of stream work with every GPU object it needs already built.
#[derive(Clone)]
pub(crate) enum Command {
    /// A portable kernel launch.
    Dispatch(ResolvedDispatch),
    /// `dst[..bytes] = src[..bytes]`.
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        bytes: u64,
    },
    /// A host function, run in stream order.
    Host(HostFunction),
    /// The record of an event: a node of its own in a graph for external events; a timing
    /// event writes a timestamp.
    RecordEvent(Arc<WgpuEventState>),
    /// A wait on an external event (a node of its own in a graph; the queue is in order, so
    /// it orders nothing more).
    WaitEvent,
    /// Work that touches nothing (an op on an empty buffer, a copy onto itself): still a node,
    /// so graphs of generic code have the same shape on every backend.
    Nothing { kind: NodeKind, label: &'static str },
    /// A child graph: another graph's recorded commands, inlined by instantiation.
    Child(crate::nested::Nested<Vec<Node<Command>>>),
    /// A conditional node: bodies run or skipped by a condition read back when it runs.
    Conditional(crate::nested::Nested<crate::editing::WgpuConditional>),
}

impl Command {
    /// The node kind the command shows as in `nodes()` and DOT dumps.
    pub(crate) fn kind(&self) -> NodeKind {
        match self {
            Command::Dispatch(d) => d.kind(),
            Command::Copy { .. } => NodeKind::Memcpy,
            Command::Host(_) => NodeKind::Host,
            Command::RecordEvent(_) => NodeKind::EventRecord,
            Command::WaitEvent => NodeKind::EventWait,
            Command::Nothing { kind, .. } => *kind,
            Command::Child(_) => NodeKind::Graph,
            Command::Conditional(_) => NodeKind::Conditional,
        }
    }

    /// Whether the command is a user's dispatch binding resources its user owns (a replay of
    /// it checks for validation errors: the user may have destroyed one).
    pub(crate) fn is_foreign_dispatch(&self) -> bool {
        matches!(self, Command::Dispatch(d) if d.is_foreign())
    }

    /// Whether the command puts work on the GPU (encoding skips the others).
    pub(crate) fn is_gpu_work(&self) -> bool {
        match self {
            Command::Dispatch(_) | Command::Copy { .. } => true,
            Command::RecordEvent(event) => event.timer().is_some(),
            // Children and conditionals never reach a run: instantiation expands them.
            Command::Host(_)
            | Command::WaitEvent
            | Command::Nothing { .. }
            | Command::Child(_)
            | Command::Conditional(_) => false,
        }
    }

    /// The node label.
    pub(crate) fn label(&self) -> String {
        match self {
            Command::Dispatch(d) => d.label(),
            Command::Copy { bytes, .. } => format!("copy {bytes} bytes"),
            Command::Host(_) => "host_callback".to_owned(),
            Command::RecordEvent(_) => "event_record".to_owned(),
            Command::WaitEvent => "event_wait".to_owned(),
            Command::Nothing { label, .. } => (*label).to_owned(),
            Command::Child(nodes) => format!("child graph ({} nodes)", nodes.len()),
            Command::Conditional(c) => c.label(),
        }
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// Encodes a run of commands into one encoder: consecutive dispatches share a compute pass,
/// copies and timestamps go between passes, host functions are not part of a run. `None` when
/// the run holds no GPU work.
pub(crate) fn encode_run(
    device: &wgpu::Device,
    commands: &[Command],
) -> Option<wgpu::CommandBuffer> {
    let mut encoder: Option<wgpu::CommandEncoder> = None;
    // `forget_lifetime` lets the pass live next to the encoder; wgpu then locks the encoder at
    // run time until the pass drops, which happens before every copy or timestamp.
    let mut pass: Option<wgpu::ComputePass<'static>> = None;
    for command in commands {
        if !command.is_gpu_work() {
            continue;
        }
        let encoder = encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
        });
        match command {
            Command::Dispatch(d) => {
                let p = pass.get_or_insert_with(|| {
                    encoder
                        .begin_compute_pass(&Default::default())
                        .forget_lifetime()
                });
                d.encode(p);
            }
            Command::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                bytes,
            } => {
                drop(pass.take());
                encoder.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *bytes);
            }
            Command::RecordEvent(event) => {
                drop(pass.take());
                if let Some(timer) = event.timer() {
                    timer.encode(encoder);
                }
            }
            Command::Host(_)
            | Command::WaitEvent
            | Command::Nothing { .. }
            | Command::Child(_)
            | Command::Conditional(_) => {}
        }
    }
    drop(pass);
    encoder.map(wgpu::CommandEncoder::finish)
}

impl WgpuDevice {
    /// Records `command` if `stream` is capturing, else runs it now.
    pub(crate) fn issue(&self, stream: &WgpuStreamState, command: Command) -> DriverResult<()> {
        match self.capture.record(stream.key(), command)? {
            None => Ok(()),
            Some(Command::Host(f)) => self.run_host(stream, f),
            Some(command) => {
                self.submit_run(stream, std::slice::from_ref(&command));
                Ok(())
            }
        }
    }

    /// Runs a run of commands (no host function) on `stream`: one encoder, one submit; then
    /// the events recorded in it complete with that submission.
    pub(crate) fn submit_run(&self, stream: &WgpuStreamState, commands: &[Command]) {
        let gpu = self.gpu();
        if let Some(buffer) = encode_run(&gpu.device, commands) {
            stream.submit(|| gpu.submit(|queue| queue.submit([buffer])));
        }
        let last = stream.last_submission();
        for command in commands {
            if let Command::RecordEvent(event) = command {
                event.complete(last.clone());
            }
        }
    }

    /// Runs a host function in `stream`'s order: after the work submitted before it. The queue
    /// is in order, so the stream's last submission covers every earlier one.
    pub(crate) fn run_host(&self, stream: &WgpuStreamState, f: HostFunction) -> DriverResult<()> {
        if let Some(last) = stream.last_submission() {
            self.gpu().wait(Some(&last))?;
        }
        // SAFETY: the driver layer keeps `data` valid while the function can run.
        unsafe { (f.func)(f.data) };
        Ok(())
    }
}
