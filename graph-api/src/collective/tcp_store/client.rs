//! A rank's connection to the server: connecting with retries (rank 0's server may start
//! after the others), the greeting, and requests answered one at a time, in the order the
//! rank's threads asked.

use std::{
    net::{SocketAddr, TcpStream, ToSocketAddrs},
    sync::{Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use super::wire::{FrameError, ReadStart, Request, Response, VERSION, read_frame, write_frame};
use crate::{GraphError, Result, collective::store::deadline_after};

/// The longest pause between two attempts to connect.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(500);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data whole: a panic cannot tear it.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns at the connection, first come first served: a thread whose long wait is cut into
/// slices cannot take the connection again before a thread that asked meanwhile.
#[derive(Default)]
struct Turns {
    next: u64,
    serving: u64,
}

/// The connection, and why it broke, once it did (a broken connection is not used again:
/// the answer it was reading may still arrive).
struct Link {
    stream: TcpStream,
    broken: Option<String>,
}

pub(super) struct Client {
    /// `host:port`, for messages.
    target: String,
    io_timeout: Duration,
    turns: Mutex<Turns>,
    turn_changed: Condvar,
    link: Mutex<Link>,
}

/// Gives the turn to the next thread, also when a request panics.
struct Turn<'a>(&'a Client);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.0.turns).serving += 1;
        self.0.turn_changed.notify_all();
    }
}

impl Client {
    /// Connects to `host:port`, trying again (with growing pauses) until `connect_timeout`
    /// passes, then greets the server. A name that does not resolve yet (a Kubernetes
    /// service whose pod is not up) is tried again too.
    pub(super) fn connect(
        host: &str,
        port: u16,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<Self> {
        let target = format!("{host}:{port}");
        let started = Instant::now();
        let deadline = deadline_after(started, connect_timeout);
        let mut pause = Duration::from_millis(10);
        let last_error = loop {
            let attempt = match (host, port).to_socket_addrs() {
                Ok(addrs) => Self::try_addrs(addrs, deadline, io_timeout),
                Err(e) => Err(format!("{host} does not resolve: {e}")),
            };
            let error = match attempt {
                Ok(stream) => return Self::greet(target, stream, io_timeout),
                Err(error) => error,
            };
            let now = Instant::now();
            if now >= deadline {
                break error;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        };
        Err(GraphError::StoreUnavailable {
            store: target,
            reason: format!(
                "no store answered within {} ms ({last_error}): rank 0 hosts it — is rank 0 \
                 running, and is its address reachable from this host?",
                started.elapsed().as_millis()
            ),
        })
    }

    /// Connects to `addr` on this host (rank 0 to the server it hosts): no retries, it listens.
    pub(super) fn connect_local(addr: SocketAddr, io_timeout: Duration) -> Result<Self> {
        let target = addr.to_string();
        let stream = TcpStream::connect_timeout(&addr, io_timeout.max(Duration::from_millis(1)))
            .map_err(|e| GraphError::StoreUnavailable {
                store: target.clone(),
                reason: format!("this rank could not reach the store it hosts: {e}"),
            })?;
        Self::greet(target, stream, io_timeout)
    }

    fn try_addrs(
        addrs: impl Iterator<Item = SocketAddr>,
        deadline: Instant,
        io_timeout: Duration,
    ) -> std::result::Result<TcpStream, String> {
        let mut error = "the name resolves to no address".to_owned();
        for addr in addrs {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .min(io_timeout)
                .max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&addr, left) {
                Ok(stream) => return Ok(stream),
                Err(e) => error = format!("{addr}: {e}"),
            }
        }
        Err(error)
    }

    /// Sends the greeting and checks the server's: a server of another protocol (torch's
    /// `TCPStore` on `MASTER_PORT`) is refused here, not trusted with requests.
    fn greet(target: String, stream: TcpStream, io_timeout: Duration) -> Result<Self> {
        // Requests are small and awaited one at a time: send them at once.
        let _ = stream.set_nodelay(true);
        let client = Client {
            target,
            io_timeout,
            turns: Mutex::default(),
            turn_changed: Condvar::new(),
            link: Mutex::new(Link {
                stream,
                broken: None,
            }),
        };
        let not_ours = |what: String| GraphError::StoreUnavailable {
            store: client.target.clone(),
            reason: format!(
                "the greeting failed: {what}; is the server there an accel-graph store? (under \
                 torchrun, MASTER_PORT is the port of torch's own store: give accel-graph a \
                 port of its own with ACCEL_GRAPH_MASTER_PORT)"
            ),
        };
        match client.request(&Request::Hello { version: VERSION }, Duration::ZERO) {
            Ok(Response::Hello { version }) if version == VERSION => Ok(client),
            Ok(Response::Hello { version }) => Err(GraphError::StoreUnavailable {
                store: client.target.clone(),
                reason: format!(
                    "the server speaks version {version} of the store's protocol, this rank \
                     version {VERSION}: every rank must run the same accel-graph"
                ),
            }),
            Ok(other) => Err(not_ours(format!("it answered the greeting with {other:?}"))),
            Err(GraphError::StoreUnavailable { reason, .. }) => Err(not_ours(reason)),
            Err(e) => Err(e),
        }
    }

    /// `host:port` of the server.
    pub(super) fn target(&self) -> &str {
        &self.target
    }

    fn unavailable(&self, reason: String) -> GraphError {
        GraphError::StoreUnavailable {
            store: self.target.clone(),
            reason,
        }
    }

    /// Waits for this thread's turn at the connection.
    fn turn(&self) -> Turn<'_> {
        let mut turns = lock(&self.turns);
        let mine = turns.next;
        turns.next += 1;
        while turns.serving != mine {
            turns = self
                .turn_changed
                .wait(turns)
                .unwrap_or_else(|e| e.into_inner());
        }
        Turn(self)
    }

    /// Sends `request` and reads its answer, which must come within `server_time` (how long
    /// the server may take, a wait's time) plus the I/O timeout. Any failure breaks the
    /// connection for good, with a [`GraphError::StoreUnavailable`] saying why.
    pub(super) fn request(&self, request: &Request, server_time: Duration) -> Result<Response> {
        let _turn = self.turn();
        let mut link = lock(&self.link);
        if let Some(reason) = &link.broken {
            return Err(self.unavailable(format!("the connection broke earlier: {reason}")));
        }
        let deadline = deadline_after(Instant::now(), server_time.saturating_add(self.io_timeout));
        let answer = write_frame(&mut link.stream, &request.encode(), deadline)
            .map_err(|e| format!("sending failed: {e}"))
            .and_then(|()| {
                read_frame(&mut link.stream, ReadStart::By(deadline)).map_err(|e| match e {
                    FrameError::Closed => {
                        "the server closed the connection (rank 0 dropped its store or ended)"
                            .to_owned()
                    }
                    FrameError::TimedOut => format!(
                        "no answer within {} ms",
                        server_time.saturating_add(self.io_timeout).as_millis()
                    ),
                    FrameError::Io(e) => {
                        format!("the connection failed ({e}): rank 0 may have ended")
                    }
                    other => other.to_string(),
                })
            })
            .and_then(|frame| {
                Response::decode(&frame).map_err(|e| format!("unreadable answer: {e}"))
            })
            .and_then(|response| match response {
                Response::Refused(why) => Err(format!("the server refused a request: {why}")),
                response => Ok(response),
            });
        answer.map_err(|reason| {
            let _ = link.stream.shutdown(std::net::Shutdown::Both);
            link.broken = Some(reason.clone());
            self.unavailable(reason)
        })
    }
}
