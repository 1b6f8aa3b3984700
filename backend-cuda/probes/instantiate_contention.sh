#!/usr/bin/env bash
# On a machine with a CUDA GPU (driver 12.3 or later) and nvcc: builds
# instantiate_contention.cu and runs it — how much a second thread's instantiation or upload
# slows one thread's eager launches, captured launches and copies (the figures behind the
# bucketed cache's background instantiation in docs/BENCHMARKS.md).
#
#   bash backend-cuda/probes/instantiate_contention.sh
set -euo pipefail
cd "$(dirname "$0")"
exe=$(mktemp -d)/instantiate_contention
nvcc -O2 -std=c++17 -o "$exe" instantiate_contention.cu -lcuda
"$exe"
