#!/usr/bin/env bash
# Runs the examples staged by scripts/device/bundle-examples.sh on the GPU machine with
# `--backend cuda`: quickstart, the generic code on every backend, the conformance table, the
# training loop (eager vs full-iteration graph), bucketed inference, the replay benchmark, the
# debug dump, and the pool bytes of a multi-stream capture against PyTorch's.
# Logs go to $OUT (default ./device-logs); non-zero exit if a step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-device-logs}"
mkdir -p "$OUT"
B=$(mktemp -d)
tar -C "$B" -xzf .device-bundle/examples/bins.tar.gz
FAILED=()
step() { # step NAME COMMAND...
  local name=$1
  shift
  echo "=== $name: $*" | tee -a "$OUT/examples.log"
  local t0=$SECONDS
  timeout 240 "$@" 2>&1 | tee -a "$OUT/examples.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/examples.log"
  [[ $rc -eq 0 ]] || FAILED+=("$name")
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/examples.log"
step quickstart "$B/quickstart" --backend auto
step every_backend "$B/every_backend"
step conformance_report "$B/conformance_report" --backend cuda
step train_loop "$B/train_loop" --backend cuda
step bucketed_inference "$B/bucketed_inference" --backend cuda
step bench_replay "$B/bench_replay" --backend cuda
step debug_dump "$B/debug_dump" --backend cuda --out "$OUT/graph.dot"
# PyTorch's pool bytes for the multi-stream capture first: the example prints the ratio.
step torch_side_stream_memory env PYTHONUNBUFFERED=1 python3 backend-cuda/bench/torch_side_stream_memory.py "$OUT/torch_side_stream_memory.txt"
step side_stream_memory "$B/side_stream_memory" --backend cuda --torch "$OUT/torch_side_stream_memory.txt"
echo "failed steps: ${FAILED[*]:-none}" | tee -a "$OUT/examples.log"
[[ ${#FAILED[@]} -eq 0 ]]
