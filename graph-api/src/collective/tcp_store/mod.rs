//! `TcpStore`: a [`Store`] served over TCP by rank 0, for ranks on several hosts that share
//! no directory (torch's `TCPStore`, the `env://` rendezvous).
//!
//! The protocol is this crate's own (`wire`): length-prefixed frames, each checked against a
//! limit before it is read, over one connection per rank. The server (`server`) is a thread
//! accepting connections and a thread per connected rank; a rank's requests (`client`) are
//! answered one at a time, in the order its threads made them. Every read and write has a
//! deadline, so no failure of a peer is a hang.

mod client;
mod server;
mod wire;

use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs},
    time::{Duration, Instant},
};

use self::{
    client::Client,
    server::Server,
    wire::{MAX_KEY_BYTES, MAX_VALUE_BYTES, Request, Response},
};
use super::{DEFAULT_TIMEOUT, Store};
use crate::{GraphError, Result};

/// The longest one wait request keeps the connection: a longer wait is several requests, so
/// that the rank's other threads get their turn, and a server gone silent is noticed.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// How a [`TcpStore`] waits.
///
/// ```
/// use std::time::Duration;
/// use accel_graph_api::collective::TcpStoreOptions;
/// let options = TcpStoreOptions::new().connect_timeout(Duration::from_secs(30));
/// assert_eq!(options.connect_timeout, Duration::from_secs(30));
/// assert_eq!(options.io_timeout, Duration::from_secs(30)); // the default
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpStoreOptions {
    /// How long a rank keeps trying to reach the server (rank 0 may start after the others,
    /// a Kubernetes service name may not resolve yet). Default
    /// [`DEFAULT_TIMEOUT`](super::DEFAULT_TIMEOUT), as a communicator's meetings;
    /// [`Duration::MAX`] tries as long as it takes.
    pub connect_timeout: Duration,
    /// How long one request may wait for its answer, beyond the time the server is asked to
    /// wait for a key. Default 30 s: the server answers in microseconds, so this only bounds
    /// how long a server that is gone without closing the connection (its host lost) goes
    /// unnoticed.
    pub io_timeout: Duration,
    /// How long rank 0's store, when dropped, keeps serving ranks still connected to it (they
    /// may still be reading the last meeting's values), until they disconnect. Default 30 s;
    /// zero stops it at once.
    pub linger: Duration,
}

impl Default for TcpStoreOptions {
    fn default() -> Self {
        TcpStoreOptions {
            connect_timeout: DEFAULT_TIMEOUT,
            io_timeout: Duration::from_secs(30),
            linger: Duration::from_secs(30),
        }
    }
}

impl TcpStoreOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`TcpStoreOptions::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`TcpStoreOptions::io_timeout`].
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Sets [`TcpStoreOptions::linger`].
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }
}

/// A [`Store`] over TCP: rank 0 hosts the server ([`TcpStore::host`], or
/// [`TcpStore::for_rank`] with rank 0), and every rank, rank 0 included, is a client with one
/// connection ([`TcpStore::connect`]). For ranks on several hosts that share no directory:
/// what [`LaunchEnv::store`](super::LaunchEnv::store) makes when a launcher sets
/// `MASTER_ADDR` and `MASTER_PORT` (torchrun, a SLURM or Kubernetes job; see
/// `docs/MULTI_GPU.md`).
///
/// `set_if_absent` is atomic on the server; `wait` waits there (no polling) and returns
/// `None` at its deadline. Keys are at most [`TcpStore::MAX_KEY_BYTES`] and values
/// [`TcpStore::MAX_VALUE_BYTES`] ([`GraphError::ArgumentMismatch`] beyond); the store carries
/// a communicator's meetings, a few bytes each.
///
/// Failures are errors, never hangs: a server that does not answer within
/// [`TcpStoreOptions::connect_timeout`], a connection closed or reset (rank 0 dropped its
/// store or died), an answer that does not come within [`TcpStoreOptions::io_timeout`], or a
/// peer that does not speak this protocol are [`GraphError::StoreUnavailable`], and the
/// connection is not used again. Dropping rank 0's store stops its server once the other
/// ranks have disconnected (at most [`TcpStoreOptions::linger`] later); their later requests
/// fail.
///
/// The server has no authentication, as torch's has none: run it on a network only the job
/// reaches.
///
/// ```
/// use std::time::{Duration, Instant};
/// use accel_graph_api::collective::{Store, TcpStore, TcpStoreOptions};
/// let options = TcpStoreOptions::new().connect_timeout(Duration::from_secs(5));
/// let host = TcpStore::host("127.0.0.1:0", &options)?; // port 0: any free port
/// let peer = TcpStore::connect("127.0.0.1", host.port(), &options)?;
/// host.set("greeting", b"hello")?;
/// let deadline = Instant::now() + Duration::from_secs(1);
/// assert_eq!(peer.wait("greeting", deadline)?, Some(b"hello".to_vec()));
/// assert_eq!(peer.set_if_absent("greeting", b"bye")?, Some(b"hello".to_vec()));
/// assert_eq!(peer.wait("missing", Instant::now())?, None);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub struct TcpStore {
    // Dropped before the server: rank 0's own connection closes first, so that the server's
    // linger waits for the other ranks only.
    client: Client,
    server: Option<Server>,
    port: u16,
}

