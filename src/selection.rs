//! Run-time backend selection: [`BackendChoice`] (from `ACCEL_GRAPH_BACKEND`) and the
//! [`BackendJob`] visitor that runs generic code on whichever backend was chosen.

use std::{fmt, str::FromStr};

use accel_graph_api::{Backend, BackendKind, GraphError, Result};

/// Which backend to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The best backend that is compiled in and works on this machine: CUDA, HIP, wgpu, then
    /// the mock.
    #[default]
    Auto,
    /// Exactly this backend (an error if it is not compiled in or has no device).
    Only(BackendKind),
}

/// The environment variable read by [`BackendChoice::from_env`].
pub const BACKEND_ENV: &str = "ACCEL_GRAPH_BACKEND";

impl BackendChoice {
    /// Reads `ACCEL_GRAPH_BACKEND` (`auto`, `mock`, `cuda`, `hip`, `wgpu`); `fallback` when it
    /// is unset or empty. A value that is not valid Unicode is an error naming the variable
    /// ([`GraphError::InvalidEnvironment`]), an unknown name is [`GraphError::UnknownBackend`]:
    /// neither falls back silently.
    pub fn from_env(fallback: BackendChoice) -> Result<Self> {
        match std::env::var(BACKEND_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(fallback),
            Err(std::env::VarError::NotUnicode(value)) => Err(GraphError::InvalidEnvironment {
                name: BACKEND_ENV,
                value: value.to_string_lossy().into_owned(),
            }),
        }
    }
}

impl FromStr for BackendChoice {
    type Err = GraphError;

    fn from_str(s: &str) -> Result<Self> {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(BackendChoice::Auto)
        } else {
            s.parse().map(BackendChoice::Only)
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendChoice::Auto => f.write_str("auto"),
            BackendChoice::Only(kind) => write!(f, "{kind}"),
        }
    }
}

/// Generic code to run on a backend chosen at run time (a visitor: Rust cannot pick a type
/// parameter at run time, so the chosen backend calls back into `run`).
///
/// ```
/// use accel_graph::{Backend, BackendChoice, BackendJob, BackendKind};
///
/// struct Name;
/// impl BackendJob for Name {
///     type Output = &'static str;
///     fn run<B: Backend>(self, backend: &B) -> &'static str {
///         backend.kind().name()
///     }
/// }
/// let name = accel_graph::run_on(BackendChoice::Only(BackendKind::Mock), Name)?;
/// assert_eq!(name, "mock");
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
pub trait BackendJob {
    /// What the job returns.
    type Output;
    /// Runs the job on `backend`.
    fn run<B: Backend>(self, backend: &B) -> Self::Output;
}

/// Backends compiled into this build, best first.
pub fn compiled_backends() -> Vec<BackendKind> {
    let mut kinds = Vec::new();
    if cfg!(feature = "cuda") {
        kinds.push(BackendKind::Cuda);
    }
    if cfg!(feature = "hip") {
        kinds.push(BackendKind::Hip);
    }
    if cfg!(feature = "wgpu") {
        kinds.push(BackendKind::Wgpu);
    }
    if cfg!(feature = "mock") {
        kinds.push(BackendKind::Mock);
    }
    kinds
}

/// Runs `job` on the backend `choice` names. With [`BackendChoice::Auto`], backends are tried
/// best first and the first that initialises runs the job; each one skipped is logged with its
/// reason.
pub fn run_on<J: BackendJob>(choice: BackendChoice, job: J) -> Result<J::Output> {
    match choice {
        BackendChoice::Only(kind) => run_on_kind(kind, job).map_err(|(e, _)| e),
        BackendChoice::Auto => {
            let mut job = job;
            let mut reasons = Vec::new();
            for kind in compiled_backends() {
                match run_on_kind(kind, job) {
                    Ok(out) => return Ok(out),
                    Err((e, returned)) => {
                        tracing::info!(backend = %kind, reason = %e, "backend skipped");
                        reasons.push(format!("{kind}: {e}"));
                        job = returned;
                    }
                }
            }
            Err(GraphError::BackendUnavailable {
                backend: "auto",
                reason: reasons.join("; "),
            })
        }
    }
}

/// Constructs `kind` and runs `job` on it; on failure hands the job back for the next try.
fn run_on_kind<J: BackendJob>(
    kind: BackendKind,
    job: J,
) -> std::result::Result<J::Output, (GraphError, J)> {
    fn go<B: Backend, J: BackendJob>(
        made: Result<B>,
        job: J,
    ) -> std::result::Result<J::Output, (GraphError, J)> {
        match made {
            Ok(backend) => Ok(job.run(&backend)),
            Err(e) => Err((e, job)),
        }
    }
    match kind {
        #[cfg(feature = "mock")]
        BackendKind::Mock => go(Ok(accel_graph_mock::MockBackend::new()), job),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => go(accel_graph_cuda::CudaBackend::new(0), job),
        #[cfg(feature = "hip")]
        BackendKind::Hip => go(accel_graph_hip::HipBackend::new(0), job),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => go(accel_graph_wgpu::WgpuBackend::new(0), job),
        #[allow(unreachable_patterns)]
        other => Err((
            GraphError::BackendUnavailable {
                backend: other.name(),
                reason: format!(
                    "not compiled in: enable the `{}` feature of accel-graph",
                    other.name()
                ),
            },
            job,
        )),
    }
}
