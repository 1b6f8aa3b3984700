//! `LaunchEnv`: this process's rank as a launcher describes it in the environment (torchrun,
//! srun, a Kubernetes job, or a script), and the store its ranks meet through.

use std::{path::PathBuf, time::Instant};

use super::{CommId, CommOptions, Communicator, FileStore, Store, TcpStore, TcpStoreOptions};
use crate::{Backend, GraphError, Result};

/// This process's place among ranks that are processes, from the environment a launcher
/// sets, and where the ranks meet:
///
/// * `RANK`, `WORLD_SIZE` (required); `LOCAL_RANK` (the device on this host; `RANK` when
///   unset) and `LOCAL_WORLD_SIZE` (ranks on this host), as torchrun sets them;
/// * **`MASTER_ADDR` and `MASTER_PORT`** (torch's `env://`): rank 0 hosts a [`TcpStore`] on
///   that port and every rank connects to it — ranks on several hosts, no shared directory.
///   Under torchrun, `MASTER_PORT` is already taken by torch's own store (torchrun's agent
///   hosts it there and says so with `TORCHELASTIC_USE_AGENT_STORE=True`), whose protocol
///   this crate does not speak: give accel-graph a port of its own in
///   `ACCEL_GRAPH_MASTER_PORT` ([`LaunchEnv::STORE_PORT_ENV`]), which takes precedence over
///   `MASTER_PORT`;
/// * or **`ACCEL_GRAPH_STORE`** ([`LaunchEnv::STORE_ENV`]): a directory every rank shares,
///   fresh for each launch (a [`FileStore`]); when set it is used, `MASTER_*` or not;
/// * optionally [`CommId::ENV`] (an id the launcher made; without it rank 0 makes one and
///   shares it through the store).
///
/// ```
/// use accel_graph_api::{GraphError, collective::LaunchEnv};
/// // torchrun --nnodes 2 --nproc-per-node 4, second host, third GPU:
/// let env = LaunchEnv::from_vars(|name| match name {
///     "RANK" => Some("6".into()),
///     "WORLD_SIZE" => Some("8".into()),
///     "LOCAL_RANK" => Some("2".into()),
///     "LOCAL_WORLD_SIZE" => Some("4".into()),
///     "MASTER_ADDR" => Some("node-0".into()),
///     "MASTER_PORT" => Some("29500".into()),
///     "TORCHELASTIC_USE_AGENT_STORE" => Some("True".into()),
///     "ACCEL_GRAPH_MASTER_PORT" => Some("29501".into()),
///     _ => None,
/// })?;
/// assert_eq!((env.rank, env.world_size, env.local_rank, env.local_world_size), (6, 8, 2, Some(4)));
/// assert_eq!((env.master_addr.as_deref(), env.master_port), (Some("node-0"), Some(29501)));
///
/// // A directory every rank shares:
/// let env = LaunchEnv::from_vars(|name| match name {
///     "RANK" => Some("1".into()),
///     "WORLD_SIZE" => Some("2".into()),
///     "ACCEL_GRAPH_STORE" => Some("/tmp/job-42".into()),
///     _ => None,
/// })?;
/// assert_eq!((env.rank, env.world_size, env.local_rank), (1, 2, 1));
///
/// // Nowhere to meet: the error names the variables.
/// let missing = LaunchEnv::from_vars(|name| match name {
///     "RANK" => Some("0".into()),
///     "WORLD_SIZE" => Some("2".into()),
///     _ => None,
/// })
/// .unwrap_err();
/// assert!(matches!(&missing, GraphError::ArgumentMismatch(m) if m.contains("MASTER_ADDR")));
/// # Ok::<(), GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaunchEnv {
    /// This process's rank (`RANK`).
    pub rank: usize,
    /// Ranks of the job (`WORLD_SIZE`).
    pub world_size: usize,
    /// This process's device on its host (`LOCAL_RANK`, else `RANK`).
    pub local_rank: usize,
    /// Ranks on this host (`LOCAL_WORLD_SIZE`), when the launcher says.
    pub local_world_size: Option<usize>,
    /// The directory the ranks meet in (`ACCEL_GRAPH_STORE`), when set: it is then the
    /// ranks' store.
    pub store_dir: Option<PathBuf>,
    /// The host of rank 0's [`TcpStore`] (`MASTER_ADDR`), when set.
    pub master_addr: Option<String>,
    /// The port of rank 0's [`TcpStore`]: `ACCEL_GRAPH_MASTER_PORT`, else `MASTER_PORT`.
    pub master_port: Option<u16>,
    /// The communicator id the launcher made (`ACCEL_GRAPH_COMM_ID`), if any.
    pub comm_id: Option<CommId>,
}

