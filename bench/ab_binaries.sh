#!/bin/bash
# Two builds of ctrl (A and B) on the same training work, quiet and beside one
# busy single-threaded process, alternating which runs first in each round so
# that a noisy host's drift hits both. Prints one line per round and mode.
#
#   bash bench/ab_binaries.sh OLD/ctrl NEW/ctrl
#
# A and B may be wrapper scripts that set environment variables and exec a
# ctrl. Knobs (environment): PRESET=tiny BATCH=8 STEPS=10 WARMUP=2 THREADS=2
# ROUNDS=3 MODES="quiet busy" EXTRA (more ctrl bench flags).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: ab_binaries.sh CTRL_A CTRL_B" >&2; exit 2; }
A=$1 B=$2
for b in "$A" "$B"; do [ -x "$b" ] || { echo "ab_binaries: $b is not executable" >&2; exit 2; }; done
tokens_per_s() {
  # shellcheck disable=SC2086
  "$1" bench --config "${PRESET:-tiny}" --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" --threads "${THREADS:-2}" \
    --set train.micro_batch="${BATCH:-8}" ${EXTRA:-} --json 2>/dev/null |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["tokens_per_s"]))'
}
busy_pid=
stop_busy() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null || true; busy_pid=; }
trap stop_busy EXIT
echo "ab_binaries: A=$A B=$B, ${PRESET:-tiny}, $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs" >&2
for r in $(seq 1 "${ROUNDS:-3}"); do
  for mode in ${MODES:-quiet busy}; do
    [ "$mode" = busy ] && { bash -c 'while :; do :; done' & busy_pid=$!; }
    if [ $((r % 2)) = 1 ]; then a=$(tokens_per_s "$A"); b=$(tokens_per_s "$B"); else b=$(tokens_per_s "$B"); a=$(tokens_per_s "$A"); fi
    echo "round $r $mode: A $a B $b tokens/s"
    stop_busy
  done
done
