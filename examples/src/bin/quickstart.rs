//! Quickstart: PyTorch's `torch.accelerator.Graph` example (`x += 1` captured once, replayed)
//! on the mock, or on the best backend available with `--backend auto`.

use std::process::ExitCode;

use accel_graph::{Backend, BackendJob, Result};
use accel_graph_examples::{BackendArg, add_one_replayed, backend_label, exit_code, init_logging};
use clap::Parser;

/// Capture `x += 1` into a graph and replay it.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
    /// Elements of x.
    #[arg(long, default_value_t = 8)]
    n: usize,
    /// Replays.
    #[arg(long, default_value_t = 3)]
    replays: usize,
}

impl BackendJob for Cli {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        println!("backend: {}", backend_label(backend));
        let r = add_one_replayed(backend, self.n, self.replays)?;
        println!(
            "x after capture:  {:?}   (captured, not run)",
            r.after_capture
        );
        for (i, x) in r.after_replays.iter().enumerate() {
            println!("x after replay {}: {:?}", i + 1, x);
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    exit_code(
        cli.backend
            .choice()
            .and_then(|choice| accel_graph::run_on(choice, cli)?),
    )
}
