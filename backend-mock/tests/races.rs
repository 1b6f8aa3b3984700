//! The race sanitizer: two accesses to overlapping bytes of one block, at least one a write,
//! with nothing ordering them — eager work on streams with no event wait or synchronize in
//! between, or nodes of a captured graph with no path between them — fail with
//! `GraphError::DataRace`, naming both accesses; ordered work never does.

use accel_graph_api::{AccessKind, AccessSource, RaceAccess, prelude::*};
use accel_graph_mock::{MockBackend, MockBuffer, MockConfig, MockStream, RaceReport};

/// The two accesses of a race error.
fn race(result: Result<()>) -> (RaceAccess, RaceAccess) {
    match result {
        Err(GraphError::DataRace { first, second }) => (*first, *second),
        other => panic!("expected a DataRace, got {other:?}"),
    }
}

/// Runs `work` with `stream` current.
fn on<R>(b: &MockBackend, stream: &MockStream, work: impl FnOnce() -> Result<R>) -> Result<R> {
    let _current = b.use_stream(stream)?;
    work()
}

/// A buffer of `n` zeros, its upload ordered before everything issued after it (a blocking
/// copy: the host waited for it).
fn zeros(b: &MockBackend, n: usize) -> Result<MockBuffer> {
    b.alloc_from(&vec![0.0; n])
}

fn index(stream: &MockStream) -> u64 {
    stream.raw().index()
}

#[test]
fn unordered_writes_on_two_streams_race_and_the_second_does_not_run() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 4)?;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    on(&b, &s1, || b.fill(&x, 1.0))?;
    let (first, second) = race(on(&b, &s2, || b.fill(&x, 2.0)));
    let address = x.device_address();
    assert_eq!(
        first,
        RaceAccess {
            label: format!("fill x={address:#x}[4] value=1"),
            stream: index(&s1),
            address,
            bytes: 0..16,
            kind: AccessKind::Write,
            source: AccessSource::Eager,
        }
    );
    assert_eq!(
        second,
        RaceAccess {
            label: format!("fill x={address:#x}[4] value=2"),
            stream: index(&s2),
            ..first.clone()
        }
    );
    assert_eq!(
        b.race_reports(),
        vec![RaceReport {
            first: first.clone(),
            second
        }]
    );
    assert_eq!(b.counters().data_races, 1);
    // The racing fill failed before it ran; the stream still works once ordered.
    b.stream_synchronize(&s1)?;
    assert_eq!(b.download(&x)?, vec![1.0; 4]);
    Ok(())
}

#[test]
fn an_unordered_read_and_write_race_either_way_round() -> Result<()> {
    let b = MockBackend::new();
    let (x, y) = (zeros(&b, 2)?, zeros(&b, 2)?);
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    // Write, then an unordered read (a copy out of x).
    on(&b, &s1, || b.add_scalar(&x, 1.0))?;
    let (first, second) = race(on(&b, &s2, || b.copy(&y, &x)));
    assert_eq!(
        (first.kind, second.kind),
        (AccessKind::ReadWrite, AccessKind::Read)
    );
    assert!(second.label.starts_with("copy dst="), "{}", second.label);
    assert_eq!(second.address, x.device_address());
    // Read, then an unordered write.
    b.synchronize()?;
    on(&b, &s1, || b.axpy(&y, 2.0, &x))?;
    let (first, second) = race(on(&b, &s2, || b.scale(&x, 3.0)));
    assert_eq!(
        (first.kind, second.kind),
        (AccessKind::Read, AccessKind::ReadWrite)
    );
    assert_eq!((first.stream, second.stream), (index(&s1), index(&s2)));
    assert_eq!(b.race_reports().len(), 2);
    Ok(())
}

#[test]
fn a_blocking_copy_races_with_unordered_work_on_another_stream() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 3)?;
    let s1 = b.new_stream()?;
    on(&b, &s1, || b.fill(&x, 1.0))?;
    // The download runs on the default stream, which nothing ordered after s1's fill.
    let (first, second) = race(b.download(&x).map(drop));
    assert_eq!(first.stream, index(&s1));
    assert_eq!(
        (second.label.as_str(), second.stream, second.kind),
        (
            format!("download x={:#x} bytes 0..12", x.device_address()).as_str(),
            0,
            AccessKind::Read
        )
    );
    let (_, second) = race(b.upload(&x, &[5.0; 3]));
    assert_eq!(second.kind, AccessKind::Write);
    assert!(second.label.starts_with("upload x="), "{}", second.label);
    Ok(())
}

