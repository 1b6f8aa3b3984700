//! Writes a captured CUDA graph as DOT through `cuGraphDebugDotPrint`, and prints the
//! backend-agnostic topology next to it.
//!
//! Run: `cargo run -p accel-graph-cuda --example debug_dump -- graph.dot` (needs a GPU).

use std::{path::PathBuf, process::ExitCode};

use accel_graph_api::prelude::*;
use accel_graph_cuda::CudaBackend;

fn main() -> ExitCode {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "cuda_graph.dot".into()),
    );
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("debug_dump: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &std::path::Path) -> accel_graph_api::Result<()> {
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            println!("debug_dump: skipped: {e}");
            return Ok(());
        }
    };
    let x = backend.alloc_from(&[1.0; 1024])?;
    let y = backend.alloc(1024)?;
    let stream = backend.new_stream()?;
    let mut graph = backend.graph(GraphOptions::new())?;
    graph.enable_debug_mode();
    backend.capture_on(&stream, &mut graph, || {
        backend.fill(&y, 0.5)?;
        backend.add_scalar(&x, 1.0)?;
        backend.axpy(&y, 2.0, &x)?;
        backend.copy(&x, &y)
    })?;
    graph.debug_dump(path)?;
    let dot = std::fs::read_to_string(path).map_err(|e| GraphError::io(path, e))?;
    println!("debug_dump: wrote {} ({} bytes)", path.display(), dot.len());
    for node in graph.nodes()?.nodes {
        println!("  node {}: {} {}", node.id, node.kind, node.label);
    }
    let missing: Vec<&str> = ["accel_graph_add_scalar", "accel_graph_axpy"]
        .into_iter()
        .filter(|k| !dot.contains(k))
        .collect();
    if !missing.is_empty() {
        return Err(GraphError::ArgumentMismatch(format!(
            "the DOT file does not name kernels {missing:?}"
        )));
    }
    println!("debug_dump: OK");
    Ok(())
}
