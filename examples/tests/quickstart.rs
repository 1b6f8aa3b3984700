//! The quickstart as a user first runs it: an error is one line of its message on stderr (not
//! the error's `Debug` dump) and a failure status, and the wgpu backend prints nothing to
//! stderr where it works.

use std::process::{Command, Output};

/// Runs the quickstart with `args` (and `env`), returning what it printed and its status.
fn quickstart(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .args(args)
        .envs(env.iter().copied())
        // The default filter: warnings and errors only, as a user sees them.
        .env_remove("RUST_LOG")
        .output()
        .expect("the quickstart binary runs")
}

/// Asserts `out` failed with exactly one line on stderr, `error: ` then a message containing
/// `message`, and no `Debug`-formatted error.
fn assert_error_line(out: &Output, message: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line, got {lines:?}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains(message),
        "{lines:?}"
    );
    assert!(
        !stderr.contains(" { ") && !stderr.contains("Unavailable"),
        "a Debug-formatted error: {stderr}"
    );
}

#[test]
fn an_unavailable_backend_is_one_line_of_its_message() {
    // No CUDA device is visible, on a machine with a GPU too.
    let out = quickstart(&["--backend", "cuda"], &[("CUDA_VISIBLE_DEVICES", "")]);
    assert_error_line(&out, "backend cuda unavailable");
}

#[test]
fn an_unknown_backend_is_one_line_of_its_message() {
    let out = quickstart(&["--backend", "nonsense"], &[]);
    assert_error_line(&out, "unknown backend 'nonsense'");
}

#[test]
fn the_quickstart_on_wgpu_prints_only_its_results() {
    let out = quickstart(&["--backend", "wgpu"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // No adapter on this machine: the failure is the one error line.
        assert_error_line(&out, "backend wgpu unavailable");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("x after replay 3: [3.0"), "{stdout}");
    // Where a Vulkan, Metal or DX12 adapter ran it, nothing of GL's probe (EGL's errors) shows.
    if !stdout.contains("(Gl, ") {
        assert!(stderr.is_empty(), "stderr: {stderr}");
    }
}