#[test]
fn work_on_one_stream_never_races() -> Result<()> {
    let b = MockBackend::new();
    let (x, y) = (zeros(&b, 4)?, zeros(&b, 4)?);
    let s = b.new_stream()?;
    on(&b, &s, || {
        b.fill(&x, 1.0)?;
        b.copy(&y, &x)?;
        b.axpy(&x, 2.0, &x)?;
        b.mul(&y, &x)?;
        assert_eq!(b.download(&y)?, vec![3.0; 4]);
        Ok(())
    })?;
    assert!(b.race_reports().is_empty());
    Ok(())
}

#[test]
fn an_event_wait_orders_two_streams() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 4)?;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    let (done, back) = (b.new_event()?, b.new_event()?);
    on(&b, &s1, || {
        b.fill(&x, 1.0)?;
        b.record_event(&done)
    })?;
    on(&b, &s2, || {
        b.wait_event(&done)?;
        b.add_scalar(&x, 1.0)?;
        b.record_event(&back)
    })?;
    // And back: s1 waits for s2's add before scaling.
    let scaled = on(&b, &s1, || {
        b.wait_event(&back)?;
        b.scale(&x, 2.0)?;
        b.download(&x)
    })?;
    assert_eq!(scaled, vec![4.0; 4]);
    // An event records the stream's position: work issued after the record is not covered.
    on(&b, &s1, || {
        b.record_event(&done)?;
        b.fill(&x, 0.0)
    })?;
    race(on(&b, &s2, || {
        b.wait_event(&done)?;
        b.fill(&x, 5.0)
    }));
    Ok(())
}

#[test]
fn synchronizes_order_work_issued_after_them() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 2)?;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    on(&b, &s1, || b.fill(&x, 1.0))?;
    b.stream_synchronize(&s1)?;
    on(&b, &s2, || b.fill(&x, 2.0))?;
    b.synchronize()?;
    on(&b, &s1, || b.fill(&x, 3.0))?;
    let event = b.new_event()?;
    on(&b, &s1, || b.record_event(&event))?;
    b.event_synchronize(&event)?;
    on(&b, &s2, || b.fill(&x, 4.0))?;
    // A completed event_query tells the host as much.
    on(&b, &s2, || b.record_event(&event))?;
    assert!(b.event_query(&event)?);
    on(&b, &s1, || b.add_scalar(&x, 1.0))?;
    // A blocking copy waits for its stream too.
    assert_eq!(on(&b, &s1, || b.download(&x))?, vec![5.0; 2]);
    on(&b, &s2, || b.fill(&x, 0.0))?;
    assert!(b.race_reports().is_empty());
    assert_eq!(b.counters().data_races, 0);
    Ok(())
}

#[test]
fn reads_and_distinct_buffers_never_race() -> Result<()> {
    let b = MockBackend::new();
    let (x, y, z) = (zeros(&b, 4)?, zeros(&b, 4)?, zeros(&b, 4)?);
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    on(&b, &s1, || b.copy(&y, &x))?;
    on(&b, &s2, || b.copy(&z, &x))?; // x read by both: no conflict
    on(&b, &s1, || b.fill(&y, 1.0))?;
    on(&b, &s2, || b.fill(&z, 1.0))?; // distinct blocks
    assert!(b.race_reports().is_empty());
    Ok(())
}

/// Streams `main` and `side` of a capture: `side` forks from `main` through an event.
fn fork(b: &MockBackend, side: &MockStream) -> Result<()> {
    let e = b.new_event()?;
    b.record_event(&e)?;
    on(b, side, || b.wait_event(&e))
}

/// `main` (current) waits for everything `side` did.
fn join(b: &MockBackend, side: &MockStream) -> Result<()> {
    let e = b.new_event()?;
    on(b, side, || b.record_event(&e))?;
    b.wait_event(&e)
}

