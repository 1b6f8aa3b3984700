"""Summarises the lines decode_tp and torch_tp_decode.py print (run-decode-tp.sh's log): per
(config, dtype, batch) the median over rounds of each side's median graphed step time at TP=1
and TP=N, the speed-up of the split (TP=1 / TP=N) on each side, and accel/torch at each; the
split model against the one-GPU model on each side (compare lines); whether the two sides'
greedy tokens agree at TP=1 and at TP=N (the first step where they part).

    python3 summarize_tp.py LOG...
"""

import argparse
from collections import defaultdict

from summarize_decode import med, parse


def ratio(a, b):
    return a / b if b > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    lines = parse(args.logs, ("model", "bench", "tokens", "compare", "phase"))

    bench = defaultdict(list)
    for b in lines["bench"]:
        bench[(b["config"], b["dtype"], int(b["batch"]), b["impl"], int(b["tp"]))].append(float(b["median_us"]))
    worlds = sorted({k[4] for k in bench if k[4] > 1})
    for n in worlds:
        print(f"== graphed decode step, TP=1 against TP={n}: median over rounds of each round's median (us)")
        print(
            f"{'config':8} {'dtype':5} {'batch':>5} | {'accel tp1':>9} {'accel tp' + str(n):>9} {'speedup':>7} | "
            f"{'torch tp1':>9} {'torch tp' + str(n):>9} {'speedup':>7} | {'accel/torch tp1':>15} {'tp' + str(n):>6} | rounds"
        )
        keys = sorted({k[:3] for k in bench if k[4] == n})
        for config, dtype, batch in keys:
            get = lambda impl, tp: bench.get((config, dtype, batch, impl, tp), [])
            a1, an, t1, tn = (med(get(i, tp)) for i, tp in (("accel", 1), ("accel", n), ("torch", 1), ("torch", n)))
            print(
                f"{config:8} {dtype:5} {batch:>5} | {a1:>9.1f} {an:>9.1f} {ratio(a1, an):>7.2f} | "
                f"{t1:>9.1f} {tn:>9.1f} {ratio(t1, tn):>7.2f} | {ratio(a1, t1):>15.3f} {ratio(an, tn):>6.3f} | "
                f"{len(get('accel', n))}/{len(get('torch', n))}"
            )

    print("\n== the split model against the one-GPU model (each side, every round)")
    for c in lines["compare"]:
        print(
            f"{c['impl']:5} {c['config']:8} {c['dtype']:5} tp={c['tp']}: same_tokens={c['same_tokens']} "
            f"first_difference={c['first_difference']} ranks_agree={c['ranks_agree']} "
            f"prompt logits relative={c['relative']} same_argmax={c['same_argmax']}"
        )

    print("\n== greedy tokens, accel against torch")
    tokens = defaultdict(list)
    for t in lines["tokens"]:
        tokens[(t["config"], t["dtype"], int(t["tp"]), t["impl"])].append(t["tokens"].split(","))
    for config, dtype, tp in sorted({k[:3] for k in tokens}):
        a = tokens.get((config, dtype, tp, "accel"), [])
        t = tokens.get((config, dtype, tp, "torch"), [])
        if not a or not t:
            print(f"{config} {dtype} tp={tp}: missing a side (accel {len(a)}, torch {len(t)})")
            continue
        same = a[0] == t[0]
        part = next((i for i, (x, y) in enumerate(zip(a[0], t[0])) if x != y), None)
        steady = all(r == a[0] for r in a) and all(r == t[0] for r in t)
        print(
            f"{config} {dtype} tp={tp}: {'same' if same else f'part at token {part}'} "
            f"({len(a[0])} tokens; {'the same in every round' if steady else 'rounds differ'})"
        )

    print("\n== phases (seconds, median over rounds)")
    phases = defaultdict(list)
    for p in lines["phase"]:
        phases[(p["config"], p["impl"], p["name"])].append(float(p["seconds"]))
    for (config, impl, name), secs in sorted(phases.items()):
        print(f"{config:8} {impl:5} {name:6} {med(secs):8.2f}")


if __name__ == "__main__":
    main()
