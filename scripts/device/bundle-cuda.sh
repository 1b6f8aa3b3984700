#!/usr/bin/env bash
# Builds the CUDA backend's device binaries on this machine (release, stripped) and stages them
# in .device-bundle/cuda/ (git-ignored), which `bash scripts/device/run-cuda.sh` runs on the
# GPU machine. Needs no CUDA toolkit here: the driver is loaded at run time.
#
#   bash scripts/device/bundle-cuda.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BUNDLE=.device-bundle/cuda
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"

EXAMPLES=(capture_probe cublas_user_kernel cudarc_interop debug_dump graph_overhead_vs_raw_cuda
  bench_user_kernels graph_editing soak reliability foreign_allocations programmatic_launch)
cargo build --release -p accel-graph-cuda --examples
for ex in "${EXAMPLES[@]}"; do
  cp "$CARGO_TARGET_DIR/release/examples/$ex" "$BUNDLE/$ex"
done

# Test binaries: cargo names them with a hash; stage-tests.py takes their paths from its JSON
# messages.
cargo test --release -p accel-graph-cuda --test conformance --test unavailable \
  --no-run --message-format=json | python3 scripts/device/stage-tests.py "$BUNDLE" --prefix test-

# The conformance binary keeps its symbol table: the capture-race stress prints a backtrace
# if it dies of a fault, which names functions only where symbols are left.
for f in "$BUNDLE"/*; do
  if [[ $f == */test-conformance ]]; then strip --strip-debug "$f"; else strip "$f"; fi
done
cp backend-cuda/bench/torch_graphs.py "$BUNDLE/"
ls -l "$BUNDLE"
du -sh "$BUNDLE"
