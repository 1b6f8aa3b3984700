//! `SuiteConfig`: how much random testing the property cases do.

/// Sizes of the randomized cases.
///
/// Defaults are meant for the mock; GPU runs lower them through the environment:
/// `ACCEL_GRAPH_CONFORMANCE_PROGRAMS` (differential programs) and
/// `ACCEL_GRAPH_CONFORMANCE_SEQUENCES` (API call sequences of the state-machine case).
///
/// ```
/// use accel_graph_conformance::SuiteConfig;
/// let config = SuiteConfig::default();
/// assert_eq!((config.programs, config.api_sequences), (1000, 10000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteConfig {
    /// Random programs of the differential case (replay == eager).
    pub programs: usize,
    /// Random API call sequences of the state-machine case.
    pub api_sequences: usize,
}

/// Environment variable overriding [`SuiteConfig::programs`].
pub const PROGRAMS_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_PROGRAMS";
/// Environment variable overriding [`SuiteConfig::api_sequences`].
pub const SEQUENCES_ENV: &str = "ACCEL_GRAPH_CONFORMANCE_SEQUENCES";

impl Default for SuiteConfig {
    fn default() -> Self {
        SuiteConfig {
            programs: 1000,
            api_sequences: 10000,
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
