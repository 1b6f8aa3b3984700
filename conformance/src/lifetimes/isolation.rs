//! Programs run in child processes, so that a program crashing the process (a segmentation
//! fault inside a driver) or hanging is caught, counted and shrunk instead of ending the run.
//!
//! The parent re-runs its own executable (`current_exe`) with [`CHILD_FLAG`]; the test
//! harness hands such a run to [`child_main`] before anything else. A child runs a range of
//! seeds and prints one line per program (`ok <seed>` or `fail <seed> ...`); the parent reads
//! them with a deadline: a child that stops without finishing its range crashed on the next
//! seed, one that prints nothing for too long hangs on it. Either way the parent starts a new
//! child after that seed.

use std::{
    io::{BufRead, BufReader, Write},
    ops::Range,
    process::{Command, ExitCode, Stdio},
    sync::mpsc,
    time::Duration,
};

use accel_graph_api::{Backend, GraphError};

use super::{Contract, program, run_one, shrink};

/// The first argument of a child run.
pub const CHILD_FLAG: &str = "--accel-graph-lifetimes-child";

/// Set by a binary whose `main` hands [`CHILD_FLAG`] runs to [`child_main`] (the conformance
/// harness): only such a binary can be re-run as a child.
static CHILDREN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this process's executable runs [`child_main`] when given [`CHILD_FLAG`].
pub fn enable_children() {
    CHILDREN.store(true, std::sync::atomic::Ordering::Release);
}

/// Whether programs can run in child processes of this executable.
pub fn children_enabled() -> bool {
    CHILDREN.load(std::sync::atomic::Ordering::Acquire)
}

/// Candidates tried when shrinking one failing program.
const SHRINK_BUDGET: usize = 96;

/// How a program ended, as the parent counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Ran, every comparison held.
    Passed,
    /// Failed in the child: a wrong value, a refused legal action, an aliasing violation, a
    /// leak (the kind and message).
    Failed(String),
    /// The child process died while running it.
    Crashed(String),
    /// The child printed nothing for the deadline.
    Hung,
}

/// One failing program: its seed, the shrinking path of its smallest failing form, and how
/// it failed.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The program's seed.
    pub seed: u64,
    /// How it ended.
    pub verdict: Verdict,
    /// The smallest failing program found, as text.
    pub minimal: String,
}

/// Counts of one isolated run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Programs run.
    pub programs: u64,
    /// Programs passed.
    pub passed: u64,
    /// Wrong values, refusals, aliasing, leaks.
    pub failed: u64,
    /// Processes that died.
    pub crashed: u64,
    /// Programs that hung.
    pub hung: u64,
    /// Child processes started.
    pub children: u64,
    /// The failing programs.
    pub findings: Vec<Finding>,
}

impl Summary {
    /// True when every program passed.
    pub fn clean(&self) -> bool {
        self.failed == 0 && self.crashed == 0 && self.hung == 0 && self.passed == self.programs
    }

    /// The one-line report.
    pub fn line(&self, contract: Contract) -> String {
        format!(
            "lifetimes ({}): {} programs in {} child processes: {} passed, {} wrong or refused, \
             {} crashed, {} hung",
            contract.name(),
            self.programs,
            self.children,
            self.passed,
            self.failed,
            self.crashed,
            self.hung
        )
    }
}

/// The child's side: `args` after [`CHILD_FLAG`] are `<contract> seeds <start> <count>` or
/// `<contract> program <seed> <path>` (`path`: `s`/`c` per shrinking step, `-` for none).
pub fn child_main<B: Backend>(
    make: impl Fn() -> Result<B, GraphError>,
    args: &[String],
) -> ExitCode {
    let parsed = (|| {
        let contract = Contract::parse(args.first()?)?;
        let mode = args.get(1)?.as_str();
        let a: u64 = args.get(2)?.parse().ok()?;
        Some((contract, mode.to_owned(), a, args.get(3)?.clone()))
    })();
    let Some((contract, mode, a, b)) = parsed else {
        eprintln!("lifetimes child: bad arguments {args:?}");
        return ExitCode::from(2);
    };
    let backend = match make() {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("lifetimes child: no backend: {e}");
            return ExitCode::from(2);
        }
    };
    let stream = match backend.new_stream() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lifetimes child: no stream: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    match mode.as_str() {
        "seeds" => {
            let count: u64 = b.parse().unwrap_or(0);
            for seed in a..a.saturating_add(count) {
                let p = program(contract, seed, &[]);
                let line = match run_one(&backend, &stream, contract, &p) {
                    Ok(_) => format!("ok {seed}"),
                    Err(failure) => {
                        // Not a crash: shrink here, in the process.
                        let path = shrink(contract, seed, SHRINK_BUDGET, |path| {
                            run_one(&backend, &stream, contract, &program(contract, seed, path))
                                .is_err()
                        });
                        let minimal = program(contract, seed, &path);
                        let why = run_one(&backend, &stream, contract, &minimal)
                            .err()
                            .unwrap_or(failure);
                        format!(
                            "fail {seed} {} {:?} at step {}: {} | minimal program: {:?}",
                            encode(&path),
                            why.kind,
                            why.step,
                            why.message.replace('\n', " "),
                            minimal
                        )
                    }
                };
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return ExitCode::from(2);
                }
            }
            ExitCode::SUCCESS
        }
        "program" => {
            let path = decode(&b);
            let p = program(contract, a, &path);
            match run_one(&backend, &stream, contract, &p) {
                Ok(_) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(1),
            }
        }
        _ => ExitCode::from(2),
    }
}

