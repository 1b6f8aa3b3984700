#!/usr/bin/env bash
# Builds the wgpu backend's benchmark and test binaries (release, stripped) into
# .device-bundle/wgpu/, for a run on a GPU machine without a Rust toolchain
# (scripts/device/run-wgpu.sh runs them there). Run from the repository root.
set -euo pipefail
out=.device-bundle/wgpu
mkdir -p "$out"
cargo build --release -p accel-graph-wgpu --example bench
cp "${CARGO_TARGET_DIR:-target}/release/examples/bench" "$out/bench"
# Test binaries have hashed names: ask cargo for them.
cargo test --release -p accel-graph-wgpu --test conformance --test semantics --no-run \
    --message-format=json 2>/dev/null |
    python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
        print("bundled", m["target"]["name"])
' "$out"
strip "$out"/*
ls -la "$out"
