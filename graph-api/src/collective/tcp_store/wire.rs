//! The store's wire format: every message is a frame, a little-endian `u64` length then that
//! many bytes, whose first byte says what it is. Lengths are checked against
//! [`MAX_FRAME_BYTES`] before anything is allocated, and a frame's bytes are kept only as they
//! arrive, so a peer announcing a huge frame costs nothing.

use std::{
    io::{self, Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

/// The longest value the store keeps (larger ones are refused before they are sent).
pub(super) const MAX_VALUE_BYTES: usize = 64 << 20;
/// The longest key the store keeps.
pub(super) const MAX_KEY_BYTES: usize = 64 << 10;
/// The longest frame either side reads: a key, a value and the fields around them.
pub(super) const MAX_FRAME_BYTES: u64 = (MAX_VALUE_BYTES + MAX_KEY_BYTES + 64) as u64;

/// What a greeting carries after its kind, so that a server of another protocol (torch's
/// `TCPStore` on the same port, say) is told apart at once.
const MAGIC: &[u8; 16] = b"accel-graph-kv\0\0";
/// The protocol's version, in the greeting.
pub(super) const VERSION: u16 = 1;

/// A request, from a client to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Request {
    /// The first message on a connection; the server answers with the same greeting.
    Hello {
        version: u16,
    },
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    SetIfAbsent {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// The value once set, or `Absent` after `timeout` (the server bounds it).
    Wait {
        key: Vec<u8>,
        timeout: Duration,
    },
}

/// An answer, from the server to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Response {
    /// The greeting, echoed: the server speaks this protocol at `version`.
    Hello { version: u16 },
    /// A `Set` or `Delete` was done.
    Done,
    /// The key's value (`Get`, `Wait`), or the value already held (`SetIfAbsent`).
    Value(Vec<u8>),
    /// No value (`Get`, `Wait` at its timeout), or the value was set (`SetIfAbsent`).
    Absent,
    /// The server refused the request (malformed, or the server is shutting down).
    Refused(String),
}

// Kinds of messages: the first byte of a frame. A greeting is the same in both directions.
const HELLO: u8 = 0;
const SET: u8 = 1;
const GET: u8 = 2;
const DELETE: u8 = 3;
const SET_IF_ABSENT: u8 = 4;
const WAIT: u8 = 5;
const DONE: u8 = 1;
const VALUE: u8 = 2;
const ABSENT: u8 = 3;
const REFUSED: u8 = 4;

fn hello(version: u16) -> Vec<u8> {
    let mut out = vec![HELLO];
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out
}

fn with_key(kind: u8, key: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + key.len() + rest.len());
    out.push(kind);
    // Keys are at most `MAX_KEY_BYTES`, checked by the client before it encodes them.
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(rest);
    out
}

/// Splits `<u32 length><key>` off `bytes`.
fn take_key(bytes: &[u8]) -> Result<(Vec<u8>, &[u8]), String> {
    let (len, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or("a request without its key's length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_KEY_BYTES {
        return Err(format!(
            "a key of {len} bytes, more than the {MAX_KEY_BYTES} a key may have"
        ));
    }
    let (key, rest) = rest
        .split_at_checked(len)
        .ok_or_else(|| format!("a key of {len} bytes in a shorter request"))?;
    Ok((key.to_vec(), rest))
}

fn decode_hello(rest: &[u8]) -> Result<u16, String> {
    match rest
        .strip_prefix(MAGIC.as_slice())
        .and_then(|v| <[u8; 2]>::try_from(v).ok())
    {
        Some(version) => Ok(u16::from_le_bytes(version)),
        None => Err("a greeting of another protocol".to_owned()),
    }
}

impl Request {
    pub(super) fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello { version } => hello(*version),
            Request::Set { key, value } => with_key(SET, key, value),
            Request::Get { key } => with_key(GET, key, &[]),
            Request::Delete { key } => with_key(DELETE, key, &[]),
            Request::SetIfAbsent { key, value } => with_key(SET_IF_ABSENT, key, value),
            Request::Wait { key, timeout } => {
                let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
                with_key(WAIT, key, &micros.to_le_bytes())
            }
        }
    }

    /// The request in `frame`, or what is wrong with it.
    pub(super) fn decode(frame: &[u8]) -> Result<Self, String> {
        let (&kind, rest) = frame.split_first().ok_or("an empty request")?;
        if kind == HELLO {
            return decode_hello(rest).map(|version| Request::Hello { version });
        }
        let (key, rest) = take_key(rest)?;
        let no_more = |request: Request| {
            if rest.is_empty() {
                Ok(request)
            } else {
                Err(format!("{} bytes after a request", rest.len()))
            }
        };
        match kind {
            SET => Ok(Request::Set {
                key,
                value: rest.to_vec(),
            }),
            GET => no_more(Request::Get { key }),
            DELETE => no_more(Request::Delete { key }),
            SET_IF_ABSENT => Ok(Request::SetIfAbsent {
                key,
                value: rest.to_vec(),
            }),
            WAIT => {
                let micros = <[u8; 8]>::try_from(rest)
                    .map_err(|_| "a wait without its timeout".to_owned())?;
                Ok(Request::Wait {
                    key,
                    timeout: Duration::from_micros(u64::from_le_bytes(micros)),
                })
            }
            other => Err(format!("a request of unknown kind {other}")),
        }
    }
}

