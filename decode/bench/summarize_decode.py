"""Summarises the lines decode_bench and torch_decode.py print (run-decode.sh's log): per
(config, mode, batch) the median over rounds of each side's median step time, the ratio
accel/torch, and each as a multiple of the floor — the bytes a step must read (every weight
but the embedding table, the batch's embedding rows, the keys and values of context + 1
positions of each sequence) over the memory bandwidth; the start-up pre-capture of both sides;
whether the greedy tokens agree (the first step where they part); the logits check; the time
of each phase.

    python3 summarize_decode.py LOG... [--bandwidth 3.35e12]
"""

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict

PAIR = re.compile(r"(\w+)=(\S+)")
ELEMENT_BYTES = {"f32": 4, "bf16": 2}


KINDS = ("model", "bench", "startup", "tokens", "check", "phase", "dump", "logits")


def parse(paths, kinds=KINDS):
    """The `key=value` fields of every line of `paths` whose first word is one of `kinds` and
    that names its `impl`, grouped by that word."""
    lines = defaultdict(list)
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                kind = line.split(" ", 1)[0]
                if kind in kinds:
                    kv = dict(PAIR.findall(line))
                    if "impl" in kv:
                        lines[kind].append(kv)
    return lines


def floor_us(model, batch, context, bandwidth):
    eb = ELEMENT_BYTES[model["dtype"]]
    params, vocab, hidden = int(model["params"]), int(model["vocab"]), int(model["hidden"])
    layers, kv_heads, head_dim = int(model["layers"]), int(model["kv_heads"]), int(model["head_dim"])
    weights = (params - vocab * hidden) * eb + batch * hidden * eb
    kv = batch * (context + 1) * layers * 2 * kv_heads * head_dim * eb
    return (weights + kv) / bandwidth * 1e6


def med(values):
    return statistics.median(values) if values else float("nan")


