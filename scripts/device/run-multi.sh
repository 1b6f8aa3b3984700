#!/usr/bin/env bash
# Runs the multi-rank binaries staged by scripts/device/bundle-multi.sh on a machine with N
# GPUs (N from nvidia-smi, or GPUS=N): the collective cases (conformance §17) with ranks as
# threads (worlds of 1, 2, 4, 8; those larger than N are skipped with the reason) and with
# ranks as processes (N processes, one per GPU, meeting in a fresh directory as torchrun's
# environment describes them), then the 64-all-reduce benchmark launched three ways — threads,
# processes sharing the id through the store, processes given the id in the environment by a
# launcher — and PyTorch's version of it. With N = 1 every launch path runs with one rank.
# The cases and the benchmark run once more as processes launched by torchrun itself
# (`torchrun --standalone --no-python`): no shared directory, the ranks meet through rank 0's
# TCP store at MASTER_ADDR and ACCEL_GRAPH_MASTER_PORT (torchrun's own store holds
# MASTER_PORT).
# Logs go to $OUT (default ./device-logs); the exit status is non-zero if any step failed.
#
#   bash scripts/device/run-multi.sh [replays]
#
# STEPS="cases processes" runs only the named steps (cases processes processes_tcp
# bench_threads bench_processes bench_tcp bench_spawn torch).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/common.sh
B=.device-bundle/multi
OUT="${OUT:-device-logs}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPLAYS="${1:-10000}"
N="${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}"
[[ "$N" -ge 1 ]] || N=1

# NCCL for cudarc, NVLink multicast off (common.sh).
link_nccl "$OUT"
echo "GPUs: $N; NCCL: ${NCCL_SO:-not found}" | tee "$OUT/multi-summary.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader \
  | tee -a "$OUT/multi-summary.txt"

FAILED=()
step() { # step NAME LOGFILE COMMAND...
  local name=$1 log=$2
  shift 2
  if [[ -n "${STEPS:-}" && " $STEPS " != *" $name "* ]]; then return; fi
  echo "=== $name: $*" | tee -a "$OUT/$log"
  local t0=$SECONDS
  timeout 540 "$@" >>"$OUT/$log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/$log"
  [[ $rc -eq 0 ]] || FAILED+=("$name")
}

# N processes, rank r on GPU r, meeting in a fresh directory; fails if any rank fails.
ranks() { # ranks COMMAND...
  local dir pids=() rc=0
  dir=$(mktemp -d)
  for ((r = 0; r < N; r++)); do
    RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r ACCEL_GRAPH_STORE="$dir" "$@" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  rm -rf "$dir"
  return $rc
}
export -f ranks
export N

# N processes launched by torchrun, rank r on GPU r (LOCAL_RANK), meeting over TCP: no
# ACCEL_GRAPH_STORE, so LaunchEnv takes MASTER_ADDR and a port of accel-graph's own.
tcp_ranks() { # tcp_ranks COMMAND...
  local port=$((29600 + RANDOM % 300))
  env -u ACCEL_GRAPH_STORE ACCEL_GRAPH_MASTER_PORT=$port \
    torchrun --standalone --nnodes 1 --nproc-per-node "$N" --no-python "$@"
}
export -f tcp_ranks

step cases multi.log "$B/test-collectives"
step processes multi.log bash -c "ranks $B/collective_ranks"
step processes_tcp multi.log bash -c "tcp_ranks $B/collective_ranks"
step bench_threads bench-multi.log "$B/allreduce_graph" --launch threads --ranks "$N" --replays "$REPLAYS"
step bench_processes bench-multi.log bash -c "ranks $B/allreduce_graph --launch env --replays $REPLAYS"
step bench_tcp bench-multi.log bash -c "tcp_ranks $B/allreduce_graph --launch env --replays $REPLAYS"
step bench_spawn bench-multi.log "$B/allreduce_graph" --launch spawn --ranks "$N" --replays "$REPLAYS"
step torch bench-multi.log env PYTHONUNBUFFERED=1 python3 "$B/torch_allreduce_graph.py" \
  --world "$N" --replays "$REPLAYS"

{
  grep -hs "^test result\|\.\.\. FAILED" "$OUT/multi.log"
  grep -hs "meets the others through" "$OUT/multi.log"
  grep -hsc "collective_ranks: .*: passed" "$OUT/multi.log" | sed 's/^/process-rank cases passed: /'
  grep -hs "collective_ranks: .*FAILED" "$OUT/multi.log"
  grep -hs "^allreduce_graph:" "$OUT/bench-multi.log"
  echo "failed steps: ${FAILED[*]:-none}"
} | tee -a "$OUT/multi-summary.txt"
[[ ${#FAILED[@]} -eq 0 ]]