/// The variables this module reads that do not fit the rendezvous given, for messages.
const RENDEZVOUS_HELP: &str = "set MASTER_ADDR and MASTER_PORT (rank 0 hosts the ranks' store \
    there; torchrun sets them) or ACCEL_GRAPH_STORE (a directory every rank shares, fresh for \
    each launch)";

impl LaunchEnv {
    /// The variable naming the ranks' shared directory.
    pub const STORE_ENV: &'static str = "ACCEL_GRAPH_STORE";
    /// The variable naming the host of rank 0's store (torch's `env://`).
    pub const MASTER_ADDR_ENV: &'static str = "MASTER_ADDR";
    /// The variable naming the port of rank 0's store (torch's `env://`).
    pub const MASTER_PORT_ENV: &'static str = "MASTER_PORT";
    /// The variable naming a port for rank 0's store that overrides `MASTER_PORT`: needed
    /// under torchrun, whose agent hosts torch's store on `MASTER_PORT`.
    pub const STORE_PORT_ENV: &'static str = "ACCEL_GRAPH_MASTER_PORT";
    /// What torchrun sets to `True` when its agent hosts torch's store on `MASTER_PORT`.
    pub const TORCHRUN_AGENT_STORE_ENV: &'static str = "TORCHELASTIC_USE_AGENT_STORE";

