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
///
/// Made only from a [`View`] ([`CommView::of`]), so its bytes lie inside its buffer and name
/// the buffer's own instance; its fields are read through methods, and cannot be set:
///
/// ```compile_fail
/// use accel_graph_api::backend_kit::CommView;
/// let memory = 0u8;
/// // Refused by the compiler: the fields are private.
/// let forged = CommView { memory: &memory, instance: 7, byte_offset: 0, bytes: 1 << 40 };
/// ```
///
/// The driver layer still checks each view against the live memory it names before issuing a
/// collective (its instance, its bytes within the memory's), as for any argument that crosses
/// the backend boundary.
#[derive(Debug)]
pub struct CommView<'a, M> {
    memory: &'a M,
    instance: u64,
    byte_offset: usize,
    bytes: usize,
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

    /// The buffer's memory.
    pub fn memory(&self) -> &'a M {
        self.memory
    }

    /// The backend instance of the buffer.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The first byte, from the buffer's start.
    pub fn byte_offset(&self) -> usize {
        self.byte_offset
    }

    /// Bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One collective to issue: its signature and the bytes it sends and receives (the same
/// bytes for an in-place `all_reduce` or `broadcast`; for an in-place `all_gather` the send
/// bytes are this rank's part of the receive bytes, for an in-place `reduce_scatter` the
/// receive bytes are this rank's part of the send bytes). The communicator checked the lengths
/// against the signature and the world size; the driver layer checks every view again against
/// the live memory it names and the signature, since a call can be made without the
/// communicator.
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
    /// communicator kept alive by the graph, if the stream captures). A view of another
    /// instance's memory is [`GraphError::ForeignObject`](crate::GraphError), bytes past its
    /// memory [`GraphError::ViewOutOfRange`](crate::GraphError), a view whose length is not
    /// the signature's [`GraphError::LengthMismatch`](crate::GraphError): nothing reaches the
    /// device.
    fn issue(&self, call: &CollectiveCall<'_, M>) -> Result<()>;

    /// `Ok` while the communicator can be used; [`GraphError::CommUnusable`](crate::GraphError)
    /// once a timeout or an abort made it unusable.
    fn check_usable(&self) -> Result<()>;

    /// Makes the communicator unusable from now on, ending the device work that waits on it
    /// (NCCL's `ncclCommAbort`), so that nothing hangs on a rank that is gone.
    fn abort(&self, reason: &str);
}
