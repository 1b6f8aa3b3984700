//! The command-line pieces the engine's binaries share: the backend choice and the element
//! type.

use accel_graph::{BackendChoice, BackendKind, Result};

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
    ///
    /// ```
    /// use accel_graph_decode::cli::BackendArg;
    /// let arg = BackendArg { backend: Some("mock".to_owned()) };
    /// assert!(arg.choice().is_ok());
    /// let bad = BackendArg { backend: Some("nonsense".to_owned()) };
    /// assert!(bad.choice().is_err());
    /// ```
    pub fn choice(&self) -> Result<BackendChoice> {
        match &self.backend {
            Some(s) => s.parse(),
            None => BackendChoice::from_env(BackendChoice::Only(BackendKind::Mock)),
        }
    }
}

/// `--dtype` values: the element type of weights, activations and cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    /// `f32`.
    F32,
    /// `half::bf16`.
    Bf16,
}

impl Dtype {
    /// The name, as the flag and the weight dumps spell it.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }
}
