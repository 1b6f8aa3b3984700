#!/usr/bin/env bash
# On the GPU machine (CUDA toolkit, no Rust): builds the HIP-on-CUDA shim as
# libamdhip64.so.5 and runs the HIP backend's test binaries staged by bundle-hip.sh against it.
# This checks the backend's logic on a real GPU runtime (CUDA underneath), not on AMD hardware.
#
#   bash scripts/device/run-hip.sh [test filter...]   (logs go to $OUT, or ./hip-logs)
#
# Without a filter, the capture-race stress (12.05) runs last in a process of its own, with a
# backtrace printed if it dies of a fault.
#
# HIP_RUNNER="gdb -batch -ex run -ex bt --args" runs each test binary under that command.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-hip-logs}"
mkdir -p "$out"
bundle=.device-bundle/hip
shim_dir=$(mktemp -d)
{
    echo "== device"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "== nvcc"; nvcc --version | tail -2
} 2>&1 | tee "$out/environment.txt"

echo "== building the shim" | tee "$out/shim-build.txt"
# libcuda comes with the driver; link against the toolkit's stub where the driver ships no
# development symlink (the real library is loaded at run time).
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
stubs=""
for d in "$cuda_root/lib64/stubs" "$cuda_root/targets/x86_64-linux/lib/stubs"; do
    [ -d "$d" ] && stubs="$stubs -L$d"
done
# shellcheck disable=SC2086
nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xcompiler -fvisibility=hidden \
    -Xlinker -soname=libamdhip64.so.5 -Xlinker --version-script=backend-hip/shim/libamdhip64.map \
    -o "$shim_dir/libamdhip64.so.5" backend-hip/shim/hip_on_cuda.cpp $stubs -lcuda -lnvrtc \
    2>&1 | tee -a "$out/shim-build.txt"
if [ ! -f "$shim_dir/libamdhip64.so.5" ]; then
    echo "shim build failed" | tee -a "$out/shim-build.txt"
    exit 1
fi
# Every HIP symbol the binaries import must be exported by the shim.
nm -D --defined-only "$shim_dir/libamdhip64.so.5" | awk '{print $3}' | sed 's/@.*//' | grep -E '^hip' \
    | LC_ALL=C sort -u \
    > "$shim_dir/exported.txt"
missing=$(LC_ALL=C comm -23 "$bundle/hip-symbols.txt" "$shim_dir/exported.txt")
echo "imported: $(wc -l < "$bundle/hip-symbols.txt"), missing from the shim: ${missing:-none}" \
    | tee -a "$out/shim-build.txt"

export LD_LIBRARY_PATH="$shim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The memory-safety cases at the size the reliability figures quote.
export ACCEL_GRAPH_CONFORMANCE_REPETITIONS=${ACCEL_GRAPH_CONFORMANCE_REPETITIONS:-1000}
export ACCEL_GRAPH_CONFORMANCE_LIFETIMES=${ACCEL_GRAPH_CONFORMANCE_LIFETIMES:-10000}
export ACCEL_GRAPH_CONFORMANCE_STRESS_CYCLES=${ACCEL_GRAPH_CONFORMANCE_STRESS_CYCLES:-1000}
export ACCEL_GRAPH_TORCH_REPLAYS=${ACCEL_GRAPH_TORCH_REPLAYS:-1000}
# A fresh kernel cache shared by the binaries: the first compiles the built-in kernels (and
# writes cubins), the next ones load them from disk.
export ACCEL_GRAPH_KERNEL_CACHE="$shim_dir/kernel-cache"
status=0
for name in unavailable interop foreign_allocations conformance; do
    exe="$bundle/bin/$name"
    [ -x "$exe" ] || { echo "missing $exe" | tee -a "$out/$name.txt"; status=1; continue; }
    echo "== $name (LD_LIBRARY_PATH=$shim_dir)" | tee "$out/$name.txt"
    ldd "$exe" | grep amdhip | tee -a "$out/$name.txt"
    timeout 420 ${HIP_RUNNER:-} "$exe" --test-threads=1 --skip 12.05 "$@" 2>&1 | tee -a "$out/$name.txt"
    rc=${PIPESTATUS[0]}
    echo "== $name exit status $rc" | tee -a "$out/$name.txt"
    [ "$rc" = 0 ] || status=1
done
# The capture-race stress (12.05) in a process of its own, with a backtrace if it dies of a
# fault: a crash there must not cost the rest of the suite.
if [ $# -eq 0 ]; then
    echo "== capture race" | tee "$out/capture_race.txt"
    ACCEL_GRAPH_CRASH_BACKTRACE=1 timeout 420 ${HIP_RUNNER:-} "$bundle/bin/conformance" \
        --test-threads=1 12.05 2>&1 | tee -a "$out/capture_race.txt"
    rc=${PIPESTATUS[0]}
    echo "== capture race exit status $rc" | tee -a "$out/capture_race.txt"
    [ "$rc" = 0 ] || status=1
fi
{
    echo "== kernel cache ($ACCEL_GRAPH_KERNEL_CACHE) after the runs"
    ls -la "$ACCEL_GRAPH_KERNEL_CACHE" 2>&1
} | tee "$out/kernel-cache.txt"
exit $status
