//! The same generic code, compiled once, run on every backend compiled into this build; a
//! backend without a device here is reported as skipped with the reason.

use accel_graph::{Backend, BackendChoice, BackendJob, Result};
use accel_graph_examples::{add_one_replayed, backend_label, init_logging, replay_matches_eager};

struct Demo;

impl BackendJob for Demo {
    type Output = Result<String>;
    fn run<B: Backend>(self, backend: &B) -> Result<String> {
        let add = add_one_replayed(backend, 4, 3)?;
        let (replayed, eager) = replay_matches_eager(backend, 64, 10)?;
        if replayed != eager {
            return Err(accel_graph::GraphError::ArgumentMismatch(format!(
                "replay differs from eager on {}",
                backend.kind()
            )));
        }
        Ok(format!(
            "{}: x after 3 replays = {:?}; 10 replayed steps == eager, bit for bit",
            backend_label(backend),
            add.after_replays.last().expect("3 replays")
        ))
    }
}

fn main() {
    init_logging();
    let mut failed = false;
    for kind in accel_graph::compiled_backends() {
        match accel_graph::run_on(BackendChoice::Only(kind), Demo) {
            Ok(Ok(line)) => println!("ran      {line}"),
            Ok(Err(e)) => {
                failed = true;
                println!("FAILED   {kind}: {e}");
            }
            Err(e) => println!("skipped  {kind}: {e}"),
        }
    }
    if failed {
        std::process::exit(1);
    }
}
