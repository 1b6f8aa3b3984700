//! The command-line pieces the engine's binaries share: the backend choice, the model (a
//! preset or a weight dump) and its element type, logging, the quantiles of timed steps and
//! the binaries' error type.

use std::path::PathBuf;

use accel_graph::{BackendChoice, BackendKind, GraphError, Result};

use crate::{
    Config, DecodeElement,
    dump::{self, DumpHeader},
    init::prompt,
    model::HostWeights,
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

    /// The element type of a weight dump holding `theirs` (its header's `dtype`), checked
    /// against `wanted` (the flag, if given). Errors
    /// ([`GraphError::ArgumentMismatch`]): a type the engine does not run, or another than
    /// the flag's.
    ///
    /// ```
    /// use accel_graph_decode::cli::Dtype;
    /// assert_eq!(Dtype::of_dump("bf16", None)?, Dtype::Bf16);
    /// assert!(Dtype::of_dump("bf16", Some(Dtype::F32)).is_err());
    /// assert!(Dtype::of_dump("f16", None).is_err());
    /// # Ok::<(), accel_graph::GraphError>(())
    /// ```
    pub fn of_dump(theirs: &str, wanted: Option<Dtype>) -> Result<Dtype> {
        let theirs = match theirs {
            "f32" => Dtype::F32,
            "bf16" => Dtype::Bf16,
            other => {
                return Err(GraphError::ArgumentMismatch(format!(
                    "the dump holds {other} weights"
                )));
            }
        };
        match wanted {
            Some(w) if w != theirs => Err(GraphError::ArgumentMismatch(format!(
                "--dtype {} asked for, the dump holds {}",
                w.name(),
                theirs.name()
            ))),
            _ => Ok(theirs),
        }
    }
}

/// Logs to stderr: warnings, or with `trace` the library's and the engine's spans as they
/// close (captures, instantiations, warm-ups, with their durations). `RUST_LOG` overrides.
pub fn init_logging(trace: bool) {
    use tracing_subscriber::{EnvFilter, fmt::format::FmtSpan};
    let default = if trace { "info" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if trace {
        builder.with_span_events(FmtSpan::CLOSE).try_init()
    } else {
        builder.try_init()
    };
}

/// The `q`-quantile of sorted `v` by linear interpolation (as the PyTorch scripts compute it);
/// NaN for no value.
///
/// ```
/// use accel_graph_decode::cli::quantile;
/// assert_eq!(quantile(&[1.0, 2.0, 4.0], 0.5), 2.0);
/// assert_eq!(quantile(&[1.0, 2.0, 4.0], 0.75), 3.0);
/// assert!(quantile(&[], 0.5).is_nan());
/// ```
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let at = (v.len() - 1) as f64 * q;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
}

/// What the binaries fail with: the library's errors, a weight dump's, a tensor-parallel
/// set-up's — each shown as its own message.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The library's error (a bad command line is an `ArgumentMismatch`).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A weight dump could not be read or written.
    #[error(transparent)]
    Dump(#[from] crate::dump::DumpError),
    /// A tensor-parallel run could not be set up or failed on a rank.
    #[error(transparent)]
    Tp(#[from] crate::tp::TpError),
}

/// How a binary ends: success, or its error printed to standard error (`error: ...`) and a
/// failure status.
///
/// ```
/// use accel_graph_decode::cli::{CliError, bad, exit_code};
/// use std::process::ExitCode;
/// assert_eq!(exit_code::<CliError>(Ok(())), ExitCode::SUCCESS);
/// assert_eq!(exit_code(Err(bad("--rows 0"))), ExitCode::FAILURE);
/// ```
pub fn exit_code<E: std::fmt::Display>(
    result: std::result::Result<(), E>,
) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A command line the binary cannot run: `GraphError::ArgumentMismatch` with `message`.
///
/// ```
/// use accel_graph_decode::cli::{CliError, bad};
/// assert!(matches!(bad("--batches 0"), CliError::Graph(_)));
/// ```
pub fn bad(message: impl Into<String>) -> CliError {
    CliError::Graph(GraphError::ArgumentMismatch(message.into()))
}

/// The cache positions a benchmark needs: the context and the one each timed step writes, or
/// the prompt and the generated tokens (their last one is not fed back). `max_len` (the
/// `--max-len` flag) if given — an error if it is below that — else that rounded up to 64.
///
/// ```
/// use accel_graph_decode::cli::cache_len;
/// assert_eq!(cache_len(512, 16, 32, None)?, 576);
/// assert_eq!(cache_len(8, 16, 32, None)?, 64);
/// assert_eq!(cache_len(8, 16, 32, Some(100))?, 100);
/// assert!(cache_len(512, 16, 32, Some(256)).is_err());
/// assert!(cache_len(usize::MAX, 16, 32, None).is_err());
/// # Ok::<(), accel_graph_decode::cli::CliError>(())
/// ```
pub fn cache_len(
    context: usize,
    prompt: usize,
    tokens: usize,
    max_len: Option<usize>,
) -> std::result::Result<usize, CliError> {
    let too_long = || bad("--context, the prompt and --tokens need more positions than a usize");
    let needed = context
        .checked_add(1)
        .zip(prompt.checked_add(tokens.max(1) - 1))
        .map(|(a, b)| a.max(b))
        .ok_or_else(too_long)?;
    let len = match max_len {
        Some(len) => len,
        None => needed.checked_next_multiple_of(64).ok_or_else(too_long)?,
    };
    if len < needed {
        return Err(bad(format!(
            "--max-len {len} is below the {needed} positions the runs need (--context + 1, \
             prompt + --tokens - 1)"
        )));
    }
    Ok(len)
}

/// The model a binary runs: a preset with seeded random weights, or a weight dump
/// (`decode_bench --dump-weights`), with its fixed prompt.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Model preset: tiny, small (0.35 B parameters) or medium (1.45 B). Ignored with --weights.
    #[arg(long, default_value = "small")]
    pub config: String,
    /// Element type of weights, activations and cache (default bf16, or the dump's).
    #[arg(long, value_enum)]
    pub dtype: Option<Dtype>,
    /// Seed of the random weights and prompts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the model of this weight dump (its config and dtype) instead of a preset's.
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Tokens of the fixed prompt (when not from a dump).
    #[arg(long, default_value_t = 16)]
    pub prompt_len: usize,
}

