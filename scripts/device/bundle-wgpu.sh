#!/usr/bin/env bash
# Builds the wgpu backend's benchmark, example and test binaries (release, stripped) into
# .device-bundle/wgpu/, for a run on a GPU machine without a Rust toolchain
# (scripts/device/run-wgpu.sh runs them there). Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The GPU machine has no Vulkan loader: carry Debian's loader and glvnd packages in .gl/
# (git-ignored) for run-wgpu.sh to unpack there.
if ! ls .gl/*.deb >/dev/null 2>&1; then
    mkdir -p .gl /tmp/amd64/partial
    apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${apt_opts[@]}" update
    (cd .gl && apt-get "${apt_opts[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
out=.device-bundle/wgpu
mkdir -p "$out"
cargo build --release -p accel-graph-wgpu --example wgpu_replay_vs_eager --example wgpu_user_pipeline
for example in wgpu_replay_vs_eager wgpu_user_pipeline; do
    cp "${CARGO_TARGET_DIR:-target}/release/examples/$example" "$out/$example"
done
# Test binaries have hashed names: stage-tests.py takes them from cargo's JSON messages.
cargo test --release -p accel-graph-wgpu --test conformance --test semantics --test interop --no-run \
    --message-format=json 2>/dev/null | python3 scripts/device/stage-tests.py "$out"
strip "$out"/*
ls -la "$out"
