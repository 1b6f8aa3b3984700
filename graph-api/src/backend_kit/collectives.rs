//! What a backend implements for [`Communicator`](crate::collective::Communicator): making
//! communicator ids, joining a communicator, and issuing one collective on the current
//! stream. Object-safe, over the backend's buffer memory `M`
//! ([`PortableOps::Memory`](crate::PortableOps::Memory)), so the communicator can be generic
//! over every `B: Backend` (through [`Backend::collectives`](crate::Backend::collectives)).

use std::sync::Arc;

use crate::{
    DeviceBuffer, Result, View,
    collective::{CollectiveSignature, CommId, ControlPlane},
};

/// The bytes of a buffer a collective sends or receives, whatever its element type.
#[derive(Debug)]
pub struct CommView<'a, M> {
    /// The buffer's memory.
    pub memory: &'a M,
    /// The backend instance of the buffer.
    pub instance: u64,
    /// The first byte, from the buffer's start.
    pub byte_offset: usize,
    /// Bytes.
    pub bytes: usize,
}

impl<M> Clone for CommView<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for CommView<'_, M> {}

impl<'a, M> CommView<'a, M> {
    /// The bytes of `view`.
    pub fn of<Buf: DeviceBuffer + AsRef<M>>(view: View<'a, Buf>) -> Self {
        CommView {
            memory: view.buffer().as_ref(),
            instance: view.buffer().instance_id(),
            byte_offset: view.byte_offset(),
            bytes: view.num_bytes(),
        }
    }
}

/// One collective to issue: its signature and the bytes it sends and receives (the same
/// bytes for an in-place `all_reduce` or `broadcast`; for an in-place `all_gather` the send
/// bytes are this rank's part of the receive bytes, for an in-place `reduce_scatter` the
/// receive bytes are this rank's part of the send bytes). The communicator checked the lengths
/// against the signature and the world size.
#[derive(Debug)]
pub struct CollectiveCall<'a, M> {
    /// What every rank agrees on.
    pub signature: CollectiveSignature,
    /// The bytes sent.
    pub send: CommView<'a, M>,
    /// The bytes received.
    pub recv: CommView<'a, M>,
}

/// A backend's collectives: ids and joining. [`Backend::collectives`](crate::Backend::collectives)
/// hands it out; the driver layer implements it once for every driver.
pub trait CollectiveBackend<M>: Send + Sync {
    /// A new, unique communicator id (made by one rank, shared with the others).
    fn new_comm_id(&self) -> Result<CommId>;

    /// Joins the communicator `id` as rank `control.rank()` of `control.world_size()`, once
    /// every rank has come (the caller met them at a barrier first). `control` is kept to
    /// compare captures at their end.
    fn join(&self, id: &CommId, control: Arc<ControlPlane>) -> Result<Arc<dyn DeviceComm<M>>>;
}

/// One rank's device communicator.
pub trait DeviceComm<M>: Send + Sync {
    /// Issues `call` on the backend's current stream (recorded, with its buffers and this
    /// communicator kept alive by the graph, if the stream captures).
    fn issue(&self, call: &CollectiveCall<'_, M>) -> Result<()>;

    /// `Ok` while the communicator can be used; [`GraphError::CommUnusable`](crate::GraphError)
    /// once a timeout or an abort made it unusable.
    fn check_usable(&self) -> Result<()>;

    /// Makes the communicator unusable from now on, ending the device work that waits on it
    /// (NCCL's `ncclCommAbort`), so that nothing hangs on a rank that is gone.
    fn abort(&self, reason: &str);
}
