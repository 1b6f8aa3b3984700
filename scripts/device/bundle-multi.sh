#!/usr/bin/env bash
# Builds the multi-rank (collectives) binaries on this machine (release, stripped, the CUDA
# backend with its `nccl` feature: NCCL is loaded at run time, so none is needed here) and
# stages them in .device-bundle/multi/ (git-ignored), which
# `bash scripts/device/run-multi.sh` runs on a machine with any number of GPUs.
#
#   bash scripts/device/bundle-multi.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BUNDLE=.device-bundle/multi
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"

cargo build --release -p accel-graph-cuda --features nccl \
  --example allreduce_graph --example collective_ranks
for ex in allreduce_graph collective_ranks; do
  cp "$CARGO_TARGET_DIR/release/examples/$ex" "$BUNDLE/$ex"
done

# The collective cases with ranks as threads (cargo names the binary with a hash:
# stage-tests.py takes its path from cargo's JSON messages).
cargo test --release -p accel-graph-cuda --features nccl --test collectives \
  --no-run --message-format=json | python3 scripts/device/stage-tests.py "$BUNDLE" --prefix test-

strip "$BUNDLE"/*
cp backend-cuda/bench/torch_allreduce_graph.py "$BUNDLE/"
ls -l "$BUNDLE"
du -sh "$BUNDLE"
