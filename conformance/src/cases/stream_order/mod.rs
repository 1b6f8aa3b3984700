//! §12: stream order and capture membership. A pool block freed on one stream is handed to an
//! allocation on another stream only when the library knows the order (so the unordered
//! branches of a graph never share memory), reuse on the same stream still happens, the
//! memory books stay true while `record_stream`ed frees wait, and no call can be decided for
//! one capture state and acted on in another while other threads begin and end captures.

mod accounting;
mod branches;
mod capture_race;
mod same_stream;

use accel_graph_api::{Backend, Result};

use crate::{
    Case,
    case::requirements::{host_callbacks_and_multi_stream_capture, multi_stream_capture, none},
};

const SECTION: &str = "12 stream order";

/// The section's cases.
pub(crate) fn cases<B: Backend>() -> Vec<Case<B>> {
    Vec::from([
        Case::new(
            "12.01 a block freed on one branch of a capture is never handed to an unordered branch: replays equal eager",
            SECTION,
            multi_stream_capture,
            branches::unordered_branches,
        ),
        Case::new(
            "12.02a a block freed on a stream is reused by the next capture on it: no growth over 1000 cycles",
            SECTION,
            none,
            |t| same_stream::no_growth(t, false),
        ),
        Case::new(
            "12.02b the same for captures that fork a second stream and join it back",
            SECTION,
            multi_stream_capture,
            |t| same_stream::no_growth(t, true),
        ),
        Case::new(
            "12.03 a block is reused across streams after an explicit event order, and only then",
            SECTION,
            multi_stream_capture,
            branches::ordered_reuse_only,
        ),
        Case::new(
            "12.04 reserved >= allocated + graph-held + pending, and every block's state is true, after each step with record_stream",
            SECTION,
            multi_stream_capture,
            accounting::books_stay_true,
        ),
        Case::new(
            "12.05 stress: threads enqueue work on streams others begin and end captures on, every mode: no crash, double free or leak",
            SECTION,
            host_callbacks_and_multi_stream_capture,
            capture_race::capture_race,
        ),
        Case::new(
            "12.06 a block used on two branches of a capture is reused only after both",
            SECTION,
            multi_stream_capture,
            branches::every_user_in_the_free_point,
        ),
    ])
}

/// Makes `to` wait for the work issued on `from` so far, through `event` (in a capture: forks
/// `to` into it, or joins it back).
fn order_after<B: Backend>(
    b: &B,
    to: &B::Stream,
    from: &B::Stream,
    event: &B::Event,
) -> Result<()> {
    {
        let _from = b.use_stream(from)?;
        b.record_event(event)?;
    }
    let _to = b.use_stream(to)?;
    b.wait_event(event)
}
