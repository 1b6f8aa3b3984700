//! Debug dump: capture a few ops with debug mode on, write the graph as DOT, print its nodes,
//! and render PNG and SVG with Graphviz `dot` when it is installed.

use std::{
    path::PathBuf,
    process::{Command, ExitCode},
};

use accel_graph::{AcceleratorGraph, Backend, BackendJob, CaptureExt, GraphOptions, Result};
use accel_graph_examples::{BackendArg, exit_code, init_logging};
use clap::Parser;

/// Write a captured graph as DOT (and PNG/SVG with Graphviz).
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    backend: BackendArg,
    /// Output path of the DOT file; .png and .svg are written beside it.
    #[arg(long, default_value = "graph.dot")]
    out: PathBuf,
}

impl BackendJob for Cli {
    type Output = Result<()>;
    fn run<B: Backend>(self, backend: &B) -> Result<()> {
        let x = backend.alloc_from(&[1.0; 256])?;
        let y = backend.alloc_from(&[2.0; 256])?;
        let stream = backend.new_stream()?;
        let _current = backend.use_stream(&stream)?;
        let mut graph = backend.graph(GraphOptions::new())?;
        graph.enable_debug_mode();
        graph.capture(|| {
            backend.add_scalar(&x, 1.0)?;
            backend.axpy(&y, 0.5, &x)?;
            backend.scale(&y, 2.0)?;
            backend.copy(&x, &y)
        })?;
        graph.debug_dump(&self.out)?;
        let topology = graph.nodes()?;
        println!(
            "{}: wrote {} ({} nodes, {} edges)",
            backend.kind(),
            self.out.display(),
            topology.len(),
            topology.edges.len()
        );
        for node in &topology.nodes {
            println!(
                "  node {:>2} {:<10} {}",
                node.id,
                node.kind.to_string(),
                node.label
            );
        }
        for ext in ["png", "svg"] {
            let target = self.out.with_extension(ext);
            match Command::new("dot")
                .arg(format!("-T{ext}"))
                .arg(&self.out)
                .arg("-o")
                .arg(&target)
                .status()
            {
                Ok(s) if s.success() => println!("rendered {}", target.display()),
                Ok(s) => println!("graphviz failed on {} ({s})", target.display()),
                Err(_) => {
                    println!("graphviz `dot` not installed: skipping {ext} rendering");
                    break;
                }
            }
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