def geomean(values):
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--bandwidth", type=float, default=3.35e12, help="HBM bytes/s (H100 SXM 3.35e12, H200 4.8e12)")
    args = ap.parse_args()
    lines = parse(args.logs)
    models = {}
    for m in lines["model"]:
        models.setdefault(m["config"], m)

    bench = defaultdict(list)
    for b in lines["bench"]:
        bench[(b["config"], b["dtype"], b["mode"], int(b["batch"]), b["impl"])].append(b)
    keys = sorted({k[:4] for k in bench}, key=lambda k: (k[0], k[1], k[2] != "graph", k[3]))
    print(f"== decode step, median over rounds of each round's median (us); floor at {args.bandwidth:.3g} B/s")
    print(f"{'config':8} {'dtype':5} {'mode':5} {'batch':>5} | {'accel':>9} {'p10-p90':>15} | {'torch':>9} {'p10-p90':>15} | {'accel/torch':>11} | {'floor':>7} {'accel/fl':>8} {'torch/fl':>8} | rounds")
    ratios = defaultdict(list)
    for key in keys:
        config, dtype, mode, batch = key
        row = {}
        for impl in ("accel", "torch"):
            runs = bench.get(key + (impl,), [])
            row[impl] = (
                med([float(r["median_us"]) for r in runs]),
                med([float(r["p10_us"]) for r in runs]),
                med([float(r["p90_us"]) for r in runs]),
                len(runs),
            )
        a, t = row["accel"][0], row["torch"][0]
        ratio = a / t if t > 0 else float("nan")
        ratios[(config, mode)].append(ratio)
        model = models.get(config)
        context = int(next(iter(bench[key + ("accel",)] or bench[key + ("torch",)]))["context"])
        fl = floor_us(model, batch, context, args.bandwidth) if model else float("nan")
        spread = lambda r: f"{r[1]:.0f}-{r[2]:.0f}"
        print(
            f"{config:8} {dtype:5} {mode:5} {batch:>5} | {a:>9.1f} {spread(row['accel']):>15} | {t:>9.1f} {spread(row['torch']):>15} | "
            f"{ratio:>11.3f} | {fl:>7.1f} {a / fl:>8.2f} {t / fl:>8.2f} | {row['accel'][3]}/{row['torch'][3]}"
        )
    for (config, mode), rs in sorted(ratios.items()):
        print(f"geomean accel/torch {config} {mode}: {geomean(rs):.3f} over {len(rs)} batch sizes")
    for config in sorted({k[0] for k in keys}):
        for impl in ("accel", "torch"):
            speedups = []
            for key in keys:
                if key[0] == config and key[2] == "graph":
                    g = med([float(r["median_us"]) for r in bench.get(key + (impl,), [])])
                    e = med([float(r["median_us"]) for r in bench.get((key[0], key[1], "eager", key[3], impl), [])])
                    if g > 0:
                        speedups.append(e / g)
            if speedups:
                print(f"geomean eager/graph {config} {impl}: {geomean(speedups):.3f}")

    print("\n== start-up: pre-capture of the serving sizes (median over rounds)")
    startup = defaultdict(list)
    for s in lines["startup"]:
        startup[(s["config"], s["impl"])].append(s)
    mib = lambda v: v / 2**20
    for config in sorted({k[0] for k in startup}):
        secs = {}
        for impl in ("accel", "torch"):
            runs = startup.get((config, impl), [])
            if not runs:
                continue
            secs[impl] = med([float(r["seconds"]) for r in runs])
            pool = med([int(r["pool_bytes"]) for r in runs])
            reserved = med([int(r["reserved_after"]) - int(r["reserved_before"]) for r in runs])
            used = [int(r["device_used_after"]) - int(r["device_used_before"]) for r in runs if r["device_used_after"] != "na"]
            print(
                f"{config:8} {impl:5} graphs={runs[0]['graphs']} max_batch={runs[0]['max_batch']} seconds={secs[impl]:.3f} "
                f"pool_mib={mib(pool):.1f} reserved_growth_mib={mib(reserved):.1f} "
                f"device_used_growth_mib={mib(med(used)) if used else float('nan'):.1f} rounds={len(runs)}"
            )
        if len(secs) == 2 and secs["torch"] > 0:
            print(f"{config:8} accel/torch seconds: {secs['accel'] / secs['torch']:.3f}")

    print("\n== greedy tokens from the dump's prompt")
    tokens = defaultdict(list)
    for t in lines["tokens"]:
        tokens[(t["config"], t["dtype"], t["impl"])].append((t["prompt"], t["tokens"].split(",")))
    for config, dtype in sorted({k[:2] for k in tokens}):
        got = {impl: tokens.get((config, dtype, impl), []) for impl in ("accel", "torch")}
        for impl, runs in got.items():
            if len({tuple(r[1]) for r in runs}) > 1:
                print(f"{config} {dtype}: {impl}'s tokens differ between rounds")
        if not got["accel"] or not got["torch"]:
            print(f"{config} {dtype}: tokens of one side only")
            continue
        (pa, a), (pt, t) = got["accel"][0], got["torch"][0]
        if pa != pt:
            print(f"{config} {dtype}: the prompts differ: accel {pa} torch {pt}")
            continue
        n = min(len(a), len(t))
        first = next((i for i in range(n) if a[i] != t[i]), None)
        if first is None:
            print(f"{config} {dtype}: tokens agree for all {n} steps")
        else:
            print(f"{config} {dtype}: tokens agree for {first} of {n} steps, first divergence at step {first} (accel {a[first]}, torch {t[first]})")
        print(f"  accel: {','.join(a)}")
        print(f"  torch: {','.join(t)}")

    if lines["check"]:
        print("\n== logits of the prompt steps, torch against accel")
        for c in lines["check"]:
            print(" ".join(f"{k}={v}" for k, v in c.items() if k != "per_step"))

    print("\n== phases (median seconds over rounds)")
    phases = defaultdict(list)
    for p in lines["phase"]:
        phases[(p.get("config", "-"), p["name"], p["impl"])].append(float(p["seconds"]))
    for (config, name, impl), secs in sorted(phases.items()):
        print(f"{config:8} {impl:5} {name:12} {med(secs):8.2f} s (n={len(secs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
