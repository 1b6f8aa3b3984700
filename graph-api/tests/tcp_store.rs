//! `TcpStore` on loopback: values round-trip between ranks, `set_if_absent` has one winner,
//! waits end at their deadline, and every failure of a peer — a server that never comes,
//! one gone silent, one dropped, a peer announcing a huge message — is a typed error within
//! its timeout, never a hang. Then `LaunchEnv` choosing the store from the environment.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::Arc,
    time::{Duration, Instant},
};

use accel_graph_api::{
    GraphError,
    collective::{LaunchEnv, LaunchStore, Store, TcpStore, TcpStoreOptions},
};

const LOCAL: &str = "127.0.0.1";

fn options() -> TcpStoreOptions {
    TcpStoreOptions::new()
        .connect_timeout(Duration::from_secs(10))
        .io_timeout(Duration::from_secs(5))
        .linger(Duration::ZERO)
}

fn host() -> TcpStore {
    TcpStore::host((LOCAL, 0), &options()).unwrap()
}

fn client(host: &TcpStore) -> TcpStore {
    TcpStore::connect(LOCAL, host.port(), &options()).unwrap()
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind((LOCAL, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_unavailable(result: &accel_graph_api::Result<impl std::fmt::Debug>) -> bool {
    matches!(result, Err(GraphError::StoreUnavailable { .. }))
}

#[test]
fn values_round_trip_between_ranks() {
    let host = host();
    assert!(host.is_host());
    assert_eq!(host.listen_addr().unwrap().port(), host.port());
    let peer = client(&host);
    assert!(!peer.is_host());
    host.set("a/b", b"one").unwrap();
    assert_eq!(peer.get("a/b").unwrap(), Some(b"one".to_vec()));
    peer.set("a/b", b"two").unwrap();
    assert_eq!(host.get("a/b").unwrap(), Some(b"two".to_vec()));
    // Empty and binary values, a key of any characters, a value of a few MiB.
    peer.set("é/∑ key", &[]).unwrap();
    assert_eq!(host.get("é/∑ key").unwrap(), Some(Vec::new()));
    let big: Vec<u8> = (0..3 << 20).map(|i| (i * 7 % 251) as u8).collect();
    host.set("big", &big).unwrap();
    assert_eq!(peer.get("big").unwrap(), Some(big));
    peer.delete("a/b").unwrap();
    peer.delete("never set").unwrap();
    assert_eq!(host.get("a/b").unwrap(), None);
    assert_eq!(peer.set_if_absent("seat", b"mine").unwrap(), None);
    assert_eq!(
        host.set_if_absent("seat", b"yours").unwrap(),
        Some(b"mine".to_vec())
    );
    assert_eq!(host.get("seat").unwrap(), Some(b"mine".to_vec()));
}

/// Of many connections (and threads sharing one) claiming a key at once, exactly one sets
/// it, and every other one is told the winner's value.
#[test]
fn set_if_absent_has_one_winner_among_racing_ranks() {
    let host = host();
    let peers: Vec<TcpStore> = (0..6).map(|_| client(&host)).collect();
    let shared = Arc::new(client(&host));
    for round in 0..20 {
        let key = format!("claim/{round}");
        let results: Vec<Option<Vec<u8>>> = std::thread::scope(|s| {
            let mut handles: Vec<_> = peers
                .iter()
                .enumerate()
                .map(|(t, peer)| {
                    let key = &key;
                    s.spawn(move || peer.set_if_absent(key, &[t as u8]).unwrap())
                })
                .collect();
            for t in 6..9u8 {
                let (shared, key) = (Arc::clone(&shared), &key);
                handles.push(s.spawn(move || shared.set_if_absent(key, &[t]).unwrap()));
            }
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..results.len())
            .filter(|&t| results[t].is_none())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let held = vec![winners[0] as u8];
        assert_eq!(host.get(&key).unwrap(), Some(held.clone()));
        for (t, r) in results.iter().enumerate() {
            if t != winners[0] {
                assert_eq!(r.as_ref(), Some(&held), "round {round}");
            }
        }
    }
}

#[test]
fn a_wait_returns_at_its_deadline_or_when_the_key_is_set() {
    let host = host();
    let peer = client(&host);
    let started = Instant::now();
    let deadline = started + Duration::from_millis(300);
    assert_eq!(peer.wait("missing", deadline).unwrap(), None);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    // A deadline already past looks once.
    let started = Instant::now();
    assert_eq!(peer.wait("missing", started).unwrap(), None);
    assert!(started.elapsed() < Duration::from_millis(500));
    // A waiter wakes when another rank sets the key, long before its deadline.
    let started = Instant::now();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            host.set("late", b"here").unwrap();
        });
        peer.wait("late", started + Duration::from_secs(20))
            .unwrap()
    });
    assert_eq!(got, Some(b"here".to_vec()));
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A long wait does not keep a rank's other threads from the connection.
#[test]
fn a_waiting_thread_leaves_the_connection_to_the_others() {
    let host = host();
    let shared = Arc::new(client(&host));
    std::thread::scope(|s| {
        let waiter = {
            let shared = Arc::clone(&shared);
            s.spawn(move || shared.wait("never", Instant::now() + Duration::from_secs(2)))
        };
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..5 {
            let started = Instant::now();
            shared.set(&format!("k{i}"), b"v").unwrap();
            assert!(
                started.elapsed() < Duration::from_millis(600),
                "{:?}",
                started.elapsed()
            );
        }
        assert_eq!(waiter.join().unwrap().unwrap(), None);
    });
}

#[test]
fn oversized_keys_and_values_are_refused_before_they_are_sent() {
    let host = host();
    let peer = client(&host);
    let value = vec![0u8; TcpStore::MAX_VALUE_BYTES + 1];
    assert!(matches!(
        peer.set("k", &value),
        Err(GraphError::ArgumentMismatch(m)) if m.contains("value")
    ));
    let key = "k".repeat(TcpStore::MAX_KEY_BYTES + 1);
    assert!(matches!(
        peer.get(&key),
        Err(GraphError::ArgumentMismatch(m)) if m.contains("key")
    ));
    // The connection is still good.
    peer.set("k", b"v").unwrap();
    assert_eq!(host.get("k").unwrap(), Some(b"v".to_vec()));
}

/// A peer announcing a 2^60-byte message is cut off without the server reading (or
/// allocating) it, and the server goes on serving the others.
#[test]
fn a_client_announcing_a_huge_message_is_cut_off() {
    let host = host();
    let mut hostile = TcpStream::connect((LOCAL, host.port())).unwrap();
    hostile
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    hostile.write_all(&(1u64 << 60).to_le_bytes()).unwrap();
    let mut buf = [0u8; 16];
    // Closed: end of stream, or a reset.
    match hostile.read(&mut buf) {
        Ok(0) => {}
        Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
        Ok(n) => panic!("the server answered {n} bytes"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    let peer = client(&host);
    peer.set("still", b"serving").unwrap();
    assert_eq!(host.get("still").unwrap(), Some(b"serving".to_vec()));
}

/// Reads one frame (`u64` length, body) from `stream`.
fn read_frame(stream: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 8];
    stream.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
    stream.read_exact(&mut body).unwrap();
    body
}

/// A fake server that echoes the greeting (as a store does), then answers the first request
/// with a 2^60-byte length: the client refuses it at once, typed, and the connection is
/// not used again.
#[test]
fn a_server_announcing_a_huge_answer_is_an_error() {
    let listener = TcpListener::bind((LOCAL, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let hello = read_frame(&mut stream);
        stream
            .write_all(&(hello.len() as u64).to_le_bytes())
            .unwrap();
        stream.write_all(&hello).unwrap();
        read_frame(&mut stream);
        stream.write_all(&(1u64 << 60).to_le_bytes()).unwrap();
        // Keep the connection open until the client gives up.
        let _ = stream.read(&mut [0u8; 1]);
    });
    let peer = TcpStore::connect(LOCAL, port, &options()).unwrap();
    let started = Instant::now();
    let got = peer.get("k");
    assert!(
        matches!(&got, Err(GraphError::StoreUnavailable { reason, .. }) if reason.contains("bytes")),
        "{got:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Broken for good: the next request fails at once, saying why.
    let again = peer.set("k", b"v");
    assert!(
        matches!(&again, Err(GraphError::StoreUnavailable { reason, .. }) if reason.contains("earlier")),
        "{again:?}"
    );
    drop(peer);
    fake.join().unwrap();
}

/// A server that accepts but never answers (another protocol, a hung process) is an error
/// within the I/O timeout.
#[test]
fn a_silent_server_is_an_error_within_the_io_timeout() {
    let listener = TcpListener::bind((LOCAL, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let _ = stream.read(&mut [0u8; 64]);
        let _ = stream.read(&mut [0u8; 1]);
    });
    let started = Instant::now();
    let options = options().io_timeout(Duration::from_millis(300));
    let got = TcpStore::connect(LOCAL, port, &options);
    assert!(
        matches!(&got, Err(GraphError::StoreUnavailable { reason, .. }) if reason.contains("accel-graph store")),
        "{got:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    fake.join().unwrap();
}

#[test]
fn no_server_is_an_error_at_the_connect_timeout() {
    let port = free_port();
    let started = Instant::now();
    let options = options().connect_timeout(Duration::from_millis(500));
    let got = TcpStore::connect(LOCAL, port, &options);
    assert!(is_unavailable(&got), "{got:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

/// Rank 0 may come last: the others keep trying until it listens.
#[test]
fn ranks_started_before_the_server_connect_once_it_listens() {
    let port = free_port();
    let early = std::thread::spawn(move || TcpStore::connect(LOCAL, port, &options()));
    std::thread::sleep(Duration::from_millis(300));
    let host = TcpStore::host((LOCAL, port), &options()).unwrap();
    let early = early.join().unwrap().unwrap();
    early.set("k", b"v").unwrap();
    assert_eq!(host.get("k").unwrap(), Some(b"v".to_vec()));
    // The port is taken now: a second host is refused, typed.
    let again = TcpStore::host((LOCAL, port), &options());
    assert!(
        matches!(&again, Err(GraphError::StoreUnavailable { reason, .. }) if reason.contains("ACCEL_GRAPH_MASTER_PORT")),
        "{again:?}"
    );
}

/// Dropping rank 0's store (no linger) fails a rank waiting on it at once and every request
/// after; the server's threads are gone (its port refuses connections).
#[test]
fn dropping_the_host_fails_the_other_ranks_at_once() {
    let host = host();
    let port = host.port();
    let peer = client(&host);
    let started = Instant::now();
    let got = std::thread::scope(|s| {
        let waiter = s.spawn(|| peer.wait("never", Instant::now() + Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(100));
        drop(host);
        waiter.join().unwrap()
    });
    assert!(is_unavailable(&got), "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(is_unavailable(&peer.get("k")));
    // The acceptor owned the listening socket: refused connections mean it has ended.
    assert!(TcpStream::connect((LOCAL, port)).is_err());
}

/// A dropped host keeps serving the ranks still connected (they may be reading the last
/// meeting's values) until they disconnect.
#[test]
fn the_host_lingers_until_the_other_ranks_disconnect() {
    let host = TcpStore::host((LOCAL, 0), &options().linger(Duration::from_secs(20))).unwrap();
    let peer = client(&host);
    host.set("last", b"value").unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        let dropping = s.spawn(move || {
            drop(host);
            Instant::now()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!dropping.is_finished());
        assert_eq!(peer.get("last").unwrap(), Some(b"value".to_vec()));
        let disconnected = Instant::now();
        drop(peer);
        let dropped = dropping.join().unwrap();
        assert!(dropped >= disconnected);
        assert!(dropped - disconnected < Duration::from_secs(2));
    });
    assert!(started.elapsed() < Duration::from_secs(5));
}

fn vars(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[test]
fn launch_env_meets_over_tcp_when_master_addr_and_port_are_set() {
    let port = free_port();
    let env = |rank: usize| {
        LaunchEnv::from_vars(vars(&[
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("LOCAL_WORLD_SIZE", "2".into()),
            ("MASTER_ADDR", LOCAL.into()),
            ("MASTER_PORT", port.to_string()),
        ]))
        .unwrap()
    };
    let (zero, one) = (env(0), env(1));
    assert_eq!(one.local_world_size, Some(2));
    assert_eq!(one.master_addr.as_deref(), Some(LOCAL));
    assert_eq!((one.master_port, one.store_dir.clone()), (Some(port), None));
    let hosting = match zero.store().unwrap() {
        LaunchStore::Tcp(store) => store,
        other => panic!("{other:?}"),
    };
    assert!(hosting.is_host());
    // Rank 0 listens on loopback only: MASTER_ADDR is a loopback address.
    assert!(hosting.listen_addr().unwrap().ip().is_loopback());
    let joined = one.store().unwrap();
    assert!(matches!(&joined, LaunchStore::Tcp(s) if !s.is_host()));
    joined.set("k", b"v").unwrap();
    assert_eq!(hosting.get("k").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn launch_env_prefers_a_shared_directory_and_names_what_is_missing() {
    let base = [("RANK", "0".to_string()), ("WORLD_SIZE", "2".to_string())];
    let with = |extra: &[(&str, String)]| {
        let all: Vec<(&str, String)> = base.iter().cloned().chain(extra.iter().cloned()).collect();
        LaunchEnv::from_vars(vars(&all))
    };
    let message = |extra: &[(&str, String)]| match with(extra) {
        Err(GraphError::ArgumentMismatch(m)) => m,
        other => panic!("{extra:?}: {other:?}"),
    };
    // ACCEL_GRAPH_STORE wins over MASTER_* (set by torchrun whatever the store).
    let dir = std::env::temp_dir().join(format!("accel-graph-launch-{}", std::process::id()));
    let env = with(&[
        ("ACCEL_GRAPH_STORE", dir.display().to_string()),
        ("MASTER_ADDR", LOCAL.into()),
        ("MASTER_PORT", "29500".into()),
        ("TORCHELASTIC_USE_AGENT_STORE", "True".into()),
    ])
    .unwrap();
    assert!(matches!(env.store().unwrap(), LaunchStore::File(_)));
    std::fs::remove_dir_all(&dir).unwrap();
    // Nothing, or half of MASTER_ADDR/MASTER_PORT: the error names the variables.
    let none = message(&[]);
    assert!(
        none.contains("MASTER_ADDR") && none.contains("ACCEL_GRAPH_STORE"),
        "{none}"
    );
    assert!(message(&[("MASTER_ADDR", LOCAL.into())]).contains("MASTER_PORT is not set"));
    assert!(message(&[("MASTER_PORT", "29500".into())]).contains("MASTER_ADDR is not set"));
    for bad in ["0", "65536", "http"] {
        let m = message(&[("MASTER_ADDR", LOCAL.into()), ("MASTER_PORT", bad.into())]);
        assert!(m.contains("MASTER_PORT") && m.contains("not a port"), "{m}");
    }
    // torchrun's agent holds MASTER_PORT: accel-graph needs a port of its own.
    let torchrun = [
        ("MASTER_ADDR", "node-0".to_string()),
        ("MASTER_PORT", "29500".to_string()),
        ("TORCHELASTIC_USE_AGENT_STORE", "True".to_string()),
    ];
    assert!(message(&torchrun).contains("ACCEL_GRAPH_MASTER_PORT"));
    let mut own = torchrun.to_vec();
    own.push(("ACCEL_GRAPH_MASTER_PORT", "29501".into()));
    assert_eq!(with(&own).unwrap().master_port, Some(29501));
    assert!(
        message(&[
            ("LOCAL_RANK", "4".into()),
            ("LOCAL_WORLD_SIZE", "4".into()),
            ("ACCEL_GRAPH_STORE", "/tmp/x".into())
        ])
        .contains("LOCAL_WORLD_SIZE")
    );
}
