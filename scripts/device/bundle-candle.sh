#!/usr/bin/env bash
# Builds the candle example (candle-graph/: a candle model, unpatched, captured through
# accel-graph's CUDA backend) on this machine, which has no CUDA toolkit, and stages it in
# .device-bundle/candle/ (git-ignored) for `bash scripts/device/run-candle.sh` on the GPU
# machine.
#
# candle-kernels compiles its kernels with nvcc, and candle makes cudarc link CUDA's libraries
# at build time. Both come from the Python package index, into target/cuda-pip (kept between
# runs): nvcc 13.0 (its PTX loads on a CUDA 13.0 driver), its crt headers and NVVM, the
# runtime and CCCL headers, cuBLAS, cuRAND and NVRTC. The driver library (libcuda) comes with a driver
# only: the link uses a stub generated here from cudarc's bindings (every function empty, the
# soname libcuda.so.1); the GPU machine's real driver is loaded at run time.
#
#   bash scripts/device/bundle-candle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PIP_DIR=$ROOT/target/cuda-pip
CUDA_DIR=$ROOT/target/cuda-root
BUNDLE=.device-bundle/candle
export CARGO_TARGET_DIR=$ROOT/target/candle

# One install of them all: pip's --target replaces a folder the packages share.
if [[ ! -x $PIP_DIR/nvidia/cu13/bin/nvcc || ! -e $PIP_DIR/nvidia/cu13/include/nv/target ]]; then
  rm -rf "$PIP_DIR"
  python3 -m pip install --quiet --target "$PIP_DIR" "nvidia-cuda-nvcc==13.0.*" \
    "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-runtime==13.0.*" \
    "nvidia-cuda-cccl==13.0.*" "nvidia-cublas==13.0.*" "nvidia-curand" \
    "nvidia-cuda-nvrtc==13.0.*"
fi
CU=$PIP_DIR/nvidia/cu13

# A toolkit-shaped folder: bin/ and include/ from the wheels, lib64/ with the link names the
# build asks for.
rm -rf "$CUDA_DIR"
mkdir -p "$CUDA_DIR/lib64"
ln -s "$CU/bin" "$CUDA_DIR/bin"
ln -s "$CU/include" "$CUDA_DIR/include"
ln -s "$CU/nvvm" "$CUDA_DIR/nvvm"
for lib in "$CU"/lib/lib*.so.*; do
  name=$(basename "$lib")
  ln -sf "$lib" "$CUDA_DIR/lib64/$name"
  ln -sf "$lib" "$CUDA_DIR/lib64/${name%%.so.*}.so"
done
# The driver stub: every cu* function cudarc's bindings declare, empty.
BINDINGS=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -path '*cudarc-0.19*/src/driver/sys/mod.rs' | head -1)
grep -oE 'pub (unsafe )?fn cu[A-Za-z0-9_]+' "$BINDINGS" | awk '{print $NF}' | sort -u |
  sed 's/.*/void &(void) {}/' > "$CUDA_DIR/libcuda_stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CUDA_DIR/lib64/libcuda.so" "$CUDA_DIR/libcuda_stub.c"

export PATH="$CUDA_DIR/bin:$PATH" CUDA_ROOT="$CUDA_DIR" CUDA_PATH="$CUDA_DIR" \
  NVCC="$CUDA_DIR/bin/nvcc" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}" \
  LIBRARY_PATH="$CUDA_DIR/lib64${LIBRARY_PATH:+:$LIBRARY_PATH}"
cargo build --release --manifest-path candle-graph/Cargo.toml

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
cp "$CARGO_TARGET_DIR/release/accel-graph-candle-example" "$BUNDLE/"
strip "$BUNDLE/accel-graph-candle-example"
ls -l "$BUNDLE"
du -sh "$BUNDLE"
