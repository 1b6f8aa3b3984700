#!/usr/bin/env bash
# On a machine with a CUDA GPU (driver 12.4 or later) and nvcc: builds while_loop_cost.cu and
# runs it — what a conditional WHILE node costs per iteration in the driver itself, beside a
# host-driven loop and the unrolled graph (the figures `graph_editing`'s loop benchmark is
# compared with).
#
#   bash backend-cuda/probes/while_loop_cost.sh
set -euo pipefail
cd "$(dirname "$0")"
exe=$(mktemp -d)/while_loop_cost
nvcc -O2 -std=c++17 -o "$exe" while_loop_cost.cu
"$exe"
