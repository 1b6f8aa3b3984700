//! Shared pieces of the accel-graph examples: the command-line backend choice, logging set-up,
//! small generic workloads that run unchanged on every backend, and a model step written once
//! ([`mlp`]).

pub mod mlp;

use accel_graph::{
    AcceleratorGraph, Backend, BackendChoice, CaptureExt, GraphOptions, GraphState, Result,
};

/// `--backend` values: `mock`, `cuda`, `hip`, `wgpu`, or `auto` (the best one that works here).
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArg {
    /// Backend to run on: mock, cuda, hip, wgpu or auto (best available). Defaults to
    /// $ACCEL_GRAPH_BACKEND, else mock.
    #[arg(long)]
    pub backend: Option<String>,
}

impl BackendArg {
    /// The choice: the flag, else `ACCEL_GRAPH_BACKEND`, else the mock.
    pub fn choice(&self) -> Result<BackendChoice> {
        match &self.backend {
            Some(s) => s.parse(),
            None => BackendChoice::from_env(BackendChoice::Only(accel_graph::BackendKind::Mock)),
        }
    }
}

/// The backend's kind and device as the examples print them: `kind (device name)`.
pub fn backend_label<B: Backend>(backend: &B) -> String {
    format!(
        "{} ({})",
        backend.kind(),
        backend.capabilities().device_name
    )
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings), so PyTorch-style warnings such
/// as "the graph is empty" are visible.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// A binary's exit status for `result`: success, or the error printed to stderr as its message
/// (`error: the cuda backend is unavailable: ...`) and failure. (A `main` that returns the
/// `Result` would print the error's `Debug` form, a struct dump, instead.)
pub fn exit_code(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What [`add_one_replayed`] observed.
#[derive(Debug, Clone, PartialEq)]
pub struct AddOneResult {
    /// `x` right after capture (capture records, it does not run).
    pub after_capture: Vec<f32>,
    /// `x` after each replay.
    pub after_replays: Vec<Vec<f32>>,
}

/// The PyTorch documentation example, generic over the backend:
///
/// ```python
/// x = torch.zeros([n]); stream = torch.Stream(); graph = torch.accelerator.Graph()
/// with stream, graph:
///     x += 1
/// graph.replay()
/// ```
///
/// ```
/// let r = accel_graph_examples::add_one_replayed(&accel_graph::mock::MockBackend::new(), 4, 2)?;
/// assert_eq!(r.after_capture, vec![0.0; 4]);
/// assert_eq!(r.after_replays.last().unwrap(), &vec![2.0; 4]);
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
pub fn add_one_replayed<B: Backend>(backend: &B, n: usize, replays: usize) -> Result<AddOneResult> {
    let x = backend.alloc_from(&vec![0.0; n])?;
    let stream = backend.new_stream()?;
    let mut graph = backend.graph(GraphOptions::new())?;
    // `with stream, graph: x += 1` (the capture is discarded if the body fails).
    backend.capture_on(&stream, &mut graph, || backend.add_scalar(&x, 1.0))?;
    debug_assert_eq!(graph.state(), GraphState::Ready);
    let after_capture = backend.download(&x)?;
    let mut after_replays = Vec::with_capacity(replays);
    for _ in 0..replays {
        graph.replay()?;
        after_replays.push(backend.download(&x)?);
    }
    Ok(AddOneResult {
        after_capture,
        after_replays,
    })
}

/// A small "step" of portable ops (`y = 0.5*y + 2*x + 1`), used to compare eager and replayed
/// execution on any backend. Returns `y` after `steps` replays and after `steps` eager runs.
///
/// ```
/// let (replayed, eager) = accel_graph_examples::replay_matches_eager(
///     &accel_graph::mock::MockBackend::new(), 16, 5)?;
/// assert_eq!(replayed, eager);
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
pub fn replay_matches_eager<B: Backend>(
    backend: &B,
    n: usize,
    steps: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let init: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let step = |y: &B::Buffer<f32>, x: &B::Buffer<f32>| -> Result<()> {
        backend.scale(y, 0.5)?;
        backend.axpy(y, 2.0, x)?;
        backend.add_scalar(y, 1.0)
    };
    let stream = backend.new_stream()?;
    let _current = backend.use_stream(&stream)?;

    let (x, y) = (backend.alloc_from(&init)?, backend.alloc_from(&init)?);
    let mut graph = backend.graph(GraphOptions::new())?;
    graph.capture(|| step(&y, &x))?;
    for _ in 0..steps {
        graph.replay()?;
    }
    let replayed = backend.download(&y)?;

    let (x2, y2) = (backend.alloc_from(&init)?, backend.alloc_from(&init)?);
    for _ in 0..steps {
        step(&y2, &x2)?;
    }
    Ok((replayed, backend.download(&y2)?))
}