fn encode(path: &[bool]) -> String {
    if path.is_empty() {
        return "-".to_owned();
    }
    path.iter().map(|&s| if s { 's' } else { 'c' }).collect()
}

fn decode(text: &str) -> Vec<bool> {
    text.chars()
        .filter(|&c| c != '-')
        .map(|c| c == 's')
        .collect()
}

/// Runs the programs of `seeds` in child processes of this executable (which must hand
/// [`CHILD_FLAG`] runs to [`child_main`], as the conformance harness does), `deadline` per
/// program.
pub fn run_isolated(contract: Contract, seeds: Range<u64>, deadline: Duration) -> Summary {
    let mut summary = Summary::default();
    let Ok(exe) = std::env::current_exe() else {
        summary.programs = seeds.end.saturating_sub(seeds.start);
        summary.crashed = summary.programs;
        return summary;
    };
    let mut next = seeds.start;
    while next < seeds.end {
        summary.children += 1;
        let child = Command::new(&exe)
            .arg(CHILD_FLAG)
            .args([
                contract.name(),
                "seeds",
                &next.to_string(),
                &(seeds.end - next).to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                summary.findings.push(Finding {
                    seed: next,
                    verdict: Verdict::Crashed(format!("could not start a child process: {e}")),
                    minimal: String::new(),
                });
                summary.programs += seeds.end - next;
                summary.crashed += seeds.end - next;
                break;
            }
        };
        let (tx, rx) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        loop {
            match rx.recv_timeout(deadline) {
                Ok(line) => {
                    let mut words = line.splitn(3, ' ');
                    let (Some(tag), Some(seed)) = (words.next(), words.next()) else {
                        continue;
                    };
                    let Ok(seed) = seed.parse::<u64>() else {
                        continue;
                    };
                    summary.programs += 1;
                    if tag == "ok" {
                        summary.passed += 1;
                    } else {
                        summary.failed += 1;
                        summary.findings.push(Finding {
                            seed,
                            verdict: Verdict::Failed(words.next().unwrap_or_default().to_owned()),
                            minimal: String::new(),
                        });
                    }
                    next = seed + 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    summary.programs += 1;
                    summary.hung += 1;
                    let minimal = shrink_in_children(&exe, contract, next, deadline);
                    summary.findings.push(Finding {
                        seed: next,
                        verdict: Verdict::Hung,
                        minimal,
                    });
                    next += 1;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.wait();
                    if next < seeds.end {
                        summary.programs += 1;
                        summary.crashed += 1;
                        let minimal = shrink_in_children(&exe, contract, next, deadline);
                        summary.findings.push(Finding {
                            seed: next,
                            verdict: Verdict::Crashed(format!("{status:?}")),
                            minimal,
                        });
                        next += 1;
                    }
                    break;
                }
            }
        }
    }
    summary
}

/// Shrinks a crashing or hanging program, each candidate run in a child of its own.
fn shrink_in_children(
    exe: &std::path::Path,
    contract: Contract,
    seed: u64,
    deadline: Duration,
) -> String {
    let path = shrink(contract, seed, SHRINK_BUDGET / 3, |path| {
        let child = Command::new(exe)
            .arg(CHILD_FLAG)
            .args([contract.name(), "program", &seed.to_string(), &encode(path)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else { return false };
        let start = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return !status.success(),
                Ok(None) if start.elapsed() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return true;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return false,
            }
        }
    });
    format!(
        "{:?} (path {})",
        program(contract, seed, &path),
        encode(&path)
    )
}

/// Runs the programs of `seeds` in this process (where the executable cannot be re-run as a
/// child): failures are counted and shrunk, but a crash ends the process.
pub fn run_in_process<B: Backend>(backend: &B, contract: Contract, seeds: Range<u64>) -> Summary {
    let mut summary = Summary::default();
    let Ok(stream) = backend.new_stream() else {
        summary.programs = seeds.end.saturating_sub(seeds.start);
        summary.failed = summary.programs;
        return summary;
    };
    for seed in seeds {
        summary.programs += 1;
        let p = program(contract, seed, &[]);
        if run_one(backend, &stream, contract, &p).is_ok() {
            summary.passed += 1;
            continue;
        }
        summary.failed += 1;
        let path = shrink(contract, seed, SHRINK_BUDGET, |path| {
            run_one(backend, &stream, contract, &program(contract, seed, path)).is_err()
        });
        let minimal = program(contract, seed, &path);
        let why = run_one(backend, &stream, contract, &minimal)
            .err()
            .map(|f| format!("{:?} at step {}: {}", f.kind, f.step, f.message))
            .unwrap_or_default();
        summary.findings.push(Finding {
            seed,
            verdict: Verdict::Failed(why),
            minimal: format!("{minimal:?} (path {})", encode(&path)),
        });
    }
    summary
}
