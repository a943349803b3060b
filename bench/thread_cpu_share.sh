#!/bin/bash
# The CPU time ctrl's threads get beside one busy single-threaded loop, at
# pinned thread counts, with the loop in this script's session or in a
# session of its own (setsid, as another login's job): CPUs per wall-clock
# second and the share of their ready time they ran, from
# /proc/PID/task/*/schedstat over MEASURE seconds of `ctrl bench` (after 6 s
# of start-up), the loop's CPUs over the same seconds (/proc/PID/stat), and
# the other processes' CPUs: the busy time of all CPUs (/proc/stat) less
# ctrl's, what the adapter reads when oversubscribed. SESSIONS=none runs
# without a loop (quiet). A pinned count above the CPUs runs the products
# tiled, as the adapter's does. Where the kernel groups tasks by session
# (/proc/sys/kernel/sched_autogroup_enabled = 1) the two differ.
# Knobs: PRESET=tiny BATCH=8 COUNTS="2 8 16" SESSIONS="same other" (or none) MEASURE=8 START=6 CTRL=build/ctrl
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${PRESET:-tiny} BATCH=${BATCH:-8} COUNTS=${COUNTS:-2 8 16} SESSIONS=${SESSIONS:-same other}
MEASURE=${MEASURE:-8} START=${START:-6} CTRL=${CTRL:-build/ctrl}
[ -x "$CTRL" ] || { echo "thread_cpu_share: no $CTRL (build first)" >&2; exit 2; }
loop=
ctrl_pid=
cleanup() { kill $loop $ctrl_pid 2>/dev/null || true; }
trap cleanup EXIT
sum() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{r += $1; w += $2} END {printf "%.6f %.6f\n", r / 1e9, w / 1e9}'; }
busy_seconds() { awk -v tick="$(getconf CLK_TCK)" '/^cpu[0-9]/ {b += $2 + $3 + $4 + $7 + $8} END {printf "%.4f\n", b / tick}' /proc/stat; }
loop_seconds() { [ -n "$1" ] || { echo 0; return; }; awk -v tick="$(getconf CLK_TCK)" '{printf "%.4f\n", ($14 + $15) / tick}' /proc/"$1"/stat; }
echo "autogroup: $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo unknown); $(nproc) CPUs; $PRESET, batch $BATCH"
echo "| loop's session | threads | ours, CPUs | ran, % of ready time | the loop's CPUs | other processes' CPUs |"
echo "|---|---:|---:|---:|---:|---:|"
for session in $SESSIONS; do
  for n in $COUNTS; do
    case $session in
      same) bash -c 'while :; do :; done' & ;;
      other) setsid bash -c 'while :; do :; done' & ;;
      none) ;;
      *) echo "thread_cpu_share: SESSIONS: expected same, other or none, got $session" >&2; exit 2 ;;
    esac
    if [ "$session" = none ]; then loop=; else loop=$!; fi
    "$CTRL" bench --config "$PRESET" --steps 100000 --warmup 0 --threads "$n" --set train.micro_batch="$BATCH" \
      >/dev/null 2>&1 &
    ctrl_pid=$!
    sleep "$START"
    read -r r0 w0 < <(sum "$ctrl_pid"); l0=$(loop_seconds "$loop"); b0=$(busy_seconds); t0=$(date +%s.%N)
    sleep "$MEASURE"
    read -r r1 w1 < <(sum "$ctrl_pid"); l1=$(loop_seconds "$loop"); b1=$(busy_seconds); t1=$(date +%s.%N)
    kill "$ctrl_pid" $loop 2>/dev/null || true
    wait "$ctrl_pid" $loop 2>/dev/null || true
    ctrl_pid= loop=
    python3 -c "r = $r1 - $r0; w = $w1 - $w0; t = $t1 - $t0; print('| $session | $n | %.2f | %.0f | %.2f | %.2f |' % (r / t, 100 * r / (r + w), ($l1 - $l0) / t, ($b1 - $b0) / t - r / t))"
  done
done
