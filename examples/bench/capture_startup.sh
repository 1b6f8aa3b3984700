#!/usr/bin/env bash
# Capture cost at start-up, each measurement from a fresh process, ROUNDS rounds, modes
# interleaved: the first capture + instantiate of 1000 kernels through accel-graph, cudarc
# alone and PyTorch (as it is, and with the upload accel-graph's instantiate makes), then
# accel-graph and PyTorch with glibc's malloc on huge pages; and the 32-bucket serving set
# through accel-graph (one thread, then THREADS threads) and PyTorch. Prints every line, then
# medians and ratios.
#
#   bash examples/bench/capture_startup.sh BIN_DIR [ROUNDS] [THREADS]
#
# BIN_DIR holds the capture_startup binary (release); python3 must have torch with CUDA.
set -uo pipefail
BIN="$1/capture_startup"
ROUNDS="${2:-5}"
THREADS="${3:-4}"
HERE="$(cd "$(dirname "$0")" && pwd)"
LOG=$(mktemp)
for r in $(seq "$ROUNDS"); do
  "$BIN" --backend cuda --mode accel --kernels 1000 | tee -a "$LOG"
  "$BIN" --mode cudarc --kernels 1000 | tee -a "$LOG"
  python3 "$HERE/torch_capture_startup.py" --mode chain --kernels 1000 | tee -a "$LOG"
  python3 "$HERE/torch_capture_startup.py" --mode chain --kernels 1000 --upload | tee -a "$LOG"
done
# The same first chain with glibc's malloc on transparent huge pages, in both processes: how
# much of the first capture + instantiate is host page faults (the driver's fresh memory).
for r in $(seq "$ROUNDS"); do
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$BIN" --backend cuda --mode accel --kernels 1000 |
    sed 's/mode=accel/mode=accel_hugetlb/' | tee -a "$LOG"
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python3 "$HERE/torch_capture_startup.py" --mode chain --kernels 1000 |
    sed 's/mode=torch/mode=torch_hugetlb/' | tee -a "$LOG"
done
for r in $(seq "$ROUNDS"); do
  "$BIN" --backend cuda --mode buckets --buckets 32 --ops 1000 | tee -a "$LOG"
  "$BIN" --backend cuda --mode buckets --buckets 32 --ops 1000 --threads "$THREADS" | tee -a "$LOG"
  python3 "$HERE/torch_capture_startup.py" --mode buckets --buckets 32 --ops 1000 | tee -a "$LOG"
done
python3 - "$LOG" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r"(\w+)=([\w.]+)", line))
    if line.startswith("startup:"):
        key = ("chain", kv["mode"])
    elif line.startswith("startup-set:"):
        key = ("set", kv.get("mode", "accel") + ("" if kv.get("threads", "1") == "1" else f"x{kv['threads']}"))
    else:
        continue
    rows.setdefault(key, []).append(kv)
med = lambda key, field: statistics.median(float(r[field]) for r in rows[key])
for key in sorted(rows):
    fields = ["capture_us", "instantiate_us", "total_us", "first_replay_us", "steady_replay_us"] if key[0] == "chain" else ["total_ms", "reserved_mib", "device_used_mib"]
    print(f"median {key[0]} {key[1]} (n={len(rows[key])}): " + " ".join(f"{f}={med(key, f):.1f}" for f in fields))
try:
    a, c, t = (med(("chain", m), "total_us") for m in ("accel", "cudarc", "torch"))
    print(f"capture-cost: accel/cudarc={a / c:.3f} (target <= 1.15) accel/torch={a / t:.3f} (target <= 0.6)")
    if ("chain", "torch_upload") in rows:
        tu = med(("chain", "torch_upload"), "total_us")
        print(f"capture-cost: accel/torch with its upload too (like for like)={a / tu:.3f}")
    if ("chain", "accel_hugetlb") in rows and ("chain", "torch_hugetlb") in rows:
        ah, th = (med(("chain", m), "total_us") for m in ("accel_hugetlb", "torch_hugetlb"))
        print(f"capture-cost: with malloc on huge pages in both: accel={ah:.1f} us torch={th:.1f} us accel/torch={ah / th:.3f}")
    wa, wc = (med(("chain", m), "warm_capture_us") for m in ("accel", "cudarc"))
    print(f"capture-cost: warm capture alone accel={wa:.1f} us cudarc={wc:.1f} us ratio={wa / wc:.3f}")
    sa, st = med(("set", "accel"), "total_ms"), med(("set", "torch"), "total_ms")
    ma, mt = med(("set", "accel"), "device_used_mib"), med(("set", "torch"), "device_used_mib")
    print(f"startup-set: accel/torch time={sa / st:.3f} (target <= 0.5) device memory accel={ma:.1f} MiB torch={mt:.1f} MiB")
    for k in rows:
        if k[0] == "set" and k[1].startswith("accelx"):
            print(f"startup-set: {k[1]} time={med(k, 'total_ms'):.1f} ms (one thread {sa:.1f} ms)")
except KeyError as e:
    print(f"missing rows: {e}")
PY
