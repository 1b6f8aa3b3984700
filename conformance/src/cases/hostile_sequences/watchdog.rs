//! The watchdog: a thread that aborts the process when a sequence runs for longer than its
//! bound, after printing what the sequence was doing. A hang must fail a CI run, not stall it
//! until the job's own timeout kills it without a word about the cause.

use std::{
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// Seconds a sequence may run before the watchdog calls it a hang.
pub(super) const HANG_SECS_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_HANG_SECS";
/// The bound when [`HANG_SECS_ENV`] is unset: far above what any sequence takes (a
/// sequence takes milliseconds on the mock), so only a hang reaches it.
const DEFAULT_HANG_SECS: u64 = 20;

/// What a sequence in progress reports when it hangs: read by the watchdog thread while the
/// sequence's threads may hold any lock, so it must take none that they could hold.
pub(super) type Describe = Arc<dyn Fn() -> String + Send + Sync>;

struct Armed {
    since: Instant,
    what: Describe,
}

#[derive(Default)]
struct State {
    armed: Option<Armed>,
    stop: bool,
}

/// A watchdog thread, stopped when dropped.
pub(super) struct Watchdog {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    limit: Duration,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Watchdog {
    /// Starts the watchdog of `case`, with the bound [`HANG_SECS_ENV`] sets.
    pub(super) fn start(case: &'static str) -> Result<Self, String> {
        let secs = match std::env::var(HANG_SECS_ENV) {
            Ok(text) => text
                .trim()
                .parse()
                .map_err(|_| format!("{HANG_SECS_ENV}={text:?} is not a number of seconds"))?,
            Err(_) => DEFAULT_HANG_SECS,
        };
        let limit = Duration::from_secs(secs);
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("hostile-sequences-watchdog".to_owned())
            .spawn(move || watch(case, limit, &watched))
            .map_err(|e| format!("starting the watchdog thread: {e}"))?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
            limit,
        })
    }

    /// The bound.
    pub(super) fn limit(&self) -> Duration {
        self.limit
    }

    /// Starts the clock of a sequence that `what` describes.
    pub(super) fn arm(&self, what: Describe) {
        lock(&self.shared.0).armed = Some(Armed {
            since: Instant::now(),
            what,
        });
    }

    /// The sequence finished.
    pub(super) fn disarm(&self) {
        lock(&self.shared.0).armed = None;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        lock(&self.shared.0).stop = true;
        self.shared.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn watch(case: &'static str, limit: Duration, shared: &(Mutex<State>, Condvar)) {
    let (state, wake) = shared;
    let mut guard = lock(state);
    loop {
        if guard.stop {
            return;
        }
        let wait = match &guard.armed {
            Some(armed) => {
                let elapsed = armed.since.elapsed();
                if elapsed >= limit {
                    let what = Arc::clone(&armed.what);
                    drop(guard);
                    hang(case, elapsed, &what);
                }
                (limit - elapsed).min(Duration::from_millis(200))
            }
            None => Duration::from_millis(200),
        };
        guard = wake
            .wait_timeout(guard, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Reports the hang and aborts: the hung threads cannot be stopped, and returning would leave
/// the test binary waiting on them for good.
fn hang(case: &'static str, elapsed: Duration, what: &Describe) -> ! {
    eprintln!(
        "\naccel-graph conformance: HANG in {case:?}: a sequence has not finished after {:.1} s \
         (the bound is {HANG_SECS_ENV}, {DEFAULT_HANG_SECS} s by default).\n{}\n\
         Aborting the process so that the run fails instead of stalling. To see where it \
         hangs, run it alone (a random sequence: as its first line says) with a larger bound \
         and attach a debugger (`gdb -p <pid> -batch -ex 'thread apply all bt'`).",
        elapsed.as_secs_f64(),
        what()
    );
    std::process::abort()
}