impl TcpStore {
    /// The longest key, in bytes.
    pub const MAX_KEY_BYTES: usize = MAX_KEY_BYTES;
    /// The longest value, in bytes (64 MiB).
    pub const MAX_VALUE_BYTES: usize = MAX_VALUE_BYTES;

    /// Hosts the server on `bind` (`"0.0.0.0:29500"`, or port 0 for any free port: see
    /// [`TcpStore::port`]) and connects to it. [`GraphError::StoreUnavailable`] when no
    /// address of `bind` can be listened on (the port is taken, the address is not this
    /// host's).
    pub fn host(bind: impl ToSocketAddrs, options: &TcpStoreOptions) -> Result<Self> {
        let addrs: Vec<SocketAddr> = bind
            .to_socket_addrs()
            .map_err(|e| GraphError::StoreUnavailable {
                store: "(unresolved)".to_owned(),
                reason: format!("the address to listen on does not resolve: {e}"),
            })?
            .collect();
        let mut failure = None;
        for addr in addrs {
            match Server::start(addr, options.io_timeout, options.linger) {
                Ok(server) => {
                    let client = Client::connect_local(server.local_target(), options.io_timeout)?;
                    return Ok(TcpStore {
                        client,
                        port: server.addr().port(),
                        server: Some(server),
                    });
                }
                Err(e) => failure = Some((addr, e)),
            }
        }
        Err(match failure {
            Some((addr, e)) => {
                let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (another process holds the port; under torchrun, MASTER_PORT is the port \
                     of torch's own store: give accel-graph a port of its own with \
                     ACCEL_GRAPH_MASTER_PORT)"
                } else {
                    ""
                };
                GraphError::StoreUnavailable {
                    store: addr.to_string(),
                    reason: format!("rank 0 could not listen there: {e}{hint}"),
                }
            }
            None => GraphError::StoreUnavailable {
                store: "(unresolved)".to_owned(),
                reason: "the address to listen on resolves to no address".to_owned(),
            },
        })
    }

    /// Connects to the store hosted at `host:port`, trying again until
    /// [`TcpStoreOptions::connect_timeout`] passes (rank 0 may start later).
    /// [`GraphError::StoreUnavailable`] when no store answers by then, or the server there
    /// does not speak this protocol.
    pub fn connect(host: &str, port: u16, options: &TcpStoreOptions) -> Result<Self> {
        let client = Client::connect(host, port, options.connect_timeout, options.io_timeout)?;
        Ok(TcpStore {
            client,
            server: None,
            port,
        })
    }