#[test]
fn unordered_branches_of_a_capture_race_and_the_capture_is_discarded() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 4)?;
    let (main, side) = (b.new_stream()?, b.new_stream()?);
    let baseline = b.memory_stats();
    let mut g = b.graph(GraphOptions::new().keep_graph(true))?;
    let result = b.capture_on(&main, &mut g, || {
        b.fill(&x, 1.0)?; // node 0
        fork(&b, &side)?;
        b.add_scalar(&x, 1.0)?; // node 1, on main
        on(&b, &side, || b.scale(&x, 2.0))?; // node 2, on side: unordered with node 1
        join(&b, &side)
    });
    let (first, second) = race(result);
    let address = x.device_address();
    assert_eq!(
        (first.source, second.source),
        (
            AccessSource::Captured { node: 1 },
            AccessSource::Captured { node: 2 }
        )
    );
    assert_eq!((first.node(), second.node()), (Some(1), Some(2)));
    assert_eq!(first.label, format!("add_scalar x={address:#x}[4] c=1"));
    assert_eq!(second.label, format!("scale x={address:#x}[4] a=2"));
    assert_eq!((first.stream, second.stream), (index(&main), index(&side)));
    assert_eq!((first.bytes, second.kind), (0..16, AccessKind::ReadWrite));
    assert_eq!(b.counters().data_races, 1);
    // Discarded cleanly: nothing captures, nothing ran, nothing is held.
    assert_eq!(g.state(), GraphState::Empty);
    assert!(!b.is_capturing(&main)? && !b.is_capturing(&side)?);
    assert_eq!(b.download(&x)?, vec![0.0; 4]);
    assert_eq!(b.memory_stats(), baseline);
    // Joined before the second access, the same program is fine.
    b.capture_on(&main, &mut g, || {
        b.fill(&x, 1.0)?;
        fork(&b, &side)?;
        on(&b, &side, || b.scale(&x, 2.0))?;
        join(&b, &side)?;
        b.add_scalar(&x, 1.0)
    })?;
    g.replay()?;
    assert_eq!(b.download(&x)?, vec![3.0; 4]);
    assert_eq!(b.race_reports().len(), 1);
    Ok(())
}

#[test]
fn branches_touching_distinct_buffers_or_only_reading_do_not_race() -> Result<()> {
    let b = MockBackend::new();
    let (x, y, src) = (zeros(&b, 4)?, zeros(&b, 4)?, b.alloc_from(&[2.0; 4])?);
    let (main, side) = (b.new_stream()?, b.new_stream()?);
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&main, &mut g, || {
        fork(&b, &side)?;
        b.copy(&x, &src)?;
        on(&b, &side, || b.axpy(&y, 1.0, &src))?;
        join(&b, &side)
    })?;
    g.replay()?;
    assert_eq!(
        (b.download(&x)?, b.download(&y)?),
        (vec![2.0; 4], vec![2.0; 4])
    );
    assert!(b.race_reports().is_empty());
    Ok(())
}

/// Two branches of one capture share a temporary without a join between them (as a pool
/// block handed from one branch to the other would): the second branch's fill races with the
/// first branch's use.
#[test]
fn a_temporary_shared_by_unordered_branches_races() -> Result<()> {
    let b = MockBackend::new();
    let (out1, out2) = (zeros(&b, 2)?, zeros(&b, 2)?);
    let (main, side) = (b.new_stream()?, b.new_stream()?);
    let mut g = b.graph(GraphOptions::new())?;
    let result = b.capture_on(&main, &mut g, || {
        let tmp = b.alloc(2)?;
        fork(&b, &side)?;
        b.fill(&tmp, 1.0)?; // node 0
        b.axpy(&out1, 1.0, &tmp)?; // node 1
        on(&b, &side, || {
            b.fill(&tmp, 2.0)?; // node 2: races with nodes 0 and 1
            b.axpy(&out2, 1.0, &tmp) // node 3
        })?;
        join(&b, &side)
    });
    let (first, second) = race(result);
    assert_eq!(second.node(), Some(2));
    assert!(matches!(first.node(), Some(0 | 1)), "{first:?}");
    assert_eq!(first.address, second.address);
    assert_eq!(b.memory_stats().pools.len(), 0, "the capture's pool went");
    Ok(())
}

