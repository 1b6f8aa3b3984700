#!/usr/bin/env bash
# Builds the HIP backend's test binaries here (against Debian's HIP 5.2 headers and
# libamdhip64) and stages them, stripped, with the HIP-on-CUDA shim sources in
# .device-bundle/hip/ for scripts/device/run-hip.sh on the GPU machine.
#
#   HIP_PATH=/usr bash scripts/device/bundle-hip.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export HIP_PATH="${HIP_PATH:-/usr}"
target="${CARGO_TARGET_DIR:-target}"
bundle=.device-bundle/hip
rm -rf "$bundle"
mkdir -p "$bundle/bin"
# The test executables of accel-graph-hip, staged from cargo's JSON messages.
CARGO_TARGET_DIR="$target" cargo test --release -p accel-graph-hip --features runtime \
    --no-run --message-format=json |
    python3 scripts/device/stage-tests.py "$bundle/bin" --only conformance,interop,unavailable,foreign_allocations
for exe in "$bundle"/bin/*; do
    # The conformance binary keeps its symbol table, for the capture-race stress's backtrace.
    if [ "$(basename "$exe")" = conformance ]; then
        strip --strip-debug "$exe"
    else
        strip "$exe"
    fi
done
# The HIP symbols the binaries import: the shim must export each of them.
for exe in "$bundle"/bin/*; do
    nm -D --undefined-only "$exe" | awk '{print $2}' | sed 's/@.*//' | grep -E '^hip' || true
done | LC_ALL=C sort -u > "$bundle/hip-symbols.txt"
ls -la "$bundle/bin"
echo "HIP symbols imported: $(wc -l < "$bundle/hip-symbols.txt")"
