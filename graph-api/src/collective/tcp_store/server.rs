//! The server rank 0 hosts: a thread accepting connections, and one thread per connected
//! rank answering its requests in order from one map of values. Dropping it stops them all:
//! every connection is shut down (its rank's next request fails at once), waiting requests
//! wake, and the threads are joined.

use std::{
    collections::HashMap,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream},
    sync::{Arc, Condvar, Mutex, MutexGuard, atomic::AtomicBool, atomic::Ordering},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::wire::{FrameError, ReadStart, Request, Response, VERSION, read_frame, write_frame};
use crate::collective::store::deadline_after;

/// How long an idle connection's thread sleeps in a read before it looks whether the server
/// is stopping (its socket is shut down then anyway; this only bounds a missed shutdown).
const IDLE_POLL: Duration = Duration::from_secs(5);
/// The longest one `Wait` request waits on the server; clients wait longer in several.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// A connection's thread needs little stack: it parses frames and touches a map.
const CONNECTION_STACK: usize = 256 << 10;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data whole: a panic cannot tear it.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The live connections, so that stopping can shut them down.
#[derive(Default)]
struct Connections {
    next_id: u64,
    open: HashMap<u64, TcpStream>,
}

/// What the server's threads share.
struct Shared {
    values: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    /// Signalled when a value is set, and when the server stops.
    changed: Condvar,
    stopping: AtomicBool,
    connections: Mutex<Connections>,
    /// Signalled when a connection ends.
    closed: Condvar,
    io_timeout: Duration,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    fn serve(&self, request: Request) -> Response {
        let mut values = lock(&self.values);
        match request {
            Request::Hello { version } => Response::Refused(format!(
                "a second greeting (version {version}) on one connection"
            )),
            Request::Set { key, value } => {
                values.insert(key, value);
                self.changed.notify_all();
                Response::Done
            }
            Request::Get { key } => values
                .get(&key)
                .cloned()
                .map_or(Response::Absent, Response::Value),
            Request::Delete { key } => {
                values.remove(&key);
                Response::Done
            }
            // Atomic: the check and the insert happen under one lock.
            Request::SetIfAbsent { key, value } => match values.get(&key) {
                Some(held) => Response::Value(held.clone()),
                None => {
                    values.insert(key, value);
                    self.changed.notify_all();
                    Response::Absent
                }
            },
            Request::Wait { key, timeout } => {
                let deadline = deadline_after(Instant::now(), timeout.min(MAX_WAIT));
                loop {
                    if let Some(value) = values.get(&key) {
                        return Response::Value(value.clone());
                    }
                    if self.stopping() {
                        return Response::Refused("the store is shutting down".to_owned());
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        return Response::Absent;
                    }
                    values = self
                        .changed
                        .wait_timeout(values, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// Answers one connection's requests until it closes, fails, or the server stops. The
    /// first request must be the greeting.
    fn converse(&self, mut stream: TcpStream) {
        let start = ReadStart::Idle {
            poll: IDLE_POLL,
            within: self.io_timeout,
        };
        let mut greeted = false;
        loop {
            let frame = match read_frame(&mut stream, start) {
                Ok(frame) => frame,
                Err(FrameError::Idle) if !self.stopping() => continue,
                // Closed, reset, cut short, too long to read, or stopping: the connection
                // ends (a peer announcing a huge message is not read further).
                Err(_) => return,
            };
            let (response, go_on) = match Request::decode(&frame) {
                Ok(Request::Hello { version }) if !greeted => {
                    greeted = true;
                    // The greeting is echoed when the versions agree; otherwise the client
                    // reads this server's version and says so.
                    (Response::Hello { version: VERSION }, version == VERSION)
                }
                Ok(_) if !greeted => (
                    Response::Refused("a request before the greeting".to_owned()),
                    false,
                ),
                Ok(request) => (self.serve(request), true),
                Err(why) => (
                    Response::Refused(format!("malformed request: {why}")),
                    false,
                ),
            };
            let deadline = Instant::now() + self.io_timeout;
            if write_frame(&mut stream, &response.encode(), deadline).is_err() || !go_on {
                return;
            }
        }
    }
}

/// A running server; dropping it stops it.
pub(super) struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
    linger: Duration,
}

impl Server {
    /// Listens on `addr` and starts accepting.
    pub(super) fn start(
        addr: SocketAddr,
        io_timeout: Duration,
        linger: Duration,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            values: Mutex::default(),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            connections: Mutex::default(),
            closed: Condvar::new(),
            io_timeout,
        });
        let acceptor = std::thread::Builder::new()
            .name(format!("accel-graph store {addr}"))
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept(&listener, &shared)
            })?;
        Ok(Server {
            shared,
            addr,
            acceptor: Some(acceptor),
            linger,
        })
    }

    /// The address it listens on (its port, when it was asked for port 0).
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where a client on this host reaches it: the listening address, or the loopback
    /// address of its family when it listens on every interface.
    pub(super) fn local_target(&self) -> SocketAddr {
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        SocketAddr::new(ip, self.addr.port())
    }
}

/// Accepts connections until the server stops, then joins their threads.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(_) => {
                // Out of descriptors, a connection reset before it was accepted: the next
                // accept may succeed; pause so a persistent failure does not spin.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        threads.retain(|t| !t.is_finished());
        // Answers are small and awaited one at a time: send them at once.
        let _ = stream.set_nodelay(true);
        let Ok(copy) = stream.try_clone() else {
            continue;
        };
        let id = {
            let mut connections = lock(&shared.connections);
            // Registered under the lock that stopping takes, so no connection escapes the
            // shutdown.
            if shared.stopping() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                break;
            }
            let id = connections.next_id;
            connections.next_id += 1;
            connections.open.insert(id, copy);
            id
        };
        let spawned = std::thread::Builder::new()
            .name("accel-graph store connection".to_owned())
            .stack_size(CONNECTION_STACK)
            .spawn({
                let shared = Arc::clone(shared);
                move || {
                    shared.converse(stream);
                    lock(&shared.connections).open.remove(&id);
                    shared.closed.notify_all();
                }
            });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(_) => {
                if let Some(stream) = lock(&shared.connections).open.remove(&id) {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
            }
        }
    }
    for thread in threads {
        let _ = thread.join();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let shared = &self.shared;
        // Ranks still connected may be reading the last values they need (rank 0 is often
        // done first): serve them for up to `linger`, until they disconnect.
        let deadline = deadline_after(Instant::now(), self.linger);
        let mut connections = lock(&shared.connections);
        while !connections.open.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            connections = shared
                .closed
                .wait_timeout(connections, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        shared.stopping.store(true, Ordering::Release);
        for stream in connections.open.values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        drop(connections);
        // Waiting requests wake and see the server stopping (the lock orders the flag
        // before their check).
        drop(lock(&shared.values));
        shared.changed.notify_all();
        // The acceptor blocks in `accept`: a connection wakes it, and it sees the flag.
        let woken = TcpStream::connect_timeout(&self.local_target(), Duration::from_secs(1));
        if let (Ok(_), Some(acceptor)) = (woken, self.acceptor.take()) {
            let _ = acceptor.join();
        }
        // Otherwise (the listening address refuses this host's connections) the acceptor
        // stays blocked in `accept`, holding nothing but the listening socket; it ends with
        // the next connection and does not hold the process back.
    }
}