/// The model [`ModelArgs`] name: its sizes, its name and its fixed prompt.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    /// The model's sizes (the cache's `max_len` as the preset or the dump has it).
    pub config: Config,
    /// The preset's name (the dump's preset, or `dump`).
    pub name: String,
    /// The fixed prompt: the dump's, else the seed's.
    pub prompt: Vec<u32>,
}

impl ModelArgs {
    /// The header of `--weights`, if given.
    pub fn header(&self) -> std::result::Result<Option<DumpHeader>, CliError> {
        Ok(self.weights.as_deref().map(dump::read_header).transpose()?)
    }

    /// The element type: `--dtype`, which must be the dump's if there is one; else bf16.
    pub fn dtype(&self, header: Option<&DumpHeader>) -> Result<Dtype> {
        match header {
            Some(h) => Dtype::of_dump(&h.dtype, self.dtype),
            None => Ok(self.dtype.unwrap_or(Dtype::Bf16)),
        }
    }

    /// The prompt of `--prompt-len` tokens the seed makes for a model of `config`.
    pub fn seeded_prompt(&self, config: &Config) -> Vec<u32> {
        prompt(self.seed, 0, self.prompt_len, config.vocab as u32)
    }

    /// The dump's model (`header`), or the preset's.
    ///
    /// ```
    /// use accel_graph_decode::cli::ModelArgs;
    /// let args = ModelArgs {
    ///     config: "tiny".to_owned(),
    ///     dtype: None,
    ///     seed: 1,
    ///     weights: None,
    ///     prompt_len: 4,
    /// };
    /// let model = args.resolve(None)?;
    /// assert_eq!((model.name.as_str(), model.prompt.len()), ("tiny", 4));
    /// # Ok::<(), accel_graph::GraphError>(())
    /// ```
    pub fn resolve(&self, header: Option<&DumpHeader>) -> Result<ModelChoice> {
        Ok(match header {
            Some(h) => ModelChoice {
                config: h.config,
                name: h.info.preset.clone().unwrap_or_else(|| "dump".to_owned()),
                prompt: if h.info.prompt.is_empty() {
                    self.seeded_prompt(&h.config)
                } else {
                    h.info.prompt.clone()
                },
            },
            None => {
                let config = Config::preset(&self.config)?;
                ModelChoice {
                    prompt: self.seeded_prompt(&config),
                    name: self.config.clone(),
                    config,
                }
            }
        })
    }

    /// The weights of a model of `config`: the dump's (whose sizes must still be `config`'s,
    /// but for how long the cache is and how attention is chunked), else the seed's.
    pub fn host_weights<T: DecodeElement>(
        &self,
        config: &Config,
    ) -> std::result::Result<HostWeights<T>, CliError> {
        let Some(dir) = &self.weights else {
            return Ok(HostWeights::random(config, self.seed));
        };
        let (header, weights) = dump::read::<T>(dir)?;
        let read = Config {
            max_len: config.max_len,
            attention_chunk: config.attention_chunk,
            ..header.config
        };
        if read != *config {
            return Err(bad("the dump's config changed while it was read"));
        }
        Ok(weights)
    }
}