    /// Rank `rank`'s store of a job whose rank 0 hosts it at `master_addr:port`: rank 0
    /// hosts ([`TcpStore::host`]), the others connect ([`TcpStore::connect`]).
    ///
    /// Rank 0 listens on loopback when `master_addr` names only loopback addresses (one
    /// host: nothing else can reach the store), and otherwise on every interface, as torch's
    /// `TCPStore` does: `master_addr` may name a Kubernetes service or an address rank 0
    /// cannot listen on itself.
    pub fn for_rank(
        master_addr: &str,
        port: u16,
        rank: usize,
        options: &TcpStoreOptions,
    ) -> Result<Self> {
        if rank != 0 {
            return Self::connect(master_addr, port, options);
        }
        let resolved: Vec<SocketAddr> = (master_addr, port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default();
        let bind = if !resolved.is_empty() && resolved.iter().all(|a| a.ip().is_loopback()) {
            resolved
        } else if resolved.is_empty() || resolved.iter().any(SocketAddr::is_ipv4) {
            vec![SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))]
        } else {
            vec![SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))]
        };
        Self::host(bind.as_slice(), options)
    }

    /// The server's port: the one it listens on when this rank hosts it (the port chosen
    /// when it was asked for port 0), else the one connected to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// True when this rank hosts the server.
    pub fn is_host(&self) -> bool {
        self.server.is_some()
    }

    /// The address the server listens on, when this rank hosts it.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(Server::addr)
    }

    fn check(&self, key: &str, value: &[u8]) -> Result<()> {
        if key.len() > MAX_KEY_BYTES {
            return Err(GraphError::ArgumentMismatch(format!(
                "store {}: a key of {} bytes is longer than the {MAX_KEY_BYTES} a key may have",
                self.client.target(),
                key.len()
            )));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(GraphError::ArgumentMismatch(format!(
                "store {}: a value of {} bytes is longer than the {MAX_VALUE_BYTES} a value may \
                 have (the store carries meetings of ranks, not data)",
                self.client.target(),
                value.len()
            )));
        }
        Ok(())
    }

    fn unexpected(&self, request: &str, answer: Response) -> GraphError {
        GraphError::StoreUnavailable {
            store: self.client.target().to_owned(),
            reason: format!("the server answered {request} with {answer:?}"),
        }
    }
}

impl fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStore")
            .field("server", &self.client.target())
            .field("host", &self.is_host())
            .finish()
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.check(key, value)?;
        let request = Request::Set {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
        };
        match self.client.request(&request, Duration::ZERO)? {
            Response::Done => Ok(()),
            other => Err(self.unexpected("set", other)),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.check(key, &[])?;
        let request = Request::Get {
            key: key.as_bytes().to_vec(),
        };
        match self.client.request(&request, Duration::ZERO)? {
            Response::Value(value) => Ok(Some(value)),
            Response::Absent => Ok(None),
            other => Err(self.unexpected("get", other)),
        }
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.check(key, &[])?;
        let request = Request::Delete {
            key: key.as_bytes().to_vec(),
        };
        match self.client.request(&request, Duration::ZERO)? {
            Response::Done => Ok(()),
            other => Err(self.unexpected("delete", other)),
        }
    }

    /// Atomic on the server: the check and the write happen under its lock.
    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check(key, value)?;
        let request = Request::SetIfAbsent {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
        };
        match self.client.request(&request, Duration::ZERO)? {
            Response::Absent => Ok(None),
            Response::Value(held) => Ok(Some(held)),
            other => Err(self.unexpected("set_if_absent", other)),
        }
    }

    /// Waits on the server (which wakes when the key is set), in slices of at most 100 ms so
    /// that the rank's other threads keep their turn at the connection.
    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        self.check(key, &[])?;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(WAIT_SLICE);
            let request = Request::Wait {
                key: key.as_bytes().to_vec(),
                timeout: slice,
            };
            match self.client.request(&request, slice)? {
                Response::Value(value) => return Ok(Some(value)),
                // Past the deadline a wait looks once, as `Store::wait` does.
                Response::Absent if Instant::now() >= deadline => return Ok(None),
                Response::Absent => {}
                other => return Err(self.unexpected("wait", other)),
            }
        }
    }
}
