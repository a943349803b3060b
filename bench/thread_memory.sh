#!/bin/bash
# A CPU run's peak memory against the planner's figure for it, by thread
# count: `ctrl bench --json` at pinned counts (a count above the CPUs tiles
# the products, as the thread adapter does beside busy processes), printing
# the measured peak resident memory and `planned_peak_rss_bytes`, the figure
# `ctrl plan` and ctrl train's memory check count at that many threads
# (kCpuBytesPerThread per thread past two, widened bf16's per-thread copies).
# Knobs: PRESETS="tiny small base" PATHS="fp32 native widened" COUNTS="2 8 16"
#        STEPS=2 WARMUP=1 BATCH= (the preset's micro-batch) CTRL=build/ctrl
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
PRESETS=${PRESETS:-tiny small base} PATHS=${PATHS:-fp32 native widened} COUNTS=${COUNTS:-2 8 16}
STEPS=${STEPS:-2} WARMUP=${WARMUP:-1} BATCH=${BATCH:-} CTRL=${CTRL:-build/ctrl}
[ -x "$CTRL" ] || { echo "thread_memory: no $CTRL (build first)" >&2; exit 2; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
echo "$(cpu_model); $(nproc) CPUs; $(git rev-parse --short HEAD)"
echo "| preset | products | threads | peak MiB | plan MiB | peak / plan | tokens/s |"
echo "|---|---|---:|---:|---:|---:|---:|"
for preset in $PRESETS; do
  for path in $PATHS; do
    case $path in
      fp32) set_path=(--set train.precision=fp32) ;;
      native | widened) set_path=(--set train.precision=bf16 --set train.cpu_bf16="$path") ;;
      *) echo "thread_memory: PATHS: expected fp32, native or widened, got $path" >&2; exit 2 ;;
    esac
    batch=()
    [ -n "$BATCH" ] && batch=(--set train.micro_batch="$BATCH")
    for n in $COUNTS; do
      # ctrl's stderr is kept, and shown when it fails or prints no JSON.
      json=$("$CTRL" bench --config "$preset" --steps "$STEPS" --warmup "$WARMUP" --threads "$n" --json \
        "${set_path[@]}" "${batch[@]}" 2>"$err") && python3 -c 'import json, sys; json.loads(sys.argv[1])' "$json" 2>/dev/null ||
        { echo "thread_memory: ctrl bench ($preset, $path, $n threads) failed or printed no JSON; its stderr:" >&2
          cat "$err" >&2; exit 1; }
      python3 -c '
import json, sys
d = json.loads(sys.argv[1])
peak, plan = d["peak_rss_bytes"] / 2**20, d["planned_peak_rss_bytes"] / 2**20
print("| %s | %s | %d | %.0f | %.0f | %.3f | %.0f |" % (sys.argv[2], sys.argv[3], d["threads"], peak, plan, peak / plan,
                                                    d["tokens_per_s"]))' "$json" "$preset" "$path"
    done
  done
done
