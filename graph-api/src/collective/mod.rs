//! Collectives across devices: a [`Communicator`] with one rank per device (ranks being
//! threads of one process or processes), whose `all_reduce`, `all_gather`, `reduce_scatter`
//! and `broadcast` run on the current stream and are **captured like any op**.
//!
//! * **Ranks meet through a [`Store`]** (torch.distributed's store): [`MemoryStore`] for
//!   threads, [`FileStore`] for processes sharing a directory, [`TcpStore`] (hosted by rank
//!   0, torch's `env://`) for processes on several hosts; [`LaunchEnv`] picks one from the
//!   launcher's environment. It carries the communicator's id, the
//!   barriers, and the comparison of captures — never tensor data, which goes through the
//!   device (NCCL on CUDA; the mock exchanges in memory).
//! * **Every meeting is bounded** by the communicator's timeout: a rank that never comes is
//!   [`GraphError::CommTimeout`](crate::GraphError) naming it, not a hang.
//! * **A name is one communicator per store**: each rank claims its place in the name
//!   atomically, and a place already held is
//!   [`GraphError::CommNameClash`](crate::GraphError) (so are the ranks that meet it while
//!   joining), never a communicator mixing the ranks of two. Worlds are at most
//!   [`MAX_WORLD_SIZE`] ranks.
//! * **Captures are compared before they end**: each rank's capture holding collectives
//!   reports its sequence of [`CollectiveSignature`]s; ranks that recorded different ones get
//!   [`GraphError::CollectiveMismatch`](crate::GraphError) and the capture is discarded, so no
//!   graph that would hang at replay is ever made. The communicator stays usable after a
//!   mismatch (nothing captured ran); after a timeout it is unusable on the rank that timed
//!   out ([`GraphError::CommUnusable`](crate::GraphError)).
//! * **Capture rules** (NCCL's): a communicator runs one of each collective eagerly when it
//!   is made, so no capture is the first use of its connections; ranks that are threads of
//!   one process capture in `thread_local` mode (a collective in a `global` capture while
//!   several ranks share the capture domain is
//!   [`GraphError::CollectiveCaptureMode`](crate::GraphError)); every rank captures the same
//!   collectives in the same order (checked, above).
//!
//! The reference semantics (what the mock computes) is [`collective_reference`]: reductions in
//! rank order, each step rounded to the element type. See `docs/MULTI_GPU.md` for launching
//! ranks as threads and as processes.

mod communicator;
mod control;
mod id;
mod launch;
mod reference;
mod store;
mod tcp_store;
mod types;

pub use communicator::{CommOptions, Communicator, DEFAULT_TIMEOUT};
pub use control::{ControlPlane, MAX_WORLD_SIZE};
pub use id::{COMM_ID_BYTES, CommId};
pub use launch::{LaunchEnv, LaunchStore};
pub use reference::collective_reference;
pub use store::{FileStore, MemoryStore, Store, deadline_after};
pub use tcp_store::{TcpStore, TcpStoreOptions};
pub use types::{Collective, CollectiveSignature, CommDType, CommElement, ReduceOp};
