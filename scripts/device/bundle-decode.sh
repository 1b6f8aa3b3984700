#!/usr/bin/env bash
# Builds the decode engine's binaries (release, stripped: decode_bench, decode_serve, decode_tp,
# decode_kernels, decode_floor) on this machine and stages them in .device-bundle/decode/
# (git-ignored) with the PyTorch side (decode/bench/*.py), for `bash scripts/device/run-decode.sh`
# (one GPU) and `bash scripts/device/run-decode-tp.sh` (tensor parallel, several GPUs) on the GPU
# machine.
# The binaries carry the mock, CUDA and wgpu backends and pick one at run time, and NCCL for
# decode_tp's ranks (the `nccl` feature; no CUDA toolkit or NCCL needed here: the driver,
# NVRTC, cuBLAS and NCCL are loaded there).
#
#   bash scripts/device/bundle-decode.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BUNDLE=.device-bundle/decode
BINS=(decode_bench decode_serve decode_tp decode_kernels decode_floor)
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
cargo build --release -p accel-graph-decode --features nccl "${BINS[@]/#/--bin=}"
for bin in "${BINS[@]}"; do
  cp "$CARGO_TARGET_DIR/release/$bin" "$BUNDLE/$bin"
done
# The engine's device test (graphed equals eager, both follow the host reference, fused and
# unfused projections): cargo names it with a hash; stage-tests.py takes its path.
cargo test --release -p accel-graph-decode --test devices --no-run --message-format=json |
  python3 scripts/device/stage-tests.py "$BUNDLE" --prefix test-
strip "${BINS[@]/#/$BUNDLE/}" "$BUNDLE/test-devices"
cp decode/bench/torch_decode.py decode/bench/summarize_decode.py decode/bench/reference_check.py \
  decode/bench/torch_tp_decode.py decode/bench/summarize_tp.py "$BUNDLE/"
ls -l "$BUNDLE"
du -sh "$BUNDLE"