impl Response {
    pub(super) fn encode(&self) -> Vec<u8> {
        match self {
            Response::Hello { version } => hello(*version),
            Response::Done => vec![DONE],
            Response::Value(value) => [&[VALUE][..], value].concat(),
            Response::Absent => vec![ABSENT],
            Response::Refused(why) => [&[REFUSED][..], why.as_bytes()].concat(),
        }
    }

    /// The answer in `frame`, or what is wrong with it.
    pub(super) fn decode(frame: &[u8]) -> Result<Self, String> {
        let (&kind, rest) = frame.split_first().ok_or("an empty answer")?;
        let empty = |response: Response| {
            if rest.is_empty() {
                Ok(response)
            } else {
                Err(format!("{} bytes after an answer", rest.len()))
            }
        };
        match kind {
            HELLO => decode_hello(rest).map(|version| Response::Hello { version }),
            DONE => empty(Response::Done),
            VALUE => Ok(Response::Value(rest.to_vec())),
            ABSENT => empty(Response::Absent),
            REFUSED => Ok(Response::Refused(
                String::from_utf8_lossy(rest).into_owned(),
            )),
            other => Err(format!("an answer of unknown kind {other}")),
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(super) enum FrameError {
    /// The peer closed the connection between frames.
    Closed,
    /// Nothing arrived while waiting for a frame to start (a server's idle connection).
    Idle,
    /// The frame did not arrive whole in time.
    TimedOut,
    /// The peer announced a frame longer than [`MAX_FRAME_BYTES`].
    TooLong(u64),
    /// The connection failed (reset, closed mid-frame).
    Io(io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => f.write_str("the connection was closed"),
            FrameError::Idle => f.write_str("nothing arrived"),
            FrameError::TimedOut => f.write_str("the answer did not arrive in time"),
            FrameError::TooLong(len) => write!(
                f,
                "the peer announced a message of {len} bytes, more than the {MAX_FRAME_BYTES} \
                 a message may have"
            ),
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// When a read must start and end.
#[derive(Debug, Clone, Copy)]
pub(super) enum ReadStart {
    /// The whole frame by this instant (a client awaiting an answer).
    By(Instant),
    /// A frame may start within `poll` (else [`FrameError::Idle`]), then must arrive whole
    /// within `within` of its first byte (a server awaiting requests).
    Idle { poll: Duration, within: Duration },
}

fn timed_out(e: &io::Error) -> bool {
    // Unix reports a receive timeout as `WouldBlock`, Windows as `TimedOut`.
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A socket timeout for what is left until `deadline`: at least a millisecond (a zero
/// timeout is refused by the socket, and means "none").
fn left(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then(|| left.max(Duration::from_millis(1)))
}

/// One `read` into `buf` that returns by `deadline`.
fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, FrameError> {
    loop {
        let timeout = left(deadline).ok_or(FrameError::TimedOut)?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(FrameError::Io)?;
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if timed_out(&e) => continue,
            Err(e) => return Err(FrameError::Io(e)),
            Ok(n) => return Ok(n),
        }
    }
}

/// Fills `buf` by `deadline`; the peer closing first is an error (a frame cut short).
fn fill_by(
    stream: &mut TcpStream,
    mut buf: &mut [u8],
    deadline: Instant,
) -> Result<(), FrameError> {
    while !buf.is_empty() {
        match read_by(stream, buf, deadline)? {
            0 => {
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection was closed in the middle of a message",
                )));
            }
            n => buf = &mut buf[n..],
        }
    }
    Ok(())
}

/// Reads one frame's body.
pub(super) fn read_frame(stream: &mut TcpStream, start: ReadStart) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; 8];
    let (first, deadline) = match start {
        ReadStart::By(deadline) => (read_by(stream, &mut header, deadline)?, deadline),
        ReadStart::Idle { poll, within } => {
            let polled = Instant::now() + poll;
            let n = match read_by(stream, &mut header, polled) {
                Err(FrameError::TimedOut) => return Err(FrameError::Idle),
                other => other?,
            };
            (n, Instant::now() + within)
        }
    };
    if first == 0 {
        return Err(FrameError::Closed);
    }
    fill_by(stream, &mut header[first..], deadline)?;
    let len = u64::from_le_bytes(header);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLong(len));
    }
    // Kept as it arrives, a chunk at a time: an announced length is not trusted with an
    // allocation of its size.
    let len = len as usize;
    let mut body = Vec::with_capacity(len.min(64 << 10));
    let mut chunk = vec![0u8; len.min(64 << 10)];
    while body.len() < len {
        let want = (len - body.len()).min(chunk.len());
        fill_by(stream, &mut chunk[..want], deadline)?;
        body.extend_from_slice(&chunk[..want]);
    }
    Ok(body)
}

