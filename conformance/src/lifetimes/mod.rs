//! The buffer-lifetime differential test: random programs of legal actions — buffers
//! allocated and dropped (inside captures too), graphs captured, replayed, reset, recaptured and
//! dropped, pools shared through handles and `pool()` — run on a backend and on one reference
//! model (`model.rs`), compared value for value, with the rules the device must keep when it
//! hands memory out, and memory back to where it started at the end.
//!
//! Two contracts ([`Contract`]): PyTorch's (a plain buffer a live graph uses is never dropped;
//! pool buffers are dropped at any time) and "any handle dropped at any time" (what the
//! keep-alive of captured memory makes legal).
//!
//! Programs are drawn from seeds, so a failure names the seed that reproduces it. A program
//! that crashes the process or hangs is caught by running programs in child processes
//! ([`isolation`]); failing programs are shrunk (in the process for wrong values and refusals,
//! through child processes for crashes and hangs).

mod action;
mod interpreter;
pub mod isolation;
mod model;

use std::panic::{self, AssertUnwindSafe};

use accel_graph_api::Backend;
use proptest::{
    strategy::{Strategy, ValueTree},
    test_runner::{Config, RngAlgorithm, TestRng, TestRunner},
};

use action::Action;
use interpreter::{Failure, FailureKind, Tally};

pub use isolation::{
    CHILD_FLAG, Finding, Summary, Verdict, child_main, run_in_process, run_isolated,
};

/// The user contract programs keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Contract {
    /// PyTorch's: plain buffers a live graph uses are never dropped; pool buffers are dropped
    /// at any time, inside captures too.
    PyTorch,
    /// Any handle dropped at any time (legal with the keep-alive of captured memory).
    AnyDrop,
}

impl Contract {
    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Contract::PyTorch => "pytorch",
            Contract::AnyDrop => "any-drop",
        }
    }

    /// Parses [`Contract::name`].
    pub fn parse(text: &str) -> Option<Self> {
        [Contract::PyTorch, Contract::AnyDrop]
            .into_iter()
            .find(|c| c.name() == text)
    }
}

/// The program of `seed` (the same on every run and every machine), as a shrinkable tree.
fn tree(contract: Contract, seed: u64) -> Box<dyn ValueTree<Value = Vec<Action>>> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8] = contract as u8;
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    match action::program().new_tree(&mut runner) {
        Ok(tree) => Box::new(tree),
        // The strategy has no filter that could reject every value.
        Err(reason) => unreachable!("drawing a program failed: {reason}"),
    }
}

/// The program of `seed`, with the shrinking steps `path` applied (`true`: simplify, `false`:
/// complicate), as [`shrink`] found them.
pub(crate) fn program(contract: Contract, seed: u64, path: &[bool]) -> Vec<Action> {
    let mut t = tree(contract, seed);
    for &simplify in path {
        if simplify {
            t.simplify();
        } else {
            t.complicate();
        }
    }
    t.current()
}

/// Runs one program in this process, a panic counted as a failure.
pub(crate) fn run_one<B: Backend>(
    backend: &B,
    stream: &B::Stream,
    contract: Contract,
    program: &[Action],
) -> Result<Tally, Failure> {
    match panic::catch_unwind(AssertUnwindSafe(|| {
        interpreter::run(backend, stream, contract, program)
    })) {
        Ok(result) => result,
        Err(payload) => Err(Failure {
            kind: FailureKind::Refused,
            step: 0,
            message: format!("panicked: {}", crate::report::panic_message(&*payload)),
        }),
    }
}

/// Shrinks the failing program of `seed` with `fails` deciding whether a candidate still
/// fails; returns the shrinking path of the smallest failing program found (at most
/// `budget` candidates tried).
pub(crate) fn shrink(
    contract: Contract,
    seed: u64,
    budget: usize,
    mut fails: impl FnMut(&[bool]) -> bool,
) -> Vec<bool> {
    let mut t = tree(contract, seed);
    let mut path: Vec<bool> = Vec::new();
    let mut accepted = path.clone();
    for _ in 0..budget {
        let moved = if fails(&path) {
            accepted = path.clone();
            path.push(true);
            t.simplify()
        } else {
            path.push(false);
            t.complicate()
        };
        if !moved {
            break;
        }
    }
    accepted
}

#[cfg(test)]
mod tests {
    use accel_graph_api::Backend;
    use accel_graph_mock::MockBackend;

    use super::*;

    /// The generator must reach what the test is about: captures, replays of graphs whose
    /// buffers were dropped, comparisons.
    #[test]
    fn programs_exercise_captures_replays_and_drops() {
        let backend = MockBackend::new();
        let stream = backend.new_stream().unwrap();
        let (mut run, mut replays, mut compared, mut skipped) = (0, 0, 0, 0);
        for seed in 0..500 {
            let p = program(Contract::AnyDrop, seed, &[]);
            let tally = run_one(&backend, &stream, Contract::AnyDrop, &p).unwrap();
            run += tally.run;
            skipped += p.len() - tally.run;
            replays += tally.replays;
            compared += tally.compared;
        }
        println!("run {run}, skipped {skipped}, replays {replays}, compared {compared}");
        assert!(replays > 500, "too few replays: {replays}");
        assert!(compared > 10_000, "too few comparisons: {compared}");
    }
}
