//! `SuiteConfig`: how much random testing the property cases do.

/// Sizes of the randomized cases.
///
/// Defaults are meant for the mock; slower devices lower them through the environment (one
/// variable per field, named by the constants below: [`PROGRAMS_ENV`], [`SEQUENCES_ENV`],
/// [`LIFETIMES_ENV`], [`STRESS_CYCLES_ENV`], [`REPETITIONS_ENV`], [`TORCH_REPLAYS_ENV`],
/// [`STREAM_ORDER_ELEMENTS_ENV`], [`CAPTURE_RACE_ROUNDS_ENV`]).
/// `ACCEL_GRAPH_TORCH_REPLAYS` sets the replays of the PyTorch-parity group's long replay
/// check (`11.06 test_graph_capture_reset_recapture`): 10 by default, to keep CI fast; the
/// GPU run sets 1000, the count the PyTorch-parity acceptance asks for.
///
/// ```
/// use accel_graph_conformance::SuiteConfig;
/// let config = SuiteConfig::default();
/// assert_eq!((config.programs, config.api_sequences), (1000, 10000));
/// assert_eq!(config.torch_replays, 10);
/// assert_eq!((config.lifetime_programs, config.stress_cycles), (10000, 1000));
/// assert_eq!((config.stream_order_elements, config.capture_race_rounds), (1 << 20, 10000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteConfig {
    /// Random programs of the differential case (replay == eager).
    pub programs: usize,
    /// Random API call sequences of the state-machine case.
    pub api_sequences: usize,
    /// Extra replays of the recaptured graph in `11.06 test_graph_capture_reset_recapture`
    /// (its value must stay the same over all of them).
    pub torch_replays: usize,
    /// Random programs of each buffer-lifetime case (9.09, 9.10).
    pub lifetime_programs: usize,
    /// Capture/replay cycles of each worker of the concurrency stress (9.06).
    pub stress_cycles: usize,
    /// Repetitions of the drop-then-replay scenario (9.01), and replays of the stream-order
    /// program (12.01).
    pub repetitions: usize,
    /// Elements of each buffer of the stream-order program (12.01): large enough that a GPU
    /// runs its two branches concurrently.
    pub stream_order_elements: usize,
    /// Captures begun and ended while other threads enqueue work on the same streams (12.05).
    pub capture_race_rounds: usize,
}

/// Environment variable overriding [`SuiteConfig::programs`].
pub const PROGRAMS_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_PROGRAMS";
/// Environment variable overriding [`SuiteConfig::api_sequences`].
pub const SEQUENCES_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_SEQUENCES";
/// Environment variable overriding [`SuiteConfig::torch_replays`].
pub const TORCH_REPLAYS_ENV: &str = "ACCEL_GRAPH_TORCH_REPLAYS";
/// Environment variable overriding [`SuiteConfig::lifetime_programs`].
pub const LIFETIMES_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_LIFETIMES";
/// Environment variable overriding [`SuiteConfig::stress_cycles`].
pub const STRESS_CYCLES_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_STRESS_CYCLES";
/// Environment variable overriding [`SuiteConfig::repetitions`].
pub const REPETITIONS_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_REPETITIONS";
/// Environment variable overriding [`SuiteConfig::stream_order_elements`].
pub const STREAM_ORDER_ELEMENTS_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_STREAM_ORDER_ELEMENTS";
/// Environment variable overriding [`SuiteConfig::capture_race_rounds`].
pub const CAPTURE_RACE_ROUNDS_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_CAPTURE_RACE_ROUNDS";

impl Default for SuiteConfig {
    fn default() -> Self {
        SuiteConfig {
            programs: 1000,
            api_sequences: 10000,
            torch_replays: 10,
            lifetime_programs: 10_000,
            stress_cycles: 1000,
            repetitions: 20,
            stream_order_elements: 1 << 20,
            capture_race_rounds: 10_000,
        }
    }
}

impl SuiteConfig {
    /// The defaults, overridden by the environment variables that are set. A value that is
    /// not a number is reported on stderr and the default kept.
    pub fn from_env() -> Self {
        let defaults = SuiteConfig::default();
        SuiteConfig {
            programs: read_env(PROGRAMS_ENV, defaults.programs),
            api_sequences: read_env(SEQUENCES_ENV, defaults.api_sequences),
            torch_replays: read_env(TORCH_REPLAYS_ENV, defaults.torch_replays),
            lifetime_programs: read_env(LIFETIMES_ENV, defaults.lifetime_programs),
            stress_cycles: read_env(STRESS_CYCLES_ENV, defaults.stress_cycles),
            repetitions: read_env(REPETITIONS_ENV, defaults.repetitions),
            stream_order_elements: read_env(
                STREAM_ORDER_ELEMENTS_ENV,
                defaults.stream_order_elements,
            ),
            capture_race_rounds: read_env(CAPTURE_RACE_ROUNDS_ENV, defaults.capture_race_rounds),
        }
    }
}

fn read_env(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => match text.trim().parse() {
            Ok(n) => n,
            Err(_) => {
                eprintln!("{name}={text:?} is not a count; using {default}");
                default
            }
        },
        Err(_) => default,
    }
}
