//! 10.09 – 10.10: two instances of one device. The capture-mode rules span the device (a
//! capture forbids unsafe calls made through any instance of it, as CUDA's global mode spans
//! the process), and an instance never takes another instance's stream for its own.

use accel_graph_api::{
    AcceleratorGraph, Backend, CaptureErrorMode, GraphError, GraphOptions, GraphState,
};

use super::super::capture_modes::{
    AnotherInstance, AnotherInstanceAndThread, Download, EventQuery, EventSynchronize, PlainAlloc,
    SyncIdleStream, Synchronize, Upload, check_row, expected, row,
};
use crate::{
    Target,
    check::{
        CaseResult, Ctx, ensure, expect_all, expect_capturing, expect_err, expect_state, new_graph,
        on_stream, recaptures_after_reset, replay_on,
    },
};

/// 10.09: every unsafe call — plain allocation, device and idle-stream synchronize,
/// `event_synchronize`, `event_query`, `upload`, `download` — made through *another instance*
/// of the device, on the capturing thread and on another thread, in each of the four modes, has
/// the outcome CUDA's table gives (5.06): refused calls fail there with `UnsafeDuringCapture` and
/// invalidate the capture; allowed ones leave it running. (5.06r and 5.06s check one row each: a
/// plain allocation, global from another thread and thread_local on this thread.)
///
/// Through another instance the blocking copies run on that instance's idle stream, so on the
/// capturing thread they follow the mode like a plain allocation (only through the capturing
/// instance do they wait for the capturing stream itself). Waiting for the capturing stream
/// through another instance is not a call one can make: its stream is foreign there (10.10).
pub(super) fn unsafe_calls_through_another_instance<B: Backend>(t: &Target<B>) -> CaseResult {
    let calls = [
        Synchronize,
        Upload,
        Download,
        PlainAlloc,
        SyncIdleStream,
        EventSynchronize,
        EventQuery,
    ];
    let mut rows = 0usize;
    for call in calls {
        for mode in CaptureErrorMode::ALL {
            for place in [AnotherInstance, AnotherInstanceAndThread] {
                check_row(t, row(mode, place, call, expected(mode, place, call)))?;
                rows += 1;
            }
        }
    }
    println!("10.09: {rows} unsafe calls through another instance checked");
    Ok(())
}

/// 10.10: a stream of another instance is refused by `use_stream`, `set_current_stream`,
/// `is_capturing` and a scoped capture (`capture_on`, whose body never runs) with
/// `ForeignObject` — before a capture on it and while the other instance captures on it — and
/// the refusals change nothing: the current stream stays, the graph stays empty, the other
/// instance's capture goes on, ends and replays what it recorded, and its stream still works.
pub(super) fn foreign_capture_stream<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let a = t.another_instance()?;
    let a_stream = a.new_stream().ctx("new_stream on the other instance")?;
    let a_x = a
        .alloc_from(&[0.0; 8])
        .ctx("alloc_from on the other instance")?;
    let before = b.current_stream();
    let mut g = new_graph(b, GraphOptions::new())?;
    let refusals = |when: &str| -> CaseResult {
        expect_err!(
            b.use_stream(&a_stream).map(drop),
            GraphError::ForeignObject { what: "stream" },
            format!("use_stream(another instance's stream) {when}")
        );
        expect_err!(
            b.set_current_stream(&a_stream).map(drop),
            GraphError::ForeignObject { what: "stream" },
            format!("set_current_stream(another instance's stream) {when}")
        );
        expect_err!(
            b.is_capturing(&a_stream),
            GraphError::ForeignObject { what: "stream" },
            format!("is_capturing(another instance's stream) {when}")
        );
        ensure!(
            b.current_stream() == before,
            "the current stream changed after the refusals {when}"
        );
        Ok(())
    };

    refusals("before any capture")?;
    let mut ran = false;
    expect_err!(
        b.capture_on(&a_stream, &mut g, || {
            ran = true;
            Ok(())
        }),
        GraphError::ForeignObject { what: "stream" },
        "capture_on(another instance's stream)"
    );
    ensure!(!ran, "capture_on ran its body on another instance's stream");
    expect_state(&g, GraphState::Empty, "after capture_on was refused")?;
    expect_capturing(&a, &a_stream, false, "the other instance's stream")?;

    // The other instance captures on its stream; our refusals must not disturb it.
    let mut a_graph = new_graph(&a, GraphOptions::new())?;
    {
        let _current = on_stream(&a, &a_stream)?;
        a_graph
            .capture_begin()
            .ctx("capture_begin on the other instance")?;
        a.add_scalar(&a_x, 1.0)
            .ctx("add_scalar on the other instance")?;
        refusals("while the other instance captures on it")?;
        expect_capturing(&a, &a_stream, true, "the other instance's capture stream")?;
        a.add_scalar(&a_x, 1.0)
            .ctx("add_scalar on the other instance")?;
        a_graph
            .capture_end()
            .ctx("capture_end on the other instance")?;
    }
    expect_capturing(&a, &a_stream, false, "after the other instance's capture")?;
    expect_all(
        &a,
        &a_x,
        0.0,
        "the other instance's buffer after its capture",
    )?;
    replay_on(&a, &a_stream, &mut a_graph)?;
    expect_all(&a, &a_x, 2.0, "a replay of the other instance's graph")?;
    {
        let _current = on_stream(&a, &a_stream)?;
        a.add_scalar(&a_x, 1.0)
            .ctx("eager work on the other instance's stream")?;
    }
    expect_all(&a, &a_x, 3.0, "eager work on the other instance's stream")?;
    recaptures_after_reset(b, &mut g)
}
