//! `decode_kernels` (the projections timed alone) on the mock: a line for every projection and
//! row count with the documented fields, both forms timed; bad arguments refused with a
//! message and a failing exit.

use std::process::Command;

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

#[test]
fn decode_kernels_times_every_projection_in_both_forms() {
    let out = Command::new(env!("CARGO_BIN_EXE_decode_kernels"))
        .args(["--backend", "mock", "--config", "tiny", "--dtype", "f32"])
        .args([
            "--rows",
            "1,3",
            "--launches",
            "2",
            "--replays",
            "2",
            "--copies",
            "2",
            "--overlap",
        ])
        .output()
        .expect("decode_kernels runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("kernel "))
        .collect();
    let mut seen = Vec::new();
    for line in &lines {
        seen.push((
            field(line, "proj").to_owned(),
            field(line, "rows").to_owned(),
        ));
        for key in ["fused_us", "unfused_us", "fused/unfused"] {
            let v: f64 = field(line, key).parse().expect("a number");
            assert!(v > 0.0 && v.is_finite(), "{key} in {line}");
        }
    }
    assert!(lines.iter().all(|l| field(l, "overlap") == "1"));
    // tiny: QKV 128 × 64 (f32), gate/up 2 · 128 × 64.
    assert_eq!(field(lines[0], "bytes"), (128 * 64 * 4).to_string());
    let mut want = Vec::new();
    for proj in ["qkv", "out", "gate_up", "down", "lm_head"] {
        for rows in ["1", "3"] {
            want.push((proj.to_owned(), rows.to_owned()));
        }
    }
    assert_eq!(seen, want);
}

#[test]
fn decode_kernels_refuses_bad_arguments() {
    for args in [
        &["--rows", "0"][..],
        &["--launches", "0"],
        &["--config", "huge"],
        &["--backend", "nonsense"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_decode_kernels"))
            .args(args)
            .output()
            .expect("decode_kernels runs");
        assert!(!out.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}