/// Writes one frame by `deadline`.
pub(super) fn write_frame(
    stream: &mut TcpStream,
    body: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    let frame = [&(body.len() as u64).to_le_bytes()[..], body].concat();
    let mut rest = frame.as_slice();
    while !rest.is_empty() {
        let timeout = left(deadline)
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "sending timed out"))?;
        stream.set_write_timeout(Some(timeout))?;
        match stream.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted || timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_round_trip() {
        let requests = [
            Request::Hello { version: VERSION },
            Request::Set {
                key: b"a/b".to_vec(),
                value: vec![0, 1, 2],
            },
            Request::Set {
                key: Vec::new(),
                value: Vec::new(),
            },
            Request::Get { key: b"k".to_vec() },
            Request::Delete { key: b"k".to_vec() },
            Request::SetIfAbsent {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            },
            Request::Wait {
                key: b"k".to_vec(),
                timeout: Duration::from_micros(1234),
            },
        ];
        for request in requests {
            assert_eq!(Request::decode(&request.encode()), Ok(request));
        }
        let answers = [
            Response::Hello { version: 7 },
            Response::Done,
            Response::Value(vec![9; 3]),
            Response::Value(Vec::new()),
            Response::Absent,
            Response::Refused("why".into()),
        ];
        for answer in answers {
            assert_eq!(Response::decode(&answer.encode()), Ok(answer));
        }
    }

    #[test]
    fn malformed_messages_are_refused_not_trusted() {
        for bad in [
            &[][..],
            &[GET],
            &[GET, 5, 0, 0, 0, b'a'],
            &[GET, 0, 0, 0, 0, b'x'],
            &[WAIT, 0, 0, 0, 0, 1, 2],
            &[99, 0, 0, 0, 0],
            &[HELLO, 1, 2, 3],
            // A key length past the limit, with no key behind it.
            &[SET, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(Request::decode(bad).is_err(), "{bad:?}");
        }
        for bad in [&[][..], &[DONE, 0], &[ABSENT, 1], &[42], &[HELLO]] {
            assert!(Response::decode(bad).is_err(), "{bad:?}");
        }
    }
}
