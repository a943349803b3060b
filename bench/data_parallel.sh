#!/bin/bash
# Data-parallel training throughput on one machine: `ctrl train` as one
# process with 2 OpenMP threads against 2 MPI ranks with 1 thread each (and,
# as the base of both speed-ups, one process with 1 thread), same
# preset, same global batch, synthetic tokens (no --data). Reports the median
# of the per-step tokens_per_s that rank 0 writes to metrics.jsonl (step 1,
# which warms caches and allocators, is left out), side by side with the ratio,
# and the load average before and after, since other work on the machine
# changes the figures.
#   bench/data_parallel.sh [BUILD_DIR] [PRESET] [STEPS] [EXTRA ctrl train FLAGS...]
# e.g. bench/data_parallel.sh build small 5
#      bench/data_parallel.sh build small 5 --zero 1
set -eu
BUILD=${1:-build}
PRESET=${2:-small}
STEPS=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
CTRL="$BUILD/ctrl"
[ -x "$CTRL" ] || { echo "$CTRL missing: make -C $BUILD ctrl" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun missing: apt-get install openmpi-bin" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq missing: apt-get install jq" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FLAGS=(train --config "$PRESET" --quiet --set train.steps="$STEPS" --set train.log_every=1
       --set train.eval_every=0 --set train.checkpoint_every=0 --set train.keep_checkpoints=1 "$@")

# Median tokens/s of steps 2.. of a run directory.
median_tps() {
  jq -s '[.[] | select(.loss != null and .step > 1) | .tokens_per_s] | sort |
         if length == 0 then 0 elif length % 2 == 1 then .[(length - 1) / 2]
         else (.[length / 2 - 1] + .[length / 2]) / 2 end' "$1/metrics.jsonl"
}
steps_tps() { jq -r 'select(.loss != null) | .tokens_per_s | floor' "$1/metrics.jsonl" | paste -sd' '; }

echo "preset $PRESET, $STEPS steps, extra flags: ${*:-none}; $(nproc) cores; $(mpirun --version | head -1)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# One process with $1 OpenMP threads into $2.
single() {
  OMP_NUM_THREADS=$1 "$CTRL" "${FLAGS[@]}" --out "$2" --set train.threads="$1" 2>&1 | grep -v '^done:' >&2 || true
  [ -f "$2/metrics.jsonl" ] || { echo "the run into $2 failed" >&2; exit 1; }
}
single 2 "$WORK/one"
mpirun -np 2 --bind-to none -x OMP_NUM_THREADS=1 "$CTRL" "${FLAGS[@]}" --out "$WORK/two" --set train.threads=1 \
  2>&1 | grep -v '^data-parallel over\|^done:' >&2 || true
[ -f "$WORK/two/metrics.jsonl" ] || { echo "the 2-rank run failed" >&2; exit 1; }
single 1 "$WORK/single"
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
ONE=$(median_tps "$WORK/one")
TWO=$(median_tps "$WORK/two")
SINGLE=$(median_tps "$WORK/single")
printf '%-24s %14s   %s\n' "layout" "tokens/s" "per step (step 1 first)"
printf '%-24s %14.0f   %s\n' "1 rank x 2 threads" "$ONE" "$(steps_tps "$WORK/one")"
printf '%-24s %14.0f   %s\n' "2 ranks x 1 thread" "$TWO" "$(steps_tps "$WORK/two")"
printf '%-24s %14.0f   %s\n' "1 rank x 1 thread" "$SINGLE" "$(steps_tps "$WORK/single")"
awk -v a="$ONE" -v b="$TWO" -v c="$SINGLE" 'BEGIN {
  printf "ratio 2 ranks x 1 thread / 1 rank x 2 threads: %.2f\n", b / a;
  printf "speed-up over 1 thread: 1 rank x 2 threads %.2f, 2 ranks x 1 thread %.2f\n", a / c, b / c }'
