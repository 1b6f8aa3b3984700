//! Ranks meeting through rank 0's `TcpStore` on loopback, as `env://` launchers start them
//! (`MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`), sharing no directory.
//!
//! * **Ranks as threads, one connection each**: the mock's communicators over the TCP store —
//!   eager `all_reduce` and `all_gather`, a captured `all_reduce` replayed, a capture
//!   mismatch found through the store, a rank that never joins. (The mock's collectives
//!   exchange their data in memory, so its ranks must share a process; the store carries
//!   only the meetings.)
//! * **Ranks as processes** (this test binary, started again as each rank): the meetings a
//!   communicator holds through the store — the id from rank 0, exchanges, barriers, the
//!   comparison of captures, abort announcements — for worlds of 2 and 4, and what the
//!   others see when a rank never comes, when a rank is killed, and when rank 0 (the
//!   store's host) is killed: a typed error within the timeout, never a hang. The parent
//!   kills every rank still running after its deadline and fails.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::{Arc, mpsc},
    time::{Duration, Instant},
};

use accel_graph_api::{
    CaptureErrorMode, GraphError, GraphOptions, Result,
    collective::{
        Collective, CollectiveSignature, CommDType, CommOptions, Communicator, ControlPlane,
        LaunchEnv, LaunchStore, ReduceOp, TcpStoreOptions,
    },
    prelude::*,
};
use accel_graph_mock::MockBackend;

const LOCAL: &str = "127.0.0.1";
/// The variable telling a started copy of this binary which scenario it runs as a rank.
const SCENARIO_ENV: &str = "ACCEL_GRAPH_TCP_TEST_SCENARIO";

