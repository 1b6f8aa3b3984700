//! §5.14: random API call sequences checked against a model of PyTorch's graph state machine.
//!
//! Each sequence mixes graph calls (capture_begin/end, instantiate, replay, reset, pool,
//! debug mode and dumps, nodes), graphs with random options (keep_graph, shared, invalid and
//! forged pools, capture modes), buffer allocation (of lengths a device holds and of lengths up
//! to `usize::MAX`) and release, portable ops, stream switches, synchronizes, downloads,
//! `empty_cache`, host callbacks that drop a buffer of the sequence when they run (captured:
//! in the middle of every replay), and the utilities (a graphed callable, a static buffer
//! loader, a bucketed cache) — over **two instances of one device** whose addresses overlap
//! (both are opened fresh, so they hand out the same addresses on the mock): every call goes
//! through one of them, on buffers, streams and pool ids of either, and those of the other
//! instance must be refused (`ForeignObject`, `InvalidPoolId`), never mistaken for the
//! instance's own. After every call the model's prediction is checked: the result (success or
//! the exact error variant), every graph's `state()`, which streams of each instance are
//! capturing, each instance's current stream, what the utilities hold. Nothing may panic, and
//! once everything is dropped each instance holds exactly the memory it held before the
//! sequence.
//!
//! Buffers are dropped whenever the sequence says so, also while a graph's captured work uses
//! them — by the sequence, or by a host node of the graph itself mid-replay: the graph keeps
//! their memory, so every later node and replay must still succeed. Calls are drawn one by one
//! and, now and then, as an *episode* (a capture of a few ops, a buffer they used dropped or
//! replaced, a replay) so that this path is walked often; each call is still checked alone.
//!
//! Where CUDA leaves an outcome open (does freeing memory during someone else's capture
//! invalidate it?), the model accepts either outcome; where a call's outcome itself is open
//! (eager work on a legacy-style default stream during a capture, work on an invalidated
//! capture), the sequence skips the call. Every such call is counted and printed. Where the
//! suite can open only one instance, the sequences run on it alone.
//!
//! * [`actions`]: the calls and the random sequences;
//! * [`model`]: the state machine that predicts each call's outcome;
//! * [`runner`]: makes the calls on the backend and checks them against the model.

mod actions;
mod model;
mod runner;

use std::{
    cell::{Cell, RefCell},
    collections::BTreeMap,
};

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
    /// Calls checked, per kind of call.
    per_kind: RefCell<BTreeMap<&'static str, usize>>,
    /// Buffers of one instance refused by the other at an address of one of its own buffers.
    address_collisions: Cell<usize>,
}

impl Counters {
    fn count(&self, action: &actions::Action, step: runner::Step) {
        if step == runner::Step::Checked {
            *self.per_kind.borrow_mut().entry(action.kind()).or_default() += 1;
        }
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
/// checked call by call against the model, on two instances of the device opened fresh for
/// each sequence (or the suite's one instance, when it cannot open another).
pub(crate) fn state_machine<B: Backend>(t: &Target<B>) -> CaseResult {
    let n = SuiteConfig::from_env().api_sequences;
    let counters = Counters::default();
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    // Two instances opened fresh for each sequence, so that they hand out overlapping
    // addresses (on the mock, the same ones), or the suite's one instance with its streams.
    let single = if t.can_open_another() {
        None
    } else {
        let b = t.backend().clone();
        let streams = streams_of(&b)?;
        Some((vec![b], vec![streams]))
    };
    let open = || -> Result<Instances<B>, String> {
        if let Some(single) = &single {
            return Ok(single.clone());
        }
        let instances = (0..actions::INSTANCES)
            .map(|_| t.another_instance())
            .collect::<Result<Vec<B>, _>>()?;
        let streams = instances
            .iter()
            .map(streams_of)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((instances, streams))
    };
    let instances_used = Cell::new(0);
    let config = Config {
        cases: n.min(u32::MAX as usize) as u32,
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    };
    let mut proptest =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::XorShift));
    let result = proptest.run(&actions::sequence(), |actions| {
        let (instances, streams) = open().map_err(TestCaseError::fail)?;
        instances_used.set(instances.len());
        runner::run_sequence(&instances, &streams, dir.path(), &actions, &counters)
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
        "5.14: {} API sequences ran on {} instance(s): {} calls checked against the model, {} \
         not applicable (empty slot, utility during a capture), {} left out as backend-defined",
        counters.sequences.get(),
        instances_used.get(),
        counters.checked.get(),
        counters.not_applicable.get(),
        counters.backend_defined.get()
    );
    let per_kind = counters.per_kind.borrow();
    let kinds: Vec<String> = per_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("5.14: checked per call: {}", kinds.join(", "));
    println!(
        "5.14: {} refused foreign buffers sat at an address of the refusing instance's own",
        counters.address_collisions.get()
    );
    Ok(())
}

/// The instances of a sequence, and each one's streams.
type Instances<B> = (Vec<B>, Vec<Vec<<B as Backend>::Stream>>);

/// The streams of a sequence on instance `b`: its default stream and two new ones.
fn streams_of<B: Backend>(b: &B) -> Result<Vec<B::Stream>, String> {
    let streams = vec![
        b.default_stream(),
        b.new_stream().ctx("new_stream")?,
        b.new_stream().ctx("new_stream")?,
    ];
    debug_assert_eq!(streams.len(), actions::STREAMS);
    Ok(streams)
}
