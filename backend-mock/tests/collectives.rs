//! The mock's collectives beyond the generic cases (conformance §17): what only a simulation
//! can report (eager mismatches, a replay a peer never joins), the capture-mode rule for
//! ranks sharing a capture domain, nodes and the race sanitizer, and ranks meeting through a
//! directory as processes would.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, NodeKind, PortableOps,
    Result,
    collective::{CommOptions, Communicator, FileStore, MemoryStore, ReduceOp, Store},
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
