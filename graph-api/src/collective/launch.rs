//! `LaunchEnv`: this process's rank as a torchrun-style launcher describes it in the
//! environment, for ranks that are processes.

use std::path::PathBuf;

use super::{CommId, CommOptions, Communicator, FileStore};
use crate::{Backend, GraphError, Result};

/// This process's place among ranks that are processes, from the environment a torchrun-style
/// launcher sets: `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (the device on this host; `RANK` when
/// unset), `ACCEL_GRAPH_STORE` (a directory every rank shares, fresh for each launch: the
/// ranks' [`FileStore`]) and, optionally, [`CommId::ENV`] (an id the launcher made; without
/// it rank 0 makes one and shares it through the store).
///
/// ```
/// use accel_graph_api::{GraphError, collective::LaunchEnv};
/// let env = LaunchEnv::from_vars(|name| match name {
///     "RANK" => Some("1".into()),
///     "WORLD_SIZE" => Some("2".into()),
///     "ACCEL_GRAPH_STORE" => Some("/tmp/job-42".into()),
///     _ => None,
/// })?;
/// assert_eq!((env.rank, env.world_size, env.local_rank), (1, 2, 1));
/// let missing = LaunchEnv::from_vars(|_| None).unwrap_err();
/// assert!(matches!(missing, GraphError::ArgumentMismatch(_)));
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
    /// The directory the ranks meet in (`ACCEL_GRAPH_STORE`).
    pub store_dir: PathBuf,
    /// The communicator id the launcher made (`ACCEL_GRAPH_COMM_ID`), if any.
    pub comm_id: Option<CommId>,
}

impl LaunchEnv {
    /// The variable naming the ranks' shared directory.
    pub const STORE_ENV: &'static str = "ACCEL_GRAPH_STORE";

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
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
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
                     WORLD_SIZE, LOCAL_RANK and {} (a directory every rank shares)",
                    Self::STORE_ENV
                ))
            })
        };
        let rank = required("RANK", number("RANK")?)?;
        let world_size = required("WORLD_SIZE", number("WORLD_SIZE")?)?;
        let local_rank = number("LOCAL_RANK")?.unwrap_or(rank);
        let store_dir = var(Self::STORE_ENV).map(PathBuf::from).ok_or_else(|| {
            GraphError::ArgumentMismatch(format!(
                "environment variable {} is not set: give every rank the same fresh directory",
                Self::STORE_ENV
            ))
        })?;
        let comm_id = var(CommId::ENV)
            .map(|text| CommId::from_hex(&text))
            .transpose()?;
        if rank >= world_size {
            return Err(GraphError::ArgumentMismatch(format!(
                "RANK={rank} is outside WORLD_SIZE={world_size}"
            )));
        }
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            store_dir,
            comm_id,
        })
    }

    /// The ranks' store: a [`FileStore`] on [`LaunchEnv::store_dir`].
    pub fn store(&self) -> Result<FileStore> {
        FileStore::new(&self.store_dir)
    }

    /// `options` with the launcher's id, if it gave one.
    pub fn options(&self, options: CommOptions) -> CommOptions {
        match &self.comm_id {
            Some(id) => options.id(id.clone()),
            None => options,
        }
    }

    /// This rank's communicator on `backend` (opened on device [`LaunchEnv::local_rank`]),
    /// meeting the other processes in the store directory.
    pub fn communicator<B: Backend>(
        &self,
        backend: &B,
        options: CommOptions,
    ) -> Result<Communicator<B>> {
        Communicator::with_options(
            backend,
            self.store()?,
            self.rank,
            self.world_size,
            self.options(options),
        )
    }
}
