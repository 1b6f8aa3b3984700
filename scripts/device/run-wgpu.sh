#!/usr/bin/env bash
# Runs the wgpu backend's conformance suite, its own semantics and interop tests, the
# user-pipeline example and the replay benchmark on a GPU machine's Vulkan driver (built
# beforehand by scripts/device/bundle-wgpu.sh).
# Needs the Vulkan loader and glvnd (the NVIDIA ICD, libGLX_nvidia, loads libGLdispatch):
# .gl/ holds Debian's libvulkan1 and libglvnd .debs, unpacked here.
# Logs go to $OUT (or ./wgpu-device-logs).
set -uo pipefail
bundle=.device-bundle/wgpu
out=${OUT:-wgpu-device-logs}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -f "$nvidia_icd" ]; then export VK_DRIVER_FILES=$nvidia_icd; fi
export XDG_RUNTIME_DIR=/tmp
# A GPU runs the randomized cases at the suite's full default size, and the memory-safety
# cases at the size the reliability figures quote (drop-then-replay 1000 times, the stress at
# 8 threads x 1000 cycles per mode).
export ACCEL_GRAPH_CONFORMANCE_PROGRAMS=${ACCEL_GRAPH_CONFORMANCE_PROGRAMS:-1000}
export ACCEL_GRAPH_CONFORMANCE_SEQUENCES=${ACCEL_GRAPH_CONFORMANCE_SEQUENCES:-10000}
export ACCEL_GRAPH_CONFORMANCE_REPETITIONS=${ACCEL_GRAPH_CONFORMANCE_REPETITIONS:-1000}
export ACCEL_GRAPH_CONFORMANCE_LIFETIMES=${ACCEL_GRAPH_CONFORMANCE_LIFETIMES:-10000}
export ACCEL_GRAPH_CONFORMANCE_STRESS_CYCLES=${ACCEL_GRAPH_CONFORMANCE_STRESS_CYCLES:-1000}
export ACCEL_GRAPH_TORCH_REPLAYS=${ACCEL_GRAPH_TORCH_REPLAYS:-1000}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
status=0
echo "== conformance"
time timeout 420 "$bundle/conformance" 2>&1 | tee "$out/conformance.txt" || status=1
echo "== semantics"
"$bundle/semantics" 2>&1 | tee "$out/semantics.txt" || status=1
echo "== interop (from_device, user pipelines in graphs)"
"$bundle/interop" 2>&1 | tee "$out/interop.txt" || status=1
echo "== wgpu_user_pipeline example"
"$bundle/wgpu_user_pipeline" 2>&1 | tee "$out/wgpu_user_pipeline.txt" || status=1
echo "== bench (1000 ops on 1024, 65536 and 1048576 elements)"
{
    "$bundle/wgpu_replay_vs_eager" 1000 1024 30 &&
        "$bundle/wgpu_replay_vs_eager" 1000 65536 30 &&
        "$bundle/wgpu_replay_vs_eager" 1000 1048576 10
} 2>&1 | tee "$out/bench.txt" || status=1
exit $status
