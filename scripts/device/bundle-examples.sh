#!/usr/bin/env bash
# Builds the examples crate's binaries (release, stripped) on this machine and stages them in
# .device-bundle/examples/ (git-ignored) for `bash scripts/device/run-examples.sh` on the GPU
# machine. The binaries carry the mock, CUDA and wgpu backends and pick one at run time.
# EXAMPLE_BINS="capture_startup mlp_train_step" stages only those (a smaller transfer, for
# runs of some steps of run-examples.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BUNDLE=.device-bundle/examples
BINS=(quickstart every_backend train_loop bucketed_inference bench_replay conformance_report debug_dump
  side_stream_memory mlp_train_step capture_startup)
if [[ -n "${EXAMPLE_BINS:-}" ]]; then
  read -r -a BINS <<<"$EXAMPLE_BINS"
fi
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
cargo build --release -p accel-graph-examples --bins
for bin in "${BINS[@]}"; do
  cp "$CARGO_TARGET_DIR/release/$bin" "$BUNDLE/$bin"
done
strip "$BUNDLE"/*
# Each binary carries wgpu; compressed together they fit the device tool's 64 MiB transfer.
tar -C "$BUNDLE" -czf "$BUNDLE.tar.gz" "${BINS[@]}"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
mv "$BUNDLE.tar.gz" "$BUNDLE/bins.tar.gz"
du -sh "$BUNDLE"
