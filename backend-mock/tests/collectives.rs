//! The mock's collectives beyond the generic cases (conformance §17): what only a simulation
//! can report (eager mismatches, a replay a peer never joins), the capture-mode rule for
//! ranks sharing a capture domain, nodes and the race sanitizer, and ranks meeting through a
//! directory as processes would.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, DeviceBuffer, GraphError, GraphOptions, NodeKind,
    PortableOps, Result, View,
    backend_kit::{CollectiveCall, CommView},
    collective::{
        Collective, CollectiveSignature, CommDType, CommOptions, Communicator, ControlPlane,
        FileStore, MAX_WORLD_SIZE, MemoryStore, ReduceOp, Store,
    },
};
use accel_graph_mock::{MockBackend, MockConfig};

/// Runs `body(rank, backend)` on `world` threads, one mock instance each (made by `open`), and
/// returns their results in rank order.
fn ranks<T: Send>(
    world: usize,
    open: impl Fn(usize) -> MockBackend + Sync,
    body: impl Fn(usize, MockBackend) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let (open, body) = (&open, &body);
                s.spawn(move || body(rank, open(rank)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn comm(
    b: &MockBackend,
    store: impl Store + 'static,
    rank: usize,
    world: usize,
    timeout: Duration,
) -> Result<Communicator<MockBackend>> {
    Communicator::with_options(b, store, rank, world, CommOptions::new().timeout(timeout))
}

#[test]
fn eager_collectives_that_differ_are_reported_and_the_communicator_goes_on() {
    let store = MemoryStore::new();
    let results = ranks(
        2,
        |_| MockBackend::new(),
        |rank, b| -> Result<(GraphError, Vec<f32>)> {
            let comm = comm(&b, store.clone(), rank, 2, Duration::from_secs(10))?;
            // On a GPU the ranks would hang: rank 1 sends one element more.
            let x = b.alloc_from(&vec![1.0f32; 4 + rank])?;
            let err = comm.all_reduce(&x, ReduceOp::Sum).unwrap_err();
            assert_eq!(b.download(&x)?, vec![1.0; 4 + rank], "nothing was written");
            let y = b.alloc_from(&[rank as f32; 3])?;
            comm.all_reduce(&y, ReduceOp::Sum)?;
            Ok((err, b.download(&y)?))
        },
    );
    for (rank, result) in results.into_iter().enumerate() {
        let (err, after) = result.unwrap();
        match err {
            GraphError::CollectiveMismatch {
                rank: r, message, ..
            } => {
                assert_eq!(r, rank);
                assert!(
                    message.contains("4 x f32") && message.contains("5 x f32"),
                    "{message}"
                );
            }
            other => panic!("rank {rank}: {other:?}"),
        }
        assert_eq!(after, vec![1.0; 3]);
    }
}

#[test]
fn ranks_sharing_a_capture_domain_must_capture_thread_local() {
    // Both instances on simulated device 4242 model two CUDA ranks in one process: CUDA's
    // capture domain spans the process.
    let store = MemoryStore::new();
    let results = ranks(
        2,
        |_| MockBackend::with_config(MockConfig::shared(4242)).unwrap(),
        |rank, b| -> Result<(Option<GraphError>, Vec<f32>)> {
            // Everything a rank allocates comes before either rank captures: an allocation while
            // the other thread holds a global capture is itself refused.
            let x = b.alloc_from(&[rank as f32 + 1.0; 2])?;
            let stream = b.new_stream()?;
            let mut global =
                b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::Global))?;
            let mut local =
                b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
            let comm = comm(&b, store.clone(), rank, 2, Duration::from_secs(10))?;
            comm.barrier()?; // both ranks are done setting up, communicator included
            // Refused before anything is recorded or compared: the body's error discards it.
            let refused = b
                .capture_on(&stream, &mut global, || comm.all_reduce(&x, ReduceOp::Sum))
                .err();
            comm.barrier()?; // neither rank captures while the other is still in its global one
            b.capture_on(&stream, &mut local, || comm.all_reduce(&x, ReduceOp::Sum))?;
            comm.barrier()?;
            local.replay()?;
            Ok((refused, b.download(&x)?))
        },
    );
    for result in results {
        let (refused, x) = result.unwrap();
        assert!(
            matches!(
                refused,
                Some(GraphError::CollectiveCaptureMode { ranks: 2, .. })
            ),
            "{refused:?}"
        );
        assert_eq!(x, vec![3.0; 2]);
    }
}

#[test]
fn one_rank_in_its_capture_domain_may_capture_global() {
    let b = MockBackend::with_config(MockConfig::shared(4243)).unwrap();
    let comm = comm(&b, MemoryStore::new(), 0, 1, Duration::from_secs(10)).unwrap();
    let x = b.alloc_from(&[2.0f32; 3]).unwrap();
    let stream = b.new_stream().unwrap();
    let mut graph = b
        .graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::Global))
        .unwrap();
    b.capture_on(&stream, &mut graph, || comm.all_reduce(&x, ReduceOp::Max))
        .unwrap();
    graph.replay().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![2.0; 3]);
}