/// A port nothing listens on (bound, then released), for rank 0 to host the store on.
fn free_port() -> u16 {
    TcpListener::bind((LOCAL, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The environment an `env://` launcher gives rank `rank`.
fn launch_vars(rank: usize, world: usize, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", world.to_string()),
        ("MASTER_ADDR", LOCAL.to_owned()),
        ("MASTER_PORT", port.to_string()),
    ]
}

fn launch_env(rank: usize, world: usize, port: u16) -> LaunchEnv {
    let vars = launch_vars(rank, world, port);
    LaunchEnv::from_vars(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    })
    .unwrap()
}

/// Runs `body(rank, backend, env)` on `world` threads, rank 0 hosting the store.
fn thread_ranks<T: Send>(
    world: usize,
    body: impl Fn(usize, MockBackend, LaunchEnv) -> T + Sync,
) -> Vec<T> {
    let port = free_port();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let body = &body;
                s.spawn(move || body(rank, MockBackend::new(), launch_env(rank, world, port)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn collectives_over_tcp(world: usize) {
    let results = thread_ranks(world, |rank, b, env| -> Result<()> {
        let options = CommOptions::new().timeout(Duration::from_secs(20));
        let comm = env.communicator(&b, options)?;
        assert_eq!((comm.rank(), comm.world_size()), (rank, world));
        let n = world as f32;
        // Eager all_reduce: 1 + 2 + ... + world.
        let x = b.alloc_from(&[rank as f32 + 1.0; 4])?;
        comm.all_reduce(&x, ReduceOp::Sum)?;
        assert_eq!(b.download(&x)?, vec![n * (n + 1.0) / 2.0; 4]);
        // Eager all_gather, in rank order.
        let mine = b.alloc_from(&[rank as f32, -(rank as f32)])?;
        let all = b.alloc::<f32>(2 * world)?;
        comm.all_gather(&mine, &all)?;
        let expected: Vec<f32> = (0..world).flat_map(|r| [r as f32, -(r as f32)]).collect();
        assert_eq!(b.download(&all)?, expected);
        // Captured (the ranks' sequences compared through the store), then replayed.
        let y = b.alloc_from(&[rank as f32; 3])?;
        let stream = b.new_stream()?;
        let mut graph =
            b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
        b.capture_on(&stream, &mut graph, || comm.all_reduce(&y, ReduceOp::Max))?;
        assert_eq!(b.download(&y)?, vec![rank as f32; 3], "captured, not run");
        comm.barrier()?;
        graph.replay()?;
        assert_eq!(b.download(&y)?, vec![n - 1.0; 3]);
        b.upload(&y, &[rank as f32 * 2.0; 3])?;
        graph.replay()?;
        assert_eq!(b.download(&y)?, vec![(n - 1.0) * 2.0; 3]);
        comm.barrier()
    });
    for (rank, result) in results.into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("rank {rank} of {world}: {e}"));
    }
}

#[test]
fn collectives_over_tcp_with_two_ranks() {
    collectives_over_tcp(2);
}

#[test]
fn collectives_over_tcp_with_four_ranks() {
    collectives_over_tcp(4);
}

#[test]
fn a_capture_mismatch_is_found_through_the_tcp_store() {
    let results = thread_ranks(3, |rank, b, env| -> Result<GraphError> {
        let comm = env.communicator(&b, CommOptions::new().timeout(Duration::from_secs(20)))?;
        // Rank 2 captures one element more.
        let x = b.alloc_from(&vec![1.0f32; 4 + usize::from(rank == 2)])?;
        let stream = b.new_stream()?;
        let mut graph =
            b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
        let err = b
            .capture_on(&stream, &mut graph, || comm.all_reduce(&x, ReduceOp::Sum))
            .unwrap_err();
        // The communicator goes on: nothing captured ran.
        let y = b.alloc_from(&[1.0f32; 2])?;
        comm.all_reduce(&y, ReduceOp::Sum)?;
        assert_eq!(b.download(&y)?, vec![3.0; 2]);
        Ok(err)
    });
    for (rank, result) in results.into_iter().enumerate() {
        match result {
            Ok(GraphError::CollectiveMismatch { message, .. }) => {
                assert!(message.contains("5 x f32"), "rank {rank}: {message}")
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
}

#[test]
fn a_rank_that_never_joins_times_out_over_tcp() {
    let port = free_port();
    let started = Instant::now();
    let results: Vec<Result<Communicator<MockBackend>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                s.spawn(move || {
                    let b = MockBackend::new();
                    // A world of 3: rank 2 never comes.
                    let options = CommOptions::new().timeout(Duration::from_millis(800));
                    launch_env(rank, 3, port).communicator(&b, options)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        match result {
            Err(GraphError::CommTimeout { missing, .. }) => assert_eq!(missing, vec![2]),
            other => panic!("{other:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---- Ranks as processes ----

/// The rank processes of one test, killed when dropped (a failing test leaves none behind).
struct Processes {
    children: Vec<(usize, Child)>,
    lines: mpsc::Receiver<(usize, String)>,
    /// Every line so far, for failure messages.
    seen: Vec<(usize, String)>,
}

impl Processes {
    /// Starts `ranks` of a world of `world` as copies of this test binary running `scenario`.
    fn start(scenario: &str, world: usize, ranks: &[usize]) -> Self {
        let exe = std::env::current_exe().unwrap();
        let port = free_port();
        let (send, lines) = mpsc::channel();
        let mut children = Vec::new();
        for &rank in ranks {
            let mut command = Command::new(&exe);
            command
                .args(["rank_process", "--exact", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(SCENARIO_ENV, scenario)
                .env_remove(LaunchEnv::STORE_ENV)
                .env_remove(LaunchEnv::STORE_PORT_ENV)
                .env_remove(LaunchEnv::TORCHRUN_AGENT_STORE_ENV)
                .env_remove("ACCEL_GRAPH_COMM_ID")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (name, value) in launch_vars(rank, world, port) {
                command.env(name, value);
            }
            let mut child = command.spawn().unwrap();
            for pipe in [
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            ]
            .into_iter()
            .flatten()
            {
                let send = send.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(pipe).lines().map_while(|l| l.ok()) {
                        let _ = send.send((rank, line));
                    }
                });
            }
            children.push((rank, child));
        }
        Processes {
            children,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (until `deadline`) for a line of `rank` holding `prefix`; returns it from there.
    fn wait_line(&mut self, rank: usize, prefix: &str, deadline: Instant) -> String {
        // The test harness may print its own text before the rank's.
        let holding = |(r, line): &(usize, String)| {
            line.find(prefix)
                .filter(|_| *r == rank)
                .map(|at| line[at..].to_owned())
        };
        if let Some(line) = self.seen.iter().find_map(holding) {
            return line;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = holding(&line);
                    self.seen.push(line);
                    if let Some(found) = found {
                        return found;
                    }
                }
                Err(_) => panic!(
                    "rank {rank} printed no line starting with {prefix:?} in time: {:#?}",
                    self.seen
                ),
            }
        }
    }

    fn kill(&mut self, rank: usize) {
        for (r, child) in &mut self.children {
            if *r == rank {
                child.kill().unwrap();
                child.wait().unwrap();
            }
        }
    }

    /// Waits for every rank still running to exit, at most until `deadline` (then kills them
    /// and fails); returns each rank's outcome line (`OUTCOME ...`).
    fn outcomes(mut self, deadline: Instant) -> Vec<(usize, String)> {
        let ranks: Vec<usize> = self
            .children
            .iter_mut()
            .filter_map(|(r, c)| c.try_wait().unwrap().is_none().then_some(*r))
            .collect();
        let outcomes: Vec<(usize, String)> = ranks
            .iter()
            .map(|&r| (r, self.wait_line(r, "OUTCOME", deadline)))
            .collect();
        for (rank, child) in &mut self.children {
            if !ranks.contains(rank) {
                continue;
            }
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(status.success(), "rank {rank}: {status}: {:#?}", self.seen);
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "rank {rank} did not exit in time: {:#?}",
                    self.seen
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        outcomes
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A rank's part in the process scenarios; prints `OUTCOME ok` or `OUTCOME <error>`.
#[test]
#[ignore = "a rank process, started by the other tests of this file"]
fn rank_process() {
    let Ok(scenario) = std::env::var(SCENARIO_ENV) else {
        return;
    };
    let env = LaunchEnv::from_env().unwrap();
    let store = env
        .store_with(
            &TcpStoreOptions::new()
                .connect_timeout(Duration::from_secs(10))
                .linger(Duration::from_secs(5)),
        )
        .unwrap();
    assert!(matches!(&store, LaunchStore::Tcp(s) if s.is_host() == (env.rank == 0)));
    let (rank, world) = (env.rank, env.world_size);
    let timeout = match scenario.as_str() {
        "meet" => Duration::from_secs(20),
        _ => Duration::from_millis(1500),
    };
    let control = ControlPlane::new(Arc::new(store), "procs", rank, world, timeout).unwrap();
    let outcome = match scenario.as_str() {
        "meet" => meet(&control),
        // Barriers until one fails (a rank missing, or the store gone).
        _ => (0..400)
            .try_for_each(|round| {
                control.barrier("tick")?;
                println!("MET {round}");
                std::thread::sleep(Duration::from_millis(20));
                Ok(())
            })
            .map(|()| "no failure in 400 rounds".to_owned()),
    };
    match outcome {
        Ok(what) => println!("OUTCOME ok {what}"),
        Err(GraphError::CommTimeout {
            missing, waited_ms, ..
        }) => println!("OUTCOME CommTimeout missing={missing:?} waited_ms={waited_ms}"),
        Err(e @ GraphError::StoreUnavailable { .. }) => println!("OUTCOME StoreUnavailable {e}"),
        Err(e) => println!("OUTCOME other {e:?}"),
    }
}

fn sig(count: usize) -> CollectiveSignature {
    CollectiveSignature {
        collective: Collective::AllReduce(ReduceOp::Sum),
        dtype: CommDType::F32,
        count,
    }
}

/// Everything a communicator's ranks say to each other through the store.
fn meet(control: &ControlPlane) -> Result<String> {
    let (rank, world) = (control.rank(), control.world_size());
    // The communicator's id: made by rank 0 (a mock id), read by the others.
    let id = control.share_id(|| Communicator::unique_id(&MockBackend::new()))?;
    let ids = control.exchange("id-check", id.as_bytes())?;
    assert!(ids.iter().all(|other| other == id.as_bytes()));
    // Exchanges: every rank's value, in rank order, several rounds.
    for round in 0..5u8 {
        let values = control.exchange("values", &[rank as u8, round])?;
        let expected: Vec<Vec<u8>> = (0..world).map(|r| vec![r as u8, round]).collect();
        assert_eq!(values, expected);
        control.barrier("b")?;
    }
    // Captures compared: equal ones pass, a difference fails on every rank.
    control.check_capture(&[sig(4), sig(8)])?;
    let count = if rank == world - 1 { 9 } else { 8 };
    match control.check_capture(&[sig(4), sig(count)]) {
        Err(GraphError::CollectiveMismatch { message, .. }) => {
            assert!(message.contains("collective #1"), "{message}")
        }
        other => panic!("rank {rank}: a capture mismatch passed: {other:?}"),
    }
    // An abort is announced through the store; the others read it.
    if rank == world - 1 {
        control.announce_abort("test abort")?;
    }
    control.barrier("after-abort")?;
    let aborted = control.aborted_peer()?;
    if rank == world - 1 {
        assert_eq!(aborted, None);
    } else {
        assert_eq!(aborted, Some((world - 1, "test abort".to_owned())));
    }
    control.barrier("done")?;
    Ok(format!("rank {rank} of {world}"))
}

fn ranks_as_processes_meet(world: usize) {
    let started = Instant::now();
    let ranks: Vec<usize> = (0..world).collect();
    let processes = Processes::start("meet", world, &ranks);
    for (rank, outcome) in processes.outcomes(started + Duration::from_secs(30)) {
        assert_eq!(outcome, format!("OUTCOME ok rank {rank} of {world}"));
    }
}

#[test]
fn two_ranks_as_processes_meet_through_tcp() {
    ranks_as_processes_meet(2);
}

#[test]
fn four_ranks_as_processes_meet_through_tcp() {
    ranks_as_processes_meet(4);
}

fn waited_ms(outcome: &str) -> u64 {
    outcome
        .rsplit("waited_ms=")
        .next()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{outcome}"))
}

#[test]
fn a_rank_process_that_never_comes_times_out_the_others() {
    let started = Instant::now();
    // A world of 3 without rank 2.
    let processes = Processes::start("ticks", 3, &[0, 1]);
    for (rank, outcome) in processes.outcomes(started + Duration::from_secs(20)) {
        assert!(
            outcome.starts_with("OUTCOME CommTimeout missing=[2]"),
            "rank {rank}: {outcome}"
        );
        let waited = waited_ms(&outcome);
        assert!((1500..5000).contains(&waited), "rank {rank}: {outcome}");
    }
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_rank_process_killed_mid_run_times_out_the_others() {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let mut processes = Processes::start("ticks", 3, &[0, 1, 2]);
    processes.wait_line(2, "MET 3", deadline);
    processes.kill(2);
    let killed = Instant::now();
    for (rank, outcome) in processes.outcomes(deadline) {
        assert!(
            outcome.starts_with("OUTCOME CommTimeout missing=[2]"),
            "rank {rank}: {outcome}"
        );
        assert!(waited_ms(&outcome) < 5000, "rank {rank}: {outcome}");
    }
    // The meeting's timeout (1.5 s) after the kill, give or take a round.
    assert!(killed.elapsed() < Duration::from_secs(6));
}

#[test]
fn killing_the_rank_hosting_the_store_fails_the_others_at_once() {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let mut processes = Processes::start("ticks", 3, &[0, 1, 2]);
    processes.wait_line(0, "MET 3", deadline);
    processes.kill(0);
    let killed = Instant::now();
    for (rank, outcome) in processes.outcomes(deadline) {
        assert!(
            outcome.starts_with("OUTCOME StoreUnavailable"),
            "rank {rank}: {outcome}"
        );
    }
    // Well within the meeting's timeout: the connection closes with the process.
    assert!(
        killed.elapsed() < Duration::from_millis(1500),
        "{:?}",
        killed.elapsed()
    );
}
