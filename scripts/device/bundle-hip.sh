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
json=$(CARGO_TARGET_DIR="$target" cargo test --release -p accel-graph-hip --features runtime \
    --no-run --message-format=json)
# Test executables of accel-graph-hip: "<target name> <path>" per line.
echo "$json" | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["kind"] == ["test"] and "accel-graph-hip" in m["package_id"] \
            and m["target"]["name"] in ("conformance", "interop", "unavailable"):
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do
    cp "$exe" "$bundle/bin/$name"
    # The conformance binary keeps its symbol table, for the capture-race stress's backtrace.
    if [ "$name" = conformance ]; then
        strip --strip-debug "$bundle/bin/$name"
    else
        strip "$bundle/bin/$name"
    fi
done
# The HIP symbols the binaries import: the shim must export each of them.
for exe in "$bundle"/bin/*; do
    nm -D --undefined-only "$exe" | awk '{print $2}' | sed 's/@.*//' | grep -E '^hip' || true
done | LC_ALL=C sort -u > "$bundle/hip-symbols.txt"
ls -la "$bundle/bin"
echo "HIP symbols imported: $(wc -l < "$bundle/hip-symbols.txt")"
