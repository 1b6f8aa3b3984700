#!/usr/bin/env bash
# Runs the decode engine against PyTorch on the GPU machine, from the bundle staged by
# scripts/device/bundle-decode.sh (run from the repository root; python3 must have torch with
# CUDA). Writes the weights of each model (bf16) to a temporary directory, then ROUNDS rounds,
# each side and each phase in a process of its own, alternating (accel small start-up, torch
# small start-up, accel small step, ...): the start-up pre-capture of the 35 serving sizes (1,
# 2, 4, then every 8 up to 256), the decode step graphed and eager at batches 1..64 over a
# cache filled to CONTEXT positions, and greedy tokens from the dump's prompt (the torch side
# checks the prompt steps' logits against the accel side's). Then the summary: medians,
# accel/torch ratios, each bucket as a multiple of the memory-bandwidth floor (BANDWIDTH, B/s:
# 3.35e12 for an H100 SXM, 4.8e12 for an H200; by default from the GPU's name), the start-up,
# whether the tokens agree.
#
#   bash scripts/device/run-decode.sh
#
# Settings (environment): ROUNDS (3), CONFIGS ("small medium"), CONTEXT (512), BATCHES
# (1,2,4,8,16,32,64), WARMUP (20), BENCH_STEPS (200, graphed), EAGER_STEPS (100), TOKENS (32),
# BANDWIDTH, TORCH_ARGS (more flags for torch_decode.py, e.g. "--gqa repeat"), ACCEL_ARGS (more
# flags for decode_bench, e.g. "--fused-rows 0"), DEVICE_TEST (1: first run the engine's device
# test, graphed against eager against the host reference, fused and unfused), KERNELS (1: then
# decode_kernels, each projection timed alone fused and unfused, at 1, 2 and 4 rows), FLOOR (1:
# then decode_floor, the floor of a step of one kernel per operation at every batch),
# STEP_TIMEOUT (300 s), BACKEND (cuda; "mock" with CONFIGS=tiny tries the script's flow on any
# machine). About 7 minutes on one H100 with the defaults (each phase starts a process).
# Logs go to $OUT (default ./device-logs): decode.log, decode-summary.txt; non-zero exit if a
# step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/common.sh
OUT="${OUT:-device-logs}"
mkdir -p "$OUT"
B=.device-bundle/decode
LOG="$OUT/decode.log"
: >"$LOG"
ROUNDS="${ROUNDS:-3}"
CONFIGS="${CONFIGS:-small medium}"
CONTEXT="${CONTEXT:-512}"
BATCHES="${BATCHES:-1,2,4,8,16,32,64}"
WARMUP="${WARMUP:-20}"
BENCH_STEPS="${BENCH_STEPS:-200}"
EAGER_STEPS="${EAGER_STEPS:-100}"
TOKENS="${TOKENS:-32}"
BACKEND="${BACKEND:-cuda}"
PROMPT_LEN=16
MAX_LEN=$(cache_len "$CONTEXT" "$PROMPT_LEN" "$TOKENS")
read -r -a TORCH_EXTRA <<<"${TORCH_ARGS:-}"
read -r -a ACCEL_EXTRA <<<"${ACCEL_ARGS:-}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [[ -z "${BANDWIDTH:-}" ]]; then
  case "$GPU" in
    *H200*) BANDWIDTH=4.8e12 ;;
    *H100*PCIe*) BANDWIDTH=2.0e12 ;;
    *) BANDWIDTH=3.35e12 ;;
  esac
fi
WEIGHTS=$(mktemp -d "${TMPDIR:-/tmp}/decode-weights.XXXXXX")
trap 'rm -rf "$WEIGHTS"' EXIT
FAILED=()
T0=$SECONDS
step() { logged_step "$@"; }
{
  echo "gpu: $GPU; bandwidth $BANDWIDTH B/s; rounds $ROUNDS; configs $CONFIGS; context $CONTEXT;"
  echo "max_len $MAX_LEN; batches $BATCHES; warmup $WARMUP; steps $BENCH_STEPS graphed, $EAGER_STEPS eager"
} | tee -a "$LOG"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$LOG"
if [[ "${DEVICE_TEST:-1}" == 1 && "$BACKEND" == cuda ]]; then
  step device_test "$B/test-devices" --nocapture
fi
if [[ "${KERNELS:-1}" == 1 ]]; then
  for cfg in $CONFIGS; do
    step "kernels_$cfg" "$B/decode_kernels" --backend "$BACKEND" --config "$cfg" --dtype bf16 \
      --rows 1,2,4
  done
fi
if [[ "${FLOOR:-1}" == 1 ]]; then
  for cfg in $CONFIGS; do
    step "floor_$cfg" "$B/decode_floor" --backend "$BACKEND" --config "$cfg" --rows "$BATCHES" \
      --context "$CONTEXT" --max-len "$MAX_LEN" --bandwidth "$BANDWIDTH"
  done
fi
step torch_version python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"

COMMON=(--context "$CONTEXT" --max-len "$MAX_LEN" --batches "$BATCHES" --warmup "$WARMUP"
  --steps "$BENCH_STEPS" --eager-steps "$EAGER_STEPS" --tokens "$TOKENS" --startup-max-batch 256)
for cfg in $CONFIGS; do
  step "dump_$cfg" "$B/decode_bench" --dump-weights "$WEIGHTS/$cfg" --config "$cfg" --dtype bf16 \
    --prompt-len "$PROMPT_LEN"
done
# Each phase in a process of its own: on the accel side a step timed in a process that had
# built and dropped another engine first (the start-up phase's) ran 3-5 % slower on an H100;
# PyTorch's did not (docs/BENCHMARKS.md). A serving process builds one engine.
for r in $(seq "$ROUNDS"); do
  for cfg in $CONFIGS; do
    for phase in startup bench tokens; do
      ACCEL_PHASE=() TORCH_PHASE=()
      if [[ "$phase" == tokens ]]; then
        ACCEL_PHASE=(--dump-logits "$WEIGHTS/$cfg.logits")
        TORCH_PHASE=(--check "$WEIGHTS/$cfg.logits")
      fi
      step "accel_${cfg}_${phase}_round$r" "$B/decode_bench" --backend "$BACKEND" \
        --weights "$WEIGHTS/$cfg" "${COMMON[@]}" --phases "$phase" "${ACCEL_PHASE[@]}" "${ACCEL_EXTRA[@]}"
      step "torch_${cfg}_${phase}_round$r" env PYTHONUNBUFFERED=1 python3 "$B/torch_decode.py" \
        --weights "$WEIGHTS/$cfg" "${COMMON[@]}" --phases "$phase" "${TORCH_PHASE[@]}" "${TORCH_EXTRA[@]}"
    done
  done
done
step summary bash -c 'python3 "$1" "$2" --bandwidth "$3" | tee "$4"' _ \
  "$B/summarize_decode.py" "$LOG" "$BANDWIDTH" "$OUT/decode-summary.txt"
echo "total $((SECONDS - T0)) s; failed steps: ${FAILED[*]:-none}" | tee -a "$LOG"
[[ ${#FAILED[@]} -eq 0 ]]
