#!/usr/bin/env bash
# On a machine with a CUDA GPU and nvcc: builds first_instantiate.cu and runs each variant in
# fresh processes, ROUNDS rounds (default 5), then the base chain with glibc's malloc on
# transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1): what a process's first
# capture + instantiate of 1000 kernels costs in the driver itself, and how much of it is
# page faults (the figures of docs/BENCHMARKS.md, "Capture cost").
#
#   bash backend-cuda/probes/first_instantiate.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")"
exe=$(mktemp -d)/first_instantiate
nvcc -O2 -std=c++17 -o "$exe" first_instantiate.cu
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
for _ in $(seq "${1:-5}"); do
  for v in base noupload warm-empty warm-kernel16 warm-chain100 warm-chain on-thread; do "$exe" "$v"; done
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$exe" base | sed 's/variant=base/variant=base-hugetlb/'
done
