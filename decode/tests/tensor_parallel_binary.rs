//! `decode_tp` on the mock (ranks as threads on simulated devices), from a dump written by
//! `decode_bench --dump-weights`: its TP=1 tokens are the one-device reference's and its TP=2
//! tokens the split reference's for the dump's prompt, every rank agrees, its lines have the
//! documented fields; sizes that do not split are an error, at once.

mod common;

use std::path::Path;

use accel_graph_decode::{
    Config, dump,
    init::prompt,
    model::{Reference, ReferenceStep, StepRow},
    tp::TpReference,
};
use common::temp_dir;

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} not in {line}"))
}

/// The greedy tokens of `step` fed `prompt` then its own tokens, `n` of them.
fn greedy(
    prompt: &[u32],
    n: usize,
    mut step: impl FnMut(&[StepRow]) -> accel_graph::Result<ReferenceStep<f32>>,
) -> accel_graph::Result<String> {
    let (mut out, mut next) = (Vec::new(), 0u32);
    for pos in 0..prompt.len() + n - 1 {
        let token = prompt.get(pos).copied().unwrap_or(next);
        next = step(&[StepRow::new(0, token, pos as u32)])?.tokens[0];
        if pos + 1 >= prompt.len() {
            out.push(next.to_string());
        }
    }
    Ok(out.join(","))
}

#[test]
fn decode_tp_on_simulated_ranks_matches_the_references() -> Result<(), Box<dyn std::error::Error>> {
    let dir = temp_dir();
    let w = dir.path().join("tiny");
    let w = w.to_str().expect("UTF-8 path");
    let run = |bin: &str, args: &[&str]| -> Result<String, Box<dyn std::error::Error>> {
        let out = std::process::Command::new(bin).args(args).output()?;
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    };
    let dump_args = [
        "--dump-weights",
        w,
        "--config",
        "tiny",
        "--dtype",
        "f32",
        "--seed",
        "5",
        "--prompt-len",
        "6",
    ];
    run(env!("CARGO_BIN_EXE_decode_bench"), &dump_args)?;
    let tp_args = [
        "--backend",
        "mock",
        "--tp",
        "2",
        "--weights",
        w,
        "--tokens",
        "8",
        "--context",
        "4",
        "--batches",
        "2,1",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--timeout",
        "60",
    ];
    let out = run(env!("CARGO_BIN_EXE_decode_tp"), &tp_args)?;

    let config = Config::tiny();
    let prompt_tokens = prompt(5, 0, 6, config.vocab as u32);
    let host = dump::read::<f32>(Path::new(w))?.1;
    let mut one = Reference::new(config, host.clone(), 1);
    let mut split = TpReference::new(config, &host, 2, 1)?;
    let want_one = greedy(&prompt_tokens, 8, |rows| one.step(rows))?;
    let want_split = greedy(&prompt_tokens, 8, |rows| split.step(rows))?;

    let line = |kind: &str, tp: &str| {
        out.lines()
            .find(|l| l.starts_with(kind) && field(l, "tp") == tp)
            .unwrap_or_else(|| panic!("no {kind} line of tp={tp} in {out}"))
    };
    assert_eq!(field(line("tokens ", "1"), "tokens"), want_one);
    assert_eq!(field(line("tokens ", "2"), "tokens"), want_split);
    let compare = line("compare ", "2");
    assert_eq!(field(compare, "ranks_agree"), "yes");
    assert_eq!(
        field(compare, "same_tokens"),
        if want_one == want_split { "yes" } else { "no" }
    );
    let bench: Vec<&str> = out.lines().filter(|l| l.starts_with("bench ")).collect();
    assert_eq!(bench.len(), 4, "{out}");
    for (l, (tp, batch)) in bench
        .iter()
        .zip([("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")])
    {
        assert_eq!(
            (field(l, "impl"), field(l, "mode"), field(l, "tp")),
            ("accel", "graph", tp)
        );
        assert_eq!((field(l, "batch"), field(l, "steps")), (batch, "3"));
        assert!(field(l, "median_us").parse::<f64>()? > 0.0, "{l}");
    }
    Ok(())
}

#[test]
fn decode_tp_refuses_a_world_that_does_not_divide_the_heads() -> std::io::Result<()> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decode_tp"))
        .args(["--backend", "mock", "--config", "tiny", "--tp", "3"])
        .output()?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: tensor parallelism over 3 ranks: heads (4) is not a multiple of 3"),
        "{err}"
    );
    Ok(())
}
