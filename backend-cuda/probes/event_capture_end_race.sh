#!/usr/bin/env bash
# On a machine with a CUDA GPU and nvcc: builds event_capture_end_race.cu and runs its variants
# (see the comment at its top). Fails if a variant that accel-graph relies on crashes; the
# unserialised race is reported, not failed: it shows whether the driver still needs the lock.
#
#   bash backend-cuda/probes/event_capture_end_race.sh [rounds]
set -uo pipefail
cd "$(dirname "$0")"
ROUNDS="${1:-200000}"
exe=$(mktemp -d)/event_capture_end_race
nvcc -O2 -std=c++17 -o "$exe" event_capture_end_race.cu -lpthread || exit 1
status=0
for variant in joined unjoined "race-turn $ROUNDS"; do
  echo "== $variant"
  # shellcheck disable=SC2086
  timeout 120 "$exe" $variant || { echo "FAILED: exit $?"; status=1; }
done
for variant in race-end race; do
  echo "== $variant $ROUNDS (reported)"
  timeout 120 "$exe" "$variant" "$ROUNDS"
  rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "event_capture_end_race: $variant: the driver survived"
  else
    echo "event_capture_end_race: $variant: the driver crashed (exit $rc)"
  fi
done
exit $status