#[test]
fn a_replay_no_peer_joins_times_out_and_the_communicator_is_unusable() {
    let store = MemoryStore::new();
    let results = ranks(
        2,
        |_| MockBackend::new(),
        |rank, b| -> Result<Option<GraphError>> {
            let comm = comm(&b, store.clone(), rank, 2, Duration::from_millis(300))?;
            let x = b.alloc_from(&[1.0f32; 2])?;
            let stream = b.new_stream()?;
            let mut graph =
                b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
            b.capture_on(&stream, &mut graph, || comm.all_reduce(&x, ReduceOp::Sum))?;
            graph.replay()?;
            if rank == 1 {
                return Ok(None); // rank 1 stops replaying
            }
            let started = Instant::now();
            let err = graph.replay().unwrap_err();
            assert!(started.elapsed() < Duration::from_secs(5));
            assert!(matches!(
                comm.check_usable(),
                Err(GraphError::CommUnusable { .. })
            ));
            assert!(matches!(
                comm.all_reduce(&x, ReduceOp::Sum),
                Err(GraphError::CommUnusable { .. })
            ));
            Ok(Some(err))
        },
    );
    match &results[0] {
        Ok(Some(GraphError::CommTimeout {
            missing, operation, ..
        })) => {
            assert_eq!(missing, &vec![1]);
            assert!(operation.starts_with("all_reduce"), "{operation}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(results[1], Ok(None)));
}

#[test]
fn a_captured_collective_is_a_kernel_node_and_races_are_seen() {
    let b = MockBackend::new();
    let comm = comm(&b, MemoryStore::new(), 0, 1, Duration::from_secs(10)).unwrap();
    let x = b.alloc_from(&[1.0f32; 4]).unwrap();
    let stream = b.new_stream().unwrap();
    let mut graph = b.graph(GraphOptions::new().keep_graph(true)).unwrap();
    b.capture_on(&stream, &mut graph, || {
        b.add_scalar(&x, 1.0)?;
        comm.all_reduce(&x, ReduceOp::Sum)
    })
    .unwrap();
    let nodes = graph.nodes().unwrap();
    assert_eq!(nodes.count(NodeKind::Kernel), 2);
    assert!(nodes.is_chain());
    let labels = graph.raw_graph().unwrap().labels();
    assert!(
        labels[1].starts_with("all_reduce(sum) of 4 x f32 (communicator world, rank 0 of 1)"),
        "{labels:?}"
    );
    // Eagerly on two streams with nothing ordering them, a collective races like any op.
    let (one, two) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    {
        let _on = b.use_stream(&one).unwrap();
        comm.all_reduce(&x, ReduceOp::Sum).unwrap();
    }
    let _on = b.use_stream(&two).unwrap();
    let raced = b.scale(&x, 2.0);
    assert!(
        matches!(raced, Err(GraphError::DataRace { .. })),
        "{raced:?}"
    );
}

#[test]
fn joining_during_a_global_capture_is_an_unsafe_call() {
    let b = MockBackend::new();
    let stream = b.new_stream().unwrap();
    let mut graph = b.graph(GraphOptions::new()).unwrap();
    let _on = b.use_stream(&stream).unwrap();
    graph.capture_begin().unwrap();
    let joined = Communicator::new(&b, MemoryStore::new(), 0, 1);
    assert!(
        matches!(joined, Err(GraphError::UnsafeDuringCapture { .. })),
        "{joined:?}"
    );
    // The refused call invalidated the capture, as any unsafe call does.
    assert!(matches!(
        graph.capture_end(),
        Err(GraphError::CaptureInvalidated { .. })
    ));
}

#[test]
fn ranks_meet_through_a_directory_as_processes_do() {
    let dir = std::env::temp_dir().join(format!(
        "accel-graph-mock-filestore-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let results = ranks(
        3,
        |_| MockBackend::new(),
        |rank, b| -> Result<Vec<f32>> {
            // Each rank opens the directory itself, as a process would.
            let store = FileStore::new(&dir)?;
            let comm = Arc::new(comm(&b, store, rank, 3, Duration::from_secs(20))?);
            let x = b.alloc_from(&[rank as f32; 2])?;
            let stream = b.new_stream()?;
            let mut graph =
                b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
            b.capture_on(&stream, &mut graph, || comm.all_reduce(&x, ReduceOp::Sum))?;
            comm.barrier()?;
            graph.replay()?;
            b.download(&x)
        },
    );
    for r in results {
        assert_eq!(r.unwrap(), vec![3.0; 2]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_capture_invalidated_on_one_rank_is_discarded_on_every_rank() {
    let store = MemoryStore::new();
    let results = ranks(
        2,
        |_| MockBackend::new(),
        |rank, b| -> Result<GraphError> {
            let comm = comm(&b, store.clone(), rank, 2, Duration::from_secs(30))?;
            let x = b.alloc_from(&[1.0f32; 2])?;
            let stream = b.new_stream()?;
            let mut graph =
                b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
            let started = Instant::now();
            let err = b
                .capture_on(&stream, &mut graph, || {
                    comm.all_reduce(&x, ReduceOp::Sum)?;
                    if rank == 1 {
                        // Refused, and the refusal invalidates rank 1's capture; the body
                        // goes on, so its capture fails only at its end.
                        assert!(b.synchronize().is_err());
                    }
                    Ok(())
                })
                .unwrap_err();
            assert!(started.elapsed() < Duration::from_secs(5), "{err}");
            assert!(graph.state() == accel_graph_api::GraphState::Empty);
            Ok(err)
        },
    );
    assert!(
        matches!(&results[0], Ok(GraphError::CollectiveMismatch { message, .. }) if message.contains("discarded")),
        "{:?}",
        results[0]
    );
    assert!(
        matches!(results[1], Ok(GraphError::CaptureInvalidated { .. })),
        "{:?}",
        results[1]
    );
}

/// A rank that aborts its communicator tells the others first: their `wait` then fails naming
/// it (on NCCL an abort cuts the peers' collectives short, with whatever their buffers held),
/// rather than reporting work done — and their communicator is unusable from then on.
#[test]
fn a_peers_abort_fails_the_others_wait_instead_of_reporting_work_done() {
    let store = MemoryStore::new();
    // Both ranks pass both barriers whatever happens before them, so a failure never leaves
    // the other rank waiting: the first one keeps rank 0's abort after rank 1's first wait.
    let (waited, aborted) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let results = ranks(
        2,
        |_| MockBackend::new(),
        |rank, b| -> Result<Option<GraphError>> {
            let setup = (|| -> Result<_> {
                let comm = comm(&b, store.clone(), rank, 2, Duration::from_secs(10))?;
                let x = b.alloc_from(&[1.0f32; 4])?;
                comm.all_reduce(&x, ReduceOp::Sum)?;
                comm.wait(Duration::from_secs(5))?;
                Ok((comm, x))
            })();
            waited.wait();
            if rank == 0
                && let Ok((comm, _)) = &setup
            {
                comm.abort("the test gives up on rank 0");
            }
            aborted.wait();
            let (comm, x) = setup?;
            if rank == 0 {
                return Ok(None);
            }
            let e = comm.wait(Duration::from_secs(5)).unwrap_err();
            assert!(
                matches!(
                    comm.all_reduce(&x, ReduceOp::Sum),
                    Err(GraphError::CommUnusable { .. })
                ),
                "unusable after the peer's abort"
            );
            Ok(Some(e))
        },
    );
    let mut results = results.into_iter();
    assert!(matches!(results.next(), Some(Ok(None))));
    match results.next() {
        Some(Ok(Some(GraphError::CommUnusable { rank, reason, .. }))) => {
            assert_eq!(rank, 1);
            assert!(
                reason.contains("rank 0 aborted") && reason.contains("gives up"),
                "{reason}"
            );
        }
        other => panic!("rank 1: {other:?}"),
    }
}

/// A store whose users start together: each thread's first write (a value set, or a key won
/// with `set_if_absent`) waits, once it took effect, until `parties` threads have made theirs
/// (at most 10 s). Ranks of two communicators given one name thus all begin joining before any
/// goes on — the clash the library promises to catch. (A rank that makes no store call until
/// the others finished joining cannot be told from a later communicator's: see
/// `docs/MULTI_GPU.md`.)
#[derive(Debug, Clone)]
struct StartTogether<S> {
    inner: S,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct Gate {
    parties: usize,
    passed: std::sync::Mutex<std::collections::HashSet<std::thread::ThreadId>>,
    all: std::sync::Condvar,
}

impl<S> StartTogether<S> {
    fn new(inner: S, parties: usize) -> Self {
        StartTogether {
            inner,
            gate: Arc::new(Gate {
                parties,
                passed: Default::default(),
                all: Default::default(),
            }),
        }
    }

    fn wrote(&self) {
        let gate = &self.gate;
        let mut passed = gate.passed.lock().unwrap();
        if !passed.insert(std::thread::current().id()) {
            return;
        }
        gate.all.notify_all();
        let deadline = Instant::now() + Duration::from_secs(10);
        while passed.len() < gate.parties && Instant::now() < deadline {
            passed = gate
                .all
                .wait_timeout(passed, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }
}

impl<S: Store> Store for StartTogether<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(key, value)?;
        self.wrote();
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }

    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        let held = self.inner.set_if_absent(key, value)?;
        if held.is_none() {
            self.wrote();
        }
        Ok(held)
    }

    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        self.inner.wait(key, deadline)
    }
}

/// Two groups of two ranks each make a communicator named `"world"` on one store, at once,
/// and all-reduce their values (group 0: 1 and 2, group 1: 101 and 102) — `trials` times.
/// Returns, per trial, each rank's result (group-major: group 0's ranks 0 and 1, then group
/// 1's).
fn same_name_trials<S: Store + Clone + 'static>(
    trials: usize,
    store_of: impl Fn(usize) -> S,
) -> Vec<Vec<Result<f32>>> {
    (0..trials)
        .map(|trial| {
            let store = StartTogether::new(store_of(trial), 4);
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let store = store.clone();
                        s.spawn(move || -> Result<f32> {
                            let (group, rank) = (i / 2, i % 2);
                            let b = MockBackend::new();
                            let x = b.alloc_from(&[(100 * group + rank + 1) as f32])?;
                            let comm = comm(&b, store, rank, 2, Duration::from_secs(20))?;
                            comm.all_reduce(&x, ReduceOp::Sum)?;
                            Ok(b.download(&x)?[0])
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        })
        .collect()
}

/// No trial mixes the groups: every rank that succeeds has its own group's sum, a group's two
/// ranks succeed or fail together, at least one group fails, and every failure is the typed
/// clash (no rank waits in vain for a peer that went away).
fn assert_never_mixed(results: &[Vec<Result<f32>>]) {
    for (trial, ranks) in results.iter().enumerate() {
        let mut failed_groups = 0;
        for group in 0..2 {
            let want = [3.0, 203.0][group];
            let pair = &ranks[2 * group..2 * group + 2];
            for result in pair {
                match result {
                    Ok(got) => assert_eq!(*got, want, "trial {trial}: {ranks:?}"),
                    Err(GraphError::CommNameClash { .. }) => {}
                    Err(e) => panic!("trial {trial}: {e:?}: {ranks:?}"),
                }
            }
            assert_eq!(
                pair[0].is_ok(),
                pair[1].is_ok(),
                "trial {trial}: one rank of a group succeeded alone: {ranks:?}"
            );
            failed_groups += usize::from(pair[0].is_err());
        }
        assert!(failed_groups >= 1, "trial {trial}: {ranks:?}");
    }
}

#[test]
fn two_communicators_of_one_name_on_a_memory_store_never_mix() {
    let results = same_name_trials(20, |_| MemoryStore::new());
    assert_never_mixed(&results);
    let clash = results.iter().flatten().find_map(|r| r.as_ref().err());
    match clash {
        Some(GraphError::CommNameClash {
            communicator,
            reason,
            ..
        }) => {
            assert_eq!(communicator, "world");
            assert!(reason.contains("place"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn two_communicators_of_one_name_in_a_directory_never_mix() {
    let base = std::env::temp_dir().join(format!("accel-graph-mock-clash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let results = same_name_trials(10, |trial| {
        FileStore::new(base.join(trial.to_string())).unwrap()
    });
    assert_never_mixed(&results);
    std::fs::remove_dir_all(&base).unwrap();
}

/// A name stays claimed after its communicator is gone: a second communicator of that name on
/// the store (or a launch on a directory an earlier one left) is refused at once, on every
/// rank, instead of reading the first one's values.
#[test]
fn a_name_is_not_reused_on_its_store() {
    let store = MemoryStore::new();
    let make = || {
        ranks(
            2,
            |_| MockBackend::new(),
            |rank, b| comm(&b, store.clone(), rank, 2, Duration::from_secs(10)).map(drop),
        )
    };
    for first in make() {
        first.unwrap();
    }
    let started = Instant::now();
    for again in make() {
        assert!(
            matches!(again, Err(GraphError::CommNameClash { .. })),
            "{again:?}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_timeout_of_duration_max_waits_without_overflowing() {
    let store = MemoryStore::new();
    let results = ranks(
        2,
        |_| MockBackend::new(),
        |rank, b| -> Result<Vec<f32>> {
            let comm = comm(&b, store.clone(), rank, 2, Duration::MAX)?;
            let x = b.alloc_from(&[rank as f32 + 1.0; 3])?;
            comm.all_reduce(&x, ReduceOp::Sum)?;
            comm.barrier()?;
            let stream = b.new_stream()?;
            let mut graph =
                b.graph(GraphOptions::new().capture_error_mode(CaptureErrorMode::ThreadLocal))?;
            b.capture_on(&stream, &mut graph, || comm.all_reduce(&x, ReduceOp::Sum))?;
            graph.replay()?;
            comm.wait(Duration::MAX)?;
            b.download(&x)
        },
    );
    for result in results {
        assert_eq!(result.unwrap(), vec![6.0; 3]);
    }
}

#[test]
fn worlds_the_library_cannot_serve_are_refused_before_anything_is_made() {
    let b = MockBackend::new();
    for (rank, world) in [
        (0, 1usize << 40),
        (0, usize::MAX),
        (0, MAX_WORLD_SIZE + 1),
        (3, 3),
        (usize::MAX, 2),
        (0, 0),
    ] {
        let started = Instant::now();
        let made = Communicator::new(&b, MemoryStore::new(), rank, world);
        assert!(
            matches!(made, Err(GraphError::ArgumentMismatch(_))),
            "rank {rank} of {world}: {made:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    assert_eq!(b.memory_stats().allocated_bytes, 0);
}

/// A device communicator of one rank, joined directly (not through a `Communicator`), as any
/// code can through `Backend::collectives`.
fn device_comm(b: &MockBackend) -> Arc<dyn accel_graph_api::backend_kit::DeviceComm<Memory>> {
    let collectives = b.collectives().unwrap();
    let id = collectives.new_comm_id().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let control = ControlPlane::new(store, "direct", 0, 1, Duration::from_secs(10)).unwrap();
    collectives.join(&id, Arc::new(control)).unwrap()
}

type Memory = <MockBackend as PortableOps>::Memory;

fn view<'a>(v: View<'a, <MockBackend as PortableOps>::Buffer<f32>>) -> CommView<'a, Memory> {
    CommView::of(v)
}

fn all_reduce_of(count: usize) -> CollectiveSignature {
    CollectiveSignature {
        collective: Collective::AllReduce(ReduceOp::Sum),
        dtype: CommDType::F32,
        count,
    }
}

/// The driver layer checks each view of a call against the live memory it names and the
/// signature, whoever made the call: another instance's memory, and views shorter than the
/// signature says (a device would read and write past them), are refused before anything is
/// issued.
#[test]
fn the_driver_refuses_views_that_do_not_fit_their_memory_or_their_call() {
    let b = MockBackend::new();
    let device = device_comm(&b);
    let x = b.alloc_from(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let whole = view(View::from(&x));
    let call = |count, send, recv| CollectiveCall {
        signature: all_reduce_of(count),
        send,
        recv,
    };

    let too_long = device.issue(&call(1 << 20, whole, whole));
    assert!(
        matches!(
            too_long,
            Err(GraphError::LengthMismatch {
                expected: 1_048_576,
                got: 4,
                ..
            })
        ),
        "{too_long:?}"
    );
    let tail = view(x.view(2..4).unwrap());
    let past = device.issue(&call(4, tail, tail));
    assert!(
        matches!(past, Err(GraphError::LengthMismatch { .. })),
        "{past:?}"
    );
    let gather = device.issue(&CollectiveCall {
        signature: CollectiveSignature {
            collective: Collective::AllGather,
            dtype: CommDType::F64,
            count: 4,
        },
        send: whole,
        recv: whole,
    });
    assert!(
        matches!(
            gather,
            Err(GraphError::LengthMismatch {
                expected: 4,
                got: 2,
                ..
            })
        ),
        "an all_gather of 4 f64 from 16 bytes: {gather:?}"
    );
    let bad_root = device.issue(&CollectiveCall {
        signature: CollectiveSignature {
            collective: Collective::Broadcast { root: 1 },
            dtype: CommDType::F32,
            count: 4,
        },
        send: whole,
        recv: whole,
    });
    assert!(
        matches!(bad_root, Err(GraphError::ArgumentMismatch(_))),
        "{bad_root:?}"
    );

    let other = MockBackend::new();
    let foreign = other.alloc_from(&[5.0f32; 4]).unwrap();
    let foreign = view(View::from(&foreign));
    for (send, recv) in [(foreign, whole), (whole, foreign)] {
        let refused = device.issue(&call(4, send, recv));
        assert!(
            matches!(refused, Err(GraphError::ForeignObject { what: "buffer" })),
            "{refused:?}"
        );
    }

    // Nothing was issued; a call that fits runs.
    assert_eq!(b.download(&x).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    device.issue(&call(2, tail, tail)).unwrap();
    b.synchronize().unwrap();
    assert_eq!(b.download(&x).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

/// A store that can be switched off: every call then fails as a store nobody can reach does.
#[derive(Debug, Clone, Default)]
struct SwitchedStore {
    inner: MemoryStore,
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl SwitchedStore {
    fn up(&self) -> Result<()> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(GraphError::StoreUnavailable {
                store: "switched".to_owned(),
                reason: "switched off by the test".to_owned(),
            });
        }
        Ok(())
    }
}

impl Store for SwitchedStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.up()?;
        self.inner.set(key, value)
    }
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.up()?;
        self.inner.get(key)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.up()?;
        self.inner.delete(key)
    }
    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.up()?;
        self.inner.set_if_absent(key, value)
    }
}

#[test]
fn a_store_gone_during_a_barrier_makes_the_communicator_unusable() {
    let b = MockBackend::new();
    let store = SwitchedStore::default();
    let comm = comm(&b, store.clone(), 0, 1, Duration::from_secs(10)).unwrap();
    comm.barrier().unwrap();
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let gone = comm.barrier();
    assert!(
        matches!(gone, Err(GraphError::StoreUnavailable { .. })),
        "{gone:?}"
    );
    // Back up, the barrier counts of the ranks no longer agree: the communicator stays unusable.
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let after = comm.barrier();
    assert!(
        matches!(after, Err(GraphError::CommUnusable { .. })),
        "{after:?}"
    );
}
