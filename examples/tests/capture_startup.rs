//! The start-up benchmark's binary on the mock, as `examples/bench/capture_startup.sh` runs it
//! on a GPU: every mode prints the line the script parses, and the bucket set's replays equal
//! the eager step (the binary fails otherwise), with the instantiation in the background or in
//! line, with or without the warm-up.

use std::process::Command;

/// Runs the binary with `args`, expecting success; returns its standard output.
fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_capture_startup"))
        .args(["--backend", "mock"])
        .args(args)
        .output()
        .expect("the capture_startup binary runs");
    assert!(
        out.status.success(),
        "capture_startup {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The `key=value` fields of the line starting with `prefix`.
fn fields(output: &str, prefix: &str) -> Vec<(String, String)> {
    let line = output
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} line in {output:?}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn number(fields: &[(String, String)], key: &str) -> f64 {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in {fields:?}"))
        .1
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[test]
fn the_chain_prints_its_phases() {
    let f = fields(&run(&["--mode", "accel", "--kernels", "200"]), "startup:");
    for key in [
        "capture_us",
        "instantiate_us",
        "first_replay_us",
        "steady_replay_us",
        "warm_capture_us",
    ] {
        assert!(number(&f, key) > 0.0, "{key} in {f:?}");
    }
    let total = number(&f, "total_us");
    assert!(total >= number(&f, "capture_us"), "{f:?}");
}

#[test]
fn the_bucket_set_replays_what_the_step_computes_in_every_variant() {
    for extra in [
        &[][..],
        &["--in-line"][..],
        &["--warmup-iters", "0"][..],
        &["--threads", "2"][..],
    ] {
        let mut args = vec!["--mode", "buckets", "--buckets", "5", "--ops", "40"];
        args.extend_from_slice(extra);
        let f = fields(&run(&args), "startup-set:");
        assert_eq!(number(&f, "buckets"), 5.0, "{extra:?}: {f:?}");
        assert!(number(&f, "total_ms") > 0.0, "{extra:?}: {f:?}");
    }
}
