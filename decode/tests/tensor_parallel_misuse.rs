//! Tensor parallelism refuses what it cannot do with typed errors, and never hangs: sizes that
//! do not divide among the ranks, weights of the wrong shape, a rank that fails alone.

mod common;

use std::{
    sync::{Arc, mpsc},
    time::Duration,
};

use accel_graph::{
    GraphError,
    collective::{CommOptions, Communicator, MemoryStore},
    mock::{MockBackend, MockConfig},
};
use accel_graph_decode::{
    Config, Model,
    model::HostWeights,
    tp::{Dimension, TpError, TpReference, TpThreads},
};
use common::{SEED, options, tp::device};

/// Runs `f` on a thread of its own and fails the test if it takes longer than a minute (a
/// hang), rather than hang the suite.
fn within_a_minute<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("finished within a minute, without hanging")
}

#[test]
fn sizes_that_do_not_divide_are_refused_before_any_rank_starts() {
    let tiny = Config::tiny(); // 4 heads, 2 kv heads, intermediate 128
    let refused = |c: Config, world| match TpThreads::new(c, world) {
        Err(TpError::Indivisible {
            dimension,
            size,
            world: w,
        }) => {
            assert_eq!(w, world);
            Some((dimension, size))
        }
        other => panic!("world {world}: {other:?}"),
    };
    assert_eq!(refused(tiny, 3), Some((Dimension::Heads, 4)));
    let six_heads = Config {
        heads: 6,
        kv_heads: 2,
        ..tiny
    };
    assert_eq!(refused(six_heads, 3), Some((Dimension::KvHeads, 2)));
    let odd_mlp = Config {
        intermediate: 130,
        ..tiny
    };
    assert_eq!(refused(odd_mlp, 4), Some((Dimension::Intermediate, 130)));
    assert!(matches!(
        TpThreads::new(tiny, 0),
        Err(TpError::World { world: 0, .. })
    ));
    let message = TpThreads::new(tiny, 3).unwrap_err().to_string();
    assert!(
        message.contains("heads (4) is not a multiple of 3"),
        "{message}"
    );
    assert!(matches!(
        TpReference::<f32>::random(tiny, SEED, 3, 1),
        Err(TpError::Indivisible { .. })
    ));
}

#[test]
fn ranks_that_build_a_model_that_does_not_divide_all_fail_without_hanging() {
    // Ranks made by hand, past TpThreads's check: each finds the sizes on its own.
    let errors = within_a_minute(|| {
        let store = MemoryStore::new();
        let device = device();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    let store = store.clone();
                    s.spawn(move || -> accel_graph::Result<()> {
                        let b = MockBackend::with_config(MockConfig::shared(device))?;
                        let comm = Communicator::with_options(
                            &b,
                            store,
                            rank,
                            3,
                            CommOptions::new().timeout(Duration::from_secs(30)),
                        )?;
                        Model::<_, f32>::tensor_parallel_random(
                            Arc::new(comm),
                            Config::tiny(),
                            SEED,
                        )
                        .map(drop)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect::<Vec<_>>()
        })
    });
    for e in errors {
        match e {
            Err(GraphError::ArgumentMismatch(m)) => assert!(m.contains("not a multiple"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn weights_of_another_shape_are_refused() {
    let c = Config::tiny();
    let mut host = HostWeights::<f32>::random(&c, SEED);
    host.layers[1].down.pop();
    let out = TpThreads::new(c, 2)
        .unwrap()
        .run(
            |_| Ok(MockBackend::new()),
            |rank| rank.model(&host).map(drop),
        )
        .unwrap_err();
    assert!(
        matches!(
            out,
            TpError::Rank {
                error: GraphError::LengthMismatch { .. },
                ..
            }
        ),
        "{out:?}"
    );
}

#[test]
fn a_rank_failing_alone_is_the_error_reported_and_its_peers_time_out() {
    let out = within_a_minute(|| {
        TpThreads::new(Config::tiny(), 2)
            .unwrap()
            .comm_options(CommOptions::new().timeout(Duration::from_secs(2)))
            .run(
                |_| Ok(MockBackend::new()),
                |rank| {
                    let mut engine = rank.engine_random::<f32>(SEED, options())?;
                    if rank.rank() == 1 {
                        return Err(GraphError::ArgumentMismatch("rank 1 gives up".to_owned()));
                    }
                    // Rank 0's step waits for rank 1's all-reduce, at most the timeout.
                    engine.step(&common::rows(&Config::tiny(), 0, 1, &[]))?;
                    Ok(())
                },
            )
    });
    match out {
        Err(TpError::Rank {
            rank: 1,
            error: GraphError::ArgumentMismatch(m),
        }) => assert_eq!(m, "rank 1 gives up"),
        other => panic!("{other:?}"),
    }
}
