//! Helpers the cases share: errors turned into messages that say what was being checked,
//! reading buffers back, and the "graph still works after reset" check. (Leaks are checked by
//! the harness after every case: [`crate::run_case`].)

use std::panic::{self, AssertUnwindSafe};

use accel_graph_api::{
    AcceleratorGraph, Backend, GraphError, GraphOptions, GraphState, StreamGuard,
};

pub(crate) use crate::CaseResult;

/// `return Err(message)` unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !($cond) {
            return Err(format!($($arg)+));
        }
    };
}
pub(crate) use ensure;

/// Expects `$res` to be an error matching `$pat`; evaluates to that error. Any other outcome
/// returns a failure naming what was expected and what came.
macro_rules! expect_err {
    ($res:expr, $pat:pat, $what:expr) => {
        match $res {
            Err(e) if matches!(e, $pat) => e,
            Err(other) => {
                return Err(format!(
                    "{}: expected Err({}), got Err({other:?}): {other}",
                    $what,
                    stringify!($pat)
                ))
            }
            Ok(_) => {
                return Err(format!(
                    "{}: expected Err({}), got Ok",
                    $what,
                    stringify!($pat)
                ))
            }
        }
    };
}
pub(crate) use expect_err;

/// Turns a backend error into a failure message naming the call.
pub(crate) trait Ctx<T> {
    /// `Err(e)` becomes `"<what>: unexpected error ..."`.
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Ctx<T> for Result<T, GraphError> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error {e:?}: {e}"))
    }
}

/// Makes `stream` current until the guard drops (`with stream:`).
pub(crate) fn on_stream<B: Backend>(b: &B, stream: &B::Stream) -> Result<StreamGuard<B>, String> {
    b.use_stream(stream).ctx("use_stream")
}

/// Waits for all work, then downloads `buf`.
pub(crate) fn read<B: Backend>(b: &B, buf: &B::Buffer<f32>) -> Result<Vec<f32>, String> {
    b.synchronize().ctx("synchronize before download")?;
    b.download(buf).ctx("download")
}

/// Checks that every element of `buf` is exactly `value`.
pub(crate) fn expect_all<B: Backend>(
    b: &B,
    buf: &B::Buffer<f32>,
    value: f32,
    when: &str,
) -> CaseResult {
    let data = read(b, buf)?;
    match data.iter().position(|v| v.to_bits() != value.to_bits()) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{when}: element {i} is {}, expected {value} (buffer {:?})",
            data[i],
            &data[..data.len().min(8)]
        )),
    }
}

/// Checks the graph's state.
pub(crate) fn expect_state<G: AcceleratorGraph + ?Sized>(
    g: &G,
    state: GraphState,
    when: &str,
) -> CaseResult {
    ensure!(
        g.state() == state,
        "{when}: graph state is {}, expected {state}",
        g.state()
    );
    Ok(())
}

/// Checks whether `stream` is capturing.
pub(crate) fn expect_capturing<B: Backend>(
    b: &B,
    stream: &B::Stream,
    capturing: bool,
    when: &str,
) -> CaseResult {
    let now = b.is_capturing(stream).ctx("is_capturing")?;
    ensure!(
        now == capturing,
        "{when}: is_capturing(stream) is {now}, expected {capturing}"
    );
    Ok(())
}

/// A new graph with `options`.
pub(crate) fn new_graph<B: Backend>(b: &B, options: GraphOptions) -> Result<B::Graph, String> {
    b.graph(options).ctx("backend.graph(options)")
}

/// Captures `x += 1` into `g` on `stream` (the stream is current only during the capture).
pub(crate) fn capture_add_one<B: Backend>(
    b: &B,
    stream: &B::Stream,
    g: &mut B::Graph,
    x: &B::Buffer<f32>,
) -> CaseResult {
    b.capture_on(stream, g, || b.add_scalar(x, 1.0))
        .ctx("capture of x += 1")
}

/// Replays `g` with `stream` current.
pub(crate) fn replay_on<B: Backend>(b: &B, stream: &B::Stream, g: &mut B::Graph) -> CaseResult {
    let _current = on_stream(b, stream)?;
    g.replay().ctx("replay")
}

/// After a misuse: `reset()` must bring `g` back to `Empty`, and it must then capture and
/// replay correctly (`x += 1` twice gives 2).
pub(crate) fn recaptures_after_reset<B: Backend>(b: &B, g: &mut B::Graph) -> CaseResult {
    g.reset();
    expect_state(g, GraphState::Empty, "after reset()")?;
    let x = b.alloc_from(&[0.0; 8]).ctx("alloc_from")?;
    let stream = b.new_stream().ctx("new_stream")?;
    capture_add_one(b, &stream, g, &x)
        .map_err(|e| format!("capturing again after reset(): {e}"))?;
    replay_on(b, &stream, g)?;
    replay_on(b, &stream, g)?;
    expect_all(b, &x, 2.0, "two replays of x += 1 captured after reset()")?;
    g.reset();
    Ok(())
}

/// Runs `f`, which is expected to panic, without printing the panic message (a deliberate
/// panic is not news). Returns the panic message, or `None` if `f` returned.
pub(crate) fn expect_panic<R>(f: impl FnOnce() -> R) -> Option<String> {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    match result {
        Ok(_) => None,
        Err(payload) => Some(crate::report::panic_message(&*payload)),
    }
}

/// A buffer of `len` elements `0, 1, 2, ...` scaled by `step`.
pub(crate) fn ramp(len: usize, step: f32) -> Vec<f32> {
    (0..len).map(|i| i as f32 * step).collect()
}

/// Runs `f` on a new thread and waits for it; a panic there becomes a failure message naming
/// `what`.
pub(crate) fn on_other_thread<T: Send>(
    what: &str,
    f: impl FnOnce() -> T + Send,
) -> Result<T, String> {
    std::thread::scope(|s| s.spawn(f).join()).map_err(|payload| {
        format!(
            "{what} on another thread panicked: {}",
            crate::report::panic_message(&*payload)
        )
    })
}