    /// Reads this process's environment.
    pub fn from_env() -> Result<Self> {
        let bad = std::cell::RefCell::new(None);
        let env = Self::from_vars(|name| match std::env::var(name) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(value)) => {
                bad.borrow_mut()
                    .get_or_insert((name.to_owned(), value.to_string_lossy().into_owned()));
                None
            }
        });
        if let Some((name, value)) = bad.into_inner() {
            return Err(GraphError::ArgumentMismatch(format!(
                "environment variable {name} is not valid Unicode: {value:?}"
            )));
        }
        env
    }

    /// Reads the variables through `var` (for tests and launchers that hold them elsewhere).
    /// [`GraphError::ArgumentMismatch`] naming the variable when one is missing or not a
    /// number, when `RANK` is outside `WORLD_SIZE`, and when nothing says where the ranks
    /// meet (or only half of `MASTER_ADDR`/`MASTER_PORT` does, or torchrun's agent holds
    /// `MASTER_PORT` and `ACCEL_GRAPH_MASTER_PORT` is not set).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        // An empty variable is an unset one (`MASTER_ADDR= cmd`).
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let number = |name: &str| -> Result<Option<usize>> {
            var(name)
                .map(|text| {
                    text.trim().parse::<usize>().map_err(|_| {
                        GraphError::ArgumentMismatch(format!(
                            "environment variable {name}={text:?} is not a non-negative integer"
                        ))
                    })
                })
                .transpose()
        };
        let required = |name: &str, value: Option<usize>| {
            value.ok_or_else(|| {
                GraphError::ArgumentMismatch(format!(
                    "environment variable {name} is not set: launch each rank with RANK, \
                     WORLD_SIZE and LOCAL_RANK, and {RENDEZVOUS_HELP}"
                ))
            })
        };
        let rank = required("RANK", number("RANK")?)?;
        let world_size = required("WORLD_SIZE", number("WORLD_SIZE")?)?;
        let local_rank = number("LOCAL_RANK")?.unwrap_or(rank);
        let local_world_size = number("LOCAL_WORLD_SIZE")?;
        if rank >= world_size {
            return Err(GraphError::ArgumentMismatch(format!(
                "RANK={rank} is outside WORLD_SIZE={world_size}"
            )));
        }
        if let Some(local) = local_world_size.filter(|&local| local_rank >= local) {
            return Err(GraphError::ArgumentMismatch(format!(
                "LOCAL_RANK={local_rank} is outside LOCAL_WORLD_SIZE={local}"
            )));
        }
        let store_dir = var(Self::STORE_ENV).map(PathBuf::from);
        let master_addr = var(Self::MASTER_ADDR_ENV).map(|a| a.trim().to_owned());
        let own_port = var(Self::STORE_PORT_ENV);
        let (port_name, port_text) = match &own_port {
            Some(text) => (Self::STORE_PORT_ENV, Some(text.clone())),
            None => (Self::MASTER_PORT_ENV, var(Self::MASTER_PORT_ENV)),
        };
        let master_port = port_text
            .map(|text| match text.trim().parse::<u16>() {
                Ok(0) | Err(_) => Err(GraphError::ArgumentMismatch(format!(
                    "environment variable {port_name}={text:?} is not a port (1 to 65535; \
                     every rank must know it, so not 0)"
                ))),
                Ok(port) => Ok(port),
            })
            .transpose()?;
        if store_dir.is_none() {
            match (&master_addr, master_port) {
                (None, None) => {
                    return Err(GraphError::ArgumentMismatch(format!(
                        "nothing says where the ranks meet: {RENDEZVOUS_HELP}"
                    )));
                }
                (Some(_), None) | (None, Some(_)) => {
                    let missing = if master_addr.is_none() {
                        Self::MASTER_ADDR_ENV
                    } else {
                        Self::MASTER_PORT_ENV
                    };
                    return Err(GraphError::ArgumentMismatch(format!(
                        "environment variable {missing} is not set: rank 0 hosts the ranks' \
                         store at MASTER_ADDR:MASTER_PORT, so both are needed (or \
                         ACCEL_GRAPH_STORE, a directory every rank shares)"
                    )));
                }
                (Some(_), Some(_)) => {}
            }
            let agent_store = var(Self::TORCHRUN_AGENT_STORE_ENV)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
            if agent_store && own_port.is_none() {
                return Err(GraphError::ArgumentMismatch(format!(
                    "{}=True: torchrun's agent hosts torch's own store on MASTER_PORT, whose \
                     protocol accel-graph does not speak; set {} to another free port on \
                     MASTER_ADDR's host (the same for every rank, e.g. MASTER_PORT + 1) or \
                     {} (a shared directory)",
                    Self::TORCHRUN_AGENT_STORE_ENV,
                    Self::STORE_PORT_ENV,
                    Self::STORE_ENV
                )));
            }
        }
        let comm_id = var(CommId::ENV)
            .map(|text| CommId::from_hex(&text))
            .transpose()?;
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            local_world_size,
            store_dir,
            master_addr,
            master_port,
            comm_id,
        })
    }

    /// The ranks' store, with the default [`TcpStoreOptions`]: a [`FileStore`] on
    /// [`LaunchEnv::store_dir`] when it is set, else a [`TcpStore`] at
    /// `MASTER_ADDR:MASTER_PORT` (hosted by rank 0, reached by every rank).
    pub fn store(&self) -> Result<LaunchStore> {
        self.store_with(&TcpStoreOptions::new())
    }

    /// [`LaunchEnv::store`] with `options` for a [`TcpStore`].
    pub fn store_with(&self, options: &TcpStoreOptions) -> Result<LaunchStore> {
        if let Some(dir) = &self.store_dir {
            return FileStore::new(dir).map(LaunchStore::File);
        }
        match (&self.master_addr, self.master_port) {
            (Some(addr), Some(port)) => {
                TcpStore::for_rank(addr, port, self.rank, options).map(LaunchStore::Tcp)
            }
            _ => Err(GraphError::ArgumentMismatch(format!(
                "nothing says where the ranks meet: {RENDEZVOUS_HELP}"
            ))),
        }
    }

    /// `options` with the launcher's id, if it gave one.
    pub fn options(&self, options: CommOptions) -> CommOptions {
        match &self.comm_id {
            Some(id) => options.id(id.clone()),
            None => options,
        }
    }

    /// This rank's communicator on `backend` (opened on device [`LaunchEnv::local_rank`]),
    /// meeting the other processes through [`LaunchEnv::store`] — a [`TcpStore`] reached
    /// within the communicator's timeout, like its other meetings.
    pub fn communicator<B: Backend>(
        &self,
        backend: &B,
        options: CommOptions,
    ) -> Result<Communicator<B>> {
        let store = self.store_with(&TcpStoreOptions::new().connect_timeout(options.timeout))?;
        Communicator::with_options(
            backend,
            store,
            self.rank,
            self.world_size,
            self.options(options),
        )
    }
}

/// The store [`LaunchEnv::store`] chose: a directory every rank shares, or rank 0's server.
#[derive(Debug)]
#[non_exhaustive]
pub enum LaunchStore {
    /// `ACCEL_GRAPH_STORE`: a directory every rank shares.
    File(FileStore),
    /// `MASTER_ADDR:MASTER_PORT`: rank 0's server.
    Tcp(TcpStore),
}

impl LaunchStore {
    fn inner(&self) -> &dyn Store {
        match self {
            LaunchStore::File(store) => store,
            LaunchStore::Tcp(store) => store,
        }
    }
}

impl Store for LaunchStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner().set(key, value)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner().get(key)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.inner().delete(key)
    }

    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner().set_if_absent(key, value)
    }

    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        self.inner().wait(key, deadline)
    }
}
