#!/usr/bin/env bash
# Runs the candle example staged by scripts/device/bundle-candle.sh on the GPU machine: a
# candle model captured through accel-graph, its replays against candle's eager forward, and
# the time of each at batch 1 and 8. The binary links cuBLAS, cuRAND and NVRTC 13 by name
# (candle makes cudarc link them): they come from the toolkit or PyTorch's wheels. Logs go to
# $OUT (default ./candle-logs); the exit status is the example's.
#
#   bash scripts/device/run-candle.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-candle-logs}"
mkdir -p "$OUT"
# Never the toolkit's stubs/ folder (its libcuda.so fails every call).
LIBDIRS=$( { find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu \
  $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
  \( -name 'libcublas.so.13*' -o -name 'libcurand.so.10*' -o -name 'libnvrtc.so.13*' \) \
  -printf '%h\n' 2>/dev/null; } | grep -v '/stubs$' | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="${LIBDIRS}${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/candle.log"
timeout 300 .device-bundle/candle/accel-graph-candle-example 2>&1 | tee -a "$OUT/candle.log"
exit "${PIPESTATUS[0]}"