#[test]
fn a_replay_is_one_unit_of_work_on_its_stream() -> Result<()> {
    let b = MockBackend::new();
    let (x, y) = (zeros(&b, 4)?, zeros(&b, 4)?);
    let (capture, s1, s2) = (b.new_stream()?, b.new_stream()?, b.new_stream()?);
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&capture, &mut g, || {
        b.add_scalar(&y, 1.0)?; // node 0
        b.copy(&x, &y) // node 1: writes x
    })?;
    on(&b, &s1, || g.replay())?;
    let (first, second) = race(on(&b, &s2, || b.fill(&x, 0.0)));
    assert_eq!(first.source, AccessSource::Replay { node: 1 });
    assert_eq!(first.stream, index(&s1));
    assert_eq!(
        first.label,
        format!(
            "copy dst={:#x}[4] src={:#x}[4]",
            x.device_address(),
            y.device_address()
        )
    );
    assert_eq!(second.source, AccessSource::Eager);
    // Ordered by an event, replays on two streams are fine; unordered, the second fails
    // before any of its nodes runs.
    let e = b.new_event()?;
    on(&b, &s1, || b.record_event(&e))?;
    on(&b, &s2, || {
        b.wait_event(&e)?;
        g.replay()
    })?;
    b.stream_synchronize(&s2)?;
    assert_eq!(b.download(&x)?, vec![2.0; 4]);
    on(&b, &s1, || g.replay())?;
    let (_, second) = race(on(&b, &s2, || g.replay()));
    assert_eq!(second.source, AccessSource::Replay { node: 0 });
    b.stream_synchronize(&s1)?;
    assert_eq!(
        b.download(&y)?,
        vec![3.0; 4],
        "the racing replay ran no node"
    );
    Ok(())
}

/// Work queued on a stalled stream touches memory when it runs: a look at that memory from
/// another stream meanwhile is unordered with it, and the queued work fails when resumed.
#[test]
fn peeking_at_a_stalled_streams_output_races_when_it_runs() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 2)?;
    let side = b.new_stream()?;
    b.stall_stream(&side)?;
    on(&b, &side, || b.add_scalar(&x, 1.0))?;
    assert_eq!(b.download(&x)?, vec![0.0; 2]);
    let (first, second) = race(b.resume_stream(&side));
    assert_eq!((first.stream, first.kind), (0, AccessKind::Read));
    assert_eq!(
        (second.stream, second.kind),
        (index(&side), AccessKind::ReadWrite)
    );
    Ok(())
}

/// Queued work is ordered as it was issued: after what the host had waited for then, and
/// after the event waits issued on the stream before it — not after later ones.
#[test]
fn queued_work_is_ordered_as_it_was_issued() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 2)?;
    let (side, other) = (b.new_stream()?, b.new_stream()?);
    let e = b.new_event()?;
    b.stall_stream(&side)?;
    on(&b, &side, || b.fill(&x, 1.0))?; // queued before the wait below
    on(&b, &other, || {
        b.fill(&x, 2.0)?;
        b.record_event(&e)
    })?;
    on(&b, &side, || b.wait_event(&e))?;
    let (first, second) = race(b.resume_stream(&side));
    assert_eq!((first.stream, second.stream), (index(&other), index(&side)));

    // Waited on before the queued work, the event orders it.
    let y = zeros(&b, 2)?;
    b.stall_stream(&side)?;
    on(&b, &other, || {
        b.fill(&y, 2.0)?;
        b.record_event(&e)
    })?;
    on(&b, &side, || {
        b.wait_event(&e)?;
        b.add_scalar(&y, 1.0)
    })?;
    b.resume_stream(&side)?;
    assert_eq!(on(&b, &side, || b.download(&y))?, vec![3.0; 2]);
    Ok(())
}

#[test]
fn the_sanitizer_can_be_turned_off() -> Result<()> {
    let b = MockBackend::with_config(MockConfig {
        race_sanitizer: false,
        ..MockConfig::default()
    })?;
    let x = zeros(&b, 4)?;
    let (main, side) = (b.new_stream()?, b.new_stream()?);
    on(&b, &main, || b.fill(&x, 1.0))?;
    on(&b, &side, || b.fill(&x, 2.0))?;
    let mut g = b.graph(GraphOptions::new())?;
    b.capture_on(&main, &mut g, || {
        fork(&b, &side)?;
        b.add_scalar(&x, 1.0)?;
        on(&b, &side, || b.scale(&x, 2.0))?;
        join(&b, &side)
    })?;
    g.replay()?;
    assert!(b.race_reports().is_empty());
    assert_eq!(b.counters().data_races, 0);
    assert!(MockBackend::new().config().race_sanitizer, "on by default");
    Ok(())
}

#[test]
fn the_log_can_be_cleared_and_counts_with_the_counters() -> Result<()> {
    let b = MockBackend::new();
    let x = zeros(&b, 1)?;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    on(&b, &s1, || b.fill(&x, 1.0))?;
    race(on(&b, &s2, || b.fill(&x, 2.0)));
    assert_eq!(b.race_reports().len(), 1);
    b.clear_race_reports();
    assert!(b.race_reports().is_empty());
    assert_eq!(b.counters().data_races, 1);
    b.reset_counters();
    assert_eq!(b.counters().data_races, 0);
    Ok(())
}
