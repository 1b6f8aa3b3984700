#!/usr/bin/env bash
# Builds the decode engine's binaries (release, stripped: decode_bench, decode_serve) on this
# machine and stages them in .device-bundle/decode/ (git-ignored) with the PyTorch side
# (decode/bench/*.py), for `bash scripts/device/run-decode.sh` on the GPU machine. The
# binaries carry the mock, CUDA and wgpu backends and pick one at run time (no CUDA toolkit
# needed here: the driver, NVRTC and cuBLAS are loaded there).
#
#   bash scripts/device/bundle-decode.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BUNDLE=.device-bundle/decode
BINS=(decode_bench decode_serve)
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
cargo build --release -p accel-graph-decode --bin decode_bench --bin decode_serve
for bin in "${BINS[@]}"; do
  cp "$CARGO_TARGET_DIR/release/$bin" "$BUNDLE/$bin"
done
strip "${BINS[@]/#/$BUNDLE/}"
cp decode/bench/torch_decode.py decode/bench/summarize_decode.py decode/bench/reference_check.py "$BUNDLE/"
ls -l "$BUNDLE"
du -sh "$BUNDLE"
