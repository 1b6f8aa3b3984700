#!/usr/bin/env bash
# Runs the examples staged by scripts/device/bundle-examples.sh on the GPU machine with
# `--backend cuda`: quickstart, the generic code on every backend, the conformance table, the
# training loop (eager vs full-iteration graph), bucketed inference, the replay benchmark, the
# debug dump, the pool bytes of a multi-stream capture against PyTorch's, the model step
# against PyTorch (eager and CUDA-graphed, batch sizes 1, 8, 64), the NVRTC kernel cache across
# processes, and capture cost at start-up against cudarc alone and PyTorch (fresh processes).
# STEPS="mlp startup" runs only the named steps.
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
  if [[ -n "${STEPS:-}" && " $STEPS " != *" $name "* ]]; then return; fi
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
# The model step, then the same model in PyTorch from the same start (it prints the table).
MLP=$(mktemp -d)
step mlp "$B/mlp_train_step" --backend cuda --dump "$MLP"
step torch_mlp env PYTHONUNBUFFERED=1 python3 examples/bench/torch_mlp.py "$MLP"
# The kernel cache: a first process compiles the model's kernels with NVRTC, a second loads them.
export ACCEL_GRAPH_KERNEL_CACHE
ACCEL_GRAPH_KERNEL_CACHE=$(mktemp -d)
step kernel_cache_first "$B/mlp_train_step" --backend cuda --prepare-only
step kernel_cache_second "$B/mlp_train_step" --backend cuda --prepare-only
unset ACCEL_GRAPH_KERNEL_CACHE
step startup bash examples/bench/capture_startup.sh "$B" "${STARTUP_ROUNDS:-5}" 4
step startup_trace "$B/capture_startup" --backend cuda --mode buckets --buckets 4 --ops 1000 --trace
echo "failed steps: ${FAILED[*]:-none}" | tee -a "$OUT/examples.log"
[[ ${#FAILED[@]} -eq 0 ]]
