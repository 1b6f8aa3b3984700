#!/usr/bin/env bash
# Runs tensor-parallel decode against PyTorch's on a machine of GPUS GPUs (default 2), from the
# bundle staged by scripts/device/bundle-decode.sh (run from the repository root; python3 must
# have torch with CUDA, and torchrun). Writes the weights of each model (bf16) to a temporary
# directory, then ROUNDS rounds, each side in processes of its own, alternating (accel small,
# torch small, accel medium, torch medium, ...):
#
# * accel: decode_tp --tp GPUS, its ranks threads of one process (one CUDA backend and one
#   NCCL communicator per GPU, each bucket's graph holding the all-reduces);
# * torch: torchrun --standalone --nproc-per-node GPUS torch_tp_decode.py, one process per GPU
#   (torch.distributed with NCCL, the all-reduces captured in torch.cuda.graph).
#
# Each prints the graphed step latency at batches BATCHES over a cache of CONTEXT positions
# with the model on one GPU (TP=1) and split over GPUS (TP=N), greedy tokens of the dump's
# prompt at both, and whether the split model's tokens are the one-GPU model's. Then the
# summary (summarize_tp.py): TP=1 / TP=N speed-ups, accel/torch, the tokens of both sides.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, and PyTorch's and NVSHMEM's equivalents).
#
#   bash scripts/device/run-decode-tp.sh
#
# Settings (environment): GPUS (2), ROUNDS (2), CONFIGS ("small medium"), CONTEXT (512),
# BATCHES (1,8,32), WARMUP (20), BENCH_STEPS (200), TOKENS (32), STEP_TIMEOUT (300 s), BACKEND
# (cuda; "mock" with CONFIGS=tiny and TORCH=0 tries the accel side's flow on any machine),
# TORCH (1; 0 skips the PyTorch side), F32_TOKENS (1: then the split model's greedy tokens
# against the one-GPU model's in f32, accel side), BUNDLE (.device-bundle/decode). Some 4 to 5 minutes
# on two H100s with the defaults (estimated from the one-GPU runs of run-decode.sh).
# Logs go to $OUT (default ./device-logs): decode-tp.log, decode-tp-summary.txt; non-zero exit
# if a step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/common.sh
OUT="${OUT:-device-logs}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B="${BUNDLE:-.device-bundle/decode}"
LOG="$OUT/decode-tp.log"
: >"$LOG"
GPUS="${GPUS:-2}"
ROUNDS="${ROUNDS:-2}"
CONFIGS="${CONFIGS:-small medium}"
CONTEXT="${CONTEXT:-512}"
BATCHES="${BATCHES:-1,8,32}"
WARMUP="${WARMUP:-20}"
BENCH_STEPS="${BENCH_STEPS:-200}"
TOKENS="${TOKENS:-32}"
BACKEND="${BACKEND:-cuda}"
TORCH="${TORCH:-1}"
PROMPT_LEN=16
MAX_LEN=$(cache_len "$CONTEXT" "$PROMPT_LEN" "$TOKENS")

# NCCL for decode_tp, NVLink multicast off (common.sh).
link_nccl "$OUT"

WEIGHTS=$(mktemp -d "${TMPDIR:-/tmp}/decode-tp-weights.XXXXXX")
trap 'rm -rf "$WEIGHTS"' EXIT
FAILED=()
T0=$SECONDS
step() { logged_step "$@"; }
{
  echo "gpus $GPUS; NCCL ${NCCL_SO:-not found}; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE; rounds $ROUNDS;"
  echo "configs $CONFIGS; context $CONTEXT; max_len $MAX_LEN; batches $BATCHES; warmup $WARMUP; steps $BENCH_STEPS"
} | tee -a "$LOG"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$LOG"
nvidia-smi topo -m 2>&1 | tee -a "$LOG"
if [[ "$TORCH" == 1 ]]; then
  step torch_version python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.device_count(), 'GPUs')"
fi

COMMON=(--context "$CONTEXT" --max-len "$MAX_LEN" --batches "$BATCHES" --warmup "$WARMUP"
  --steps "$BENCH_STEPS" --tokens "$TOKENS")
for cfg in $CONFIGS; do
  step "dump_$cfg" "$B/decode_bench" --dump-weights "$WEIGHTS/$cfg" --config "$cfg" --dtype bf16 \
    --prompt-len "$PROMPT_LEN"
done
for r in $(seq "$ROUNDS"); do
  for cfg in $CONFIGS; do
    step "accel_${cfg}_tp${GPUS}_round$r" "$B/decode_tp" --backend "$BACKEND" --tp "$GPUS" \
      --weights "$WEIGHTS/$cfg" "${COMMON[@]}"
    if [[ "$TORCH" == 1 ]]; then
      step "torch_${cfg}_tp${GPUS}_round$r" env PYTHONUNBUFFERED=1 torchrun --standalone \
        --nproc-per-node "$GPUS" "$B/torch_tp_decode.py" --weights "$WEIGHTS/$cfg" "${COMMON[@]}"
    fi
  done
done
# The split model's tokens against the one-GPU model's in f32 (random weights from the seed):
# in bf16 each rank rounds its partial sums, so a near-tie may part them at any token.
if [[ "${F32_TOKENS:-1}" == 1 ]]; then
  for cfg in $CONFIGS; do
    step "accel_${cfg}_tp${GPUS}_f32_tokens" "$B/decode_tp" --backend "$BACKEND" --tp "$GPUS" \
      --config "$cfg" --dtype f32 --batches 1 --context 64 --warmup 2 --steps 10 --tokens "$TOKENS"
  done
fi
step summary bash -c 'python3 "$1" "$2" | tee "$3"' _ \
  "$B/summarize_tp.py" "$LOG" "$OUT/decode-tp-summary.txt"
echo "total $((SECONDS - T0)) s; failed steps: ${FAILED[*]:-none}" | tee -a "$LOG"
[[ ${#FAILED[@]} -eq 0 ]]
