//! Every misuse of the engine is a typed error, before any work — never a panic — and leaves
//! the engine as it was.

mod common;

use accel_graph::{GraphError, Result, mock::MockBackend};
use accel_graph_decode::{Config, Engine, EngineOptions, StepRow};
use common::{engine, options};

fn mismatch<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(GraphError::ArgumentMismatch(m)) => m,
        other => panic!("expected ArgumentMismatch, got {other:?}"),
    }
}

#[test]
fn bad_steps_are_refused() -> Result<()> {
    let b = MockBackend::new();
    let mut e = engine::<_, f32>(&b, options())?;
    assert!(matches!(
        e.last_logits(),
        Err(GraphError::NotCaptured { .. })
    ));
    let nine: Vec<StepRow> = (0..9).map(|s| StepRow::new(s, 1, 0)).collect();
    assert!(mismatch(e.step(&nine)).contains("largest bucket"));
    assert!(mismatch(e.step(&[])).contains("no rows"));
    assert!(mismatch(e.step(&[StepRow::new(8, 1, 0)])).contains("slot 8"));
    assert!(mismatch(e.step(&[StepRow::new(1, 1, 0), StepRow::new(1, 2, 0)])).contains("twice"));
    assert!(mismatch(e.step(&[StepRow::new(0, 256, 0)])).contains("vocabulary"));
    assert!(mismatch(e.step(&[StepRow::new(0, 1, 64)])).contains("max_len"));
    assert!(mismatch(e.step(&[StepRow::new(0, 1, 1)])).contains("never wrote"));
    assert!(mismatch(e.capture_bucket(3)).contains("not one of"));
    // Nothing ran, nothing was made.
    assert!(e.summary().buckets.is_empty());
    assert_eq!(e.slot_len(0), Some(0));
    // A sequence at the end of the cache: its last position works, the next is refused.
    let mut token = 3;
    for pos in 0..64 {
        token = e.step(&[StepRow::new(7, token, pos)])?.tokens[0];
    }
    assert!(mismatch(e.step(&[StepRow::new(7, token, 64)])).contains("max_len"));
    Ok(())
}

#[test]
fn bad_options_are_refused() {
    let b = MockBackend::new();
    let make = |o: EngineOptions| Engine::<_, f32>::random(&b, Config::tiny(), 1, o).map(drop);
    assert!(mismatch(make(options().precapture([3]))).contains("pre-capture bucket 3"));
    assert!(mismatch(make(options().slots(4))).contains("slots"));
    assert!(mismatch(make(options().buckets([70_000]))).contains("65535"));
    assert!(matches!(
        make(options().buckets([0, 2])),
        Err(GraphError::ArgumentMismatch(_))
    ));
    assert!(matches!(
        make(options().buckets([])),
        Err(GraphError::ArgumentMismatch(_))
    ));
    let bad = Config {
        heads: 5,
        ..Config::tiny()
    };
    assert!(matches!(
        Engine::<_, f32>::random(&b, bad, 1, options()).map(drop),
        Err(GraphError::ArgumentMismatch(_))
    ));
}
