//! §5.14: random API call sequences checked against a model of PyTorch's graph state machine.
//!
//! Each sequence mixes graph calls (capture_begin/end, instantiate, replay, reset, pool,
//! debug mode and dumps, nodes), graphs with random options (keep_graph, shared, invalid and
//! forged pools, capture modes), buffer allocation and release, portable ops, stream switches,
//! synchronizes, downloads and `empty_cache`. After every call the model's prediction is
//! checked: the result (success or the exact error variant), every graph's `state()`, which
//! streams are capturing, the current stream. Nothing may panic, and once everything is dropped
//! the backend holds exactly the memory it held before the sequence.
//!
//! Buffers are dropped whenever the sequence says so, also while a graph's captured work uses
//! them: the graph keeps their memory, so every later replay must still succeed.
//!
//! Where CUDA leaves an outcome open (does freeing memory during someone else's capture
//! invalidate it?), the model accepts either outcome; where a call's outcome itself is open
//! (eager work on a legacy-style default stream during a capture, work on an invalidated
//! capture), the sequence skips the call. Every such call is counted and printed.
//!
//! * [`actions`]: the calls and the random sequences;
//! * [`model`]: the state machine that predicts each call's outcome;
//! * [`runner`]: makes the calls on the backend and checks them against the model.

mod actions;
mod model;
mod runner;

use std::cell::Cell;

use accel_graph_api::Backend;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::{
    SuiteConfig, Target,
    check::{CaseResult, Ctx},
};

/// Counts over the whole case.
#[derive(Default)]
struct Counters {
    sequences: Cell<usize>,
    checked: Cell<usize>,
    not_applicable: Cell<usize>,
    backend_defined: Cell<usize>,
}

impl Counters {
    fn count(&self, step: runner::Step) {
        let counter = match step {
            runner::Step::Checked => &self.checked,
            runner::Step::NotApplicable => &self.not_applicable,
            runner::Step::BackendDefined => &self.backend_defined,
        };
        counter.set(counter.get() + 1);
    }

    fn sequence_done(&self) {
        self.sequences.set(self.sequences.get() + 1);
    }
}

/// 5.14: [`SuiteConfig::api_sequences`] seeded random sequences (10,000 by default), each
/// checked call by call against the model.
pub(crate) fn state_machine<B: Backend>(t: &Target<B>) -> CaseResult {
    let b = t.backend();
    let n = SuiteConfig::from_env().api_sequences;
    let counters = Counters::default();
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let streams = vec![
        b.default_stream(),
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    ];
    debug_assert_eq!(streams.len(), actions::STREAMS);
    let config = Config {
        cases: n.min(u32::MAX as usize) as u32,
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    };
    let mut proptest =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::XorShift));
    let result = proptest.run(&actions::sequence(), |actions| {
        runner::run_sequence(b, &streams, dir.path(), &actions, &counters)
            .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, actions)) => {
            return Err(format!("{reason}\nminimal failing sequence: {actions:?}"));
        }
        Err(TestError::Abort(reason)) => return Err(format!("random testing aborted: {reason}")),
    }
    println!(
        "5.14: {} API sequences ran: {} calls checked against the model, {} not applicable \
         (empty slot), {} left out as backend-defined",
        counters.sequences.get(),
        counters.checked.get(),
        counters.not_applicable.get(),
        counters.backend_defined.get()
    );
    Ok(())
}
