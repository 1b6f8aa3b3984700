//! `DriverCollectives`: communicators and the collectives issued on a stream.

use std::time::Duration;

use accel_graph_api::{
    GraphError,
    collective::{CollectiveSignature, CommId},
};

use super::{Bytes, DriverOps, DriverResult};

/// The communicator a rank joins: its id, its name (for errors), this rank, the world size,
/// and how long the driver may wait for the other ranks where it waits itself (the mock's
/// exchanges).
#[derive(Debug, Clone, Copy)]
pub struct CommSpec<'a> {
    /// The communicator's id.
    pub id: &'a CommId,
    /// Its name.
    pub name: &'a str,
    /// This rank.
    pub rank: usize,
    /// Ranks of the communicator.
    pub world_size: usize,
    /// The longest a wait for other ranks may last.
    pub timeout: Duration,
}

/// One collective resolved to memory: its signature and the bytes it sends and receives
/// (lengths checked against the signature and the world size; see
/// [`CollectiveCall`](accel_graph_api::backend_kit::CollectiveCall) for the in-place forms).
#[derive(Debug)]
pub struct RawCollective<'a, B> {
    /// What every rank agrees on.
    pub signature: CollectiveSignature,
    /// The bytes sent.
    pub send: Bytes<'a, B>,
    /// The bytes received.
    pub recv: Bytes<'a, B>,
}

/// Collectives of a driver: NCCL on CUDA, an exchange between simulated devices on the mock.
/// A driver without them answers [`GraphError::Unsupported`](accel_graph_api::GraphError)
/// from [`comm_unique_id`](Self::comm_unique_id) and [`comm_init`](Self::comm_init), saying
/// why.
pub trait DriverCollectives: DriverOps {
    /// One rank's communicator (dropping it releases it).
    type Comm: Send + Sync + 'static;

    /// `Ok` when the driver can make communicators here; the reason otherwise (no
    /// collectives on this device kind, a library missing at run time). Cheap: it is the
    /// answer of [`Backend::collectives`](accel_graph_api::Backend::collectives).
    fn comm_support(&self) -> DriverResult<()>;

    /// A new, unique communicator id.
    fn comm_unique_id(&self) -> DriverResult<CommId>;

    /// Joins the communicator `spec.id` as rank `spec.rank` (every rank calls it; NCCL's
    /// blocks until all have). Called with the device bound, in relaxed capture mode, and only
    /// where the capture-mode rules allow an unsafe call (joining allocates device memory).
    fn comm_init(&self, spec: CommSpec<'_>) -> DriverResult<Self::Comm>;

    /// Issues `call` on `stream` (recorded if it is capturing).
    ///
    /// # Safety
    /// The send and receive bytes must lie inside their live blocks. If `stream` is capturing,
    /// the caller must keep the blocks, and `comm`, alive as long as any executable made from
    /// the capture can launch.
    unsafe fn collective(
        &self,
        comm: &Self::Comm,
        call: RawCollective<'_, Self::Block>,
        stream: &Self::Stream,
    ) -> DriverResult<()>;

    /// The error that made `comm` unusable, if one did (NCCL's asynchronous error, the mock's
    /// timeout).
    fn comm_error(&self, comm: &Self::Comm) -> Option<String>;

    /// Ends the device work waiting on `comm` and makes it unusable (NCCL's
    /// `ncclCommAbort`); later collectives on it fail.
    fn comm_abort(&self, comm: &Self::Comm, reason: &str);
}

/// The refusal of a driver without collectives: [`GraphError::Unsupported`] saying `why`
/// (what [`no_collectives!`](crate::no_collectives) answers).
pub fn collectives_unsupported(why: &str) -> crate::DriverError {
    crate::DriverError::Api(GraphError::Unsupported {
        what: why.to_owned(),
    })
}

/// Implements [`DriverCollectives`] for a driver that has none (WebGPU, HIP without RCCL,
/// CUDA built without NCCL): no communicator can be made (`Comm` is uninhabited), and
/// [`comm_support`](DriverCollectives::comm_support), `comm_unique_id` and `comm_init` answer
/// [`GraphError::Unsupported`] with the reason `$why`, a `&str` (so the collective conformance
/// cases are skipped with it).
#[macro_export]
macro_rules! no_collectives {
    ($device:ty, $why:expr) => {
        impl $crate::api::DriverCollectives for $device {
            /// No communicator can be made.
            type Comm = ::std::convert::Infallible;

            fn comm_support(&self) -> $crate::DriverResult<()> {
                Err($crate::api::collectives_unsupported($why))
            }

            fn comm_unique_id(&self) -> $crate::DriverResult<$crate::__api::collective::CommId> {
                Err($crate::api::collectives_unsupported($why))
            }

            fn comm_init(
                &self,
                _spec: $crate::api::CommSpec<'_>,
            ) -> $crate::DriverResult<::std::convert::Infallible> {
                Err($crate::api::collectives_unsupported($why))
            }

            unsafe fn collective(
                &self,
                comm: &::std::convert::Infallible,
                _call: $crate::api::RawCollective<'_, Self::Block>,
                _stream: &Self::Stream,
            ) -> $crate::DriverResult<()> {
                match *comm {}
            }

            fn comm_error(&self, comm: &::std::convert::Infallible) -> Option<String> {
                match *comm {}
            }

            fn comm_abort(&self, comm: &::std::convert::Infallible, _reason: &str) {
                match *comm {}
            }
        }
    };
}
