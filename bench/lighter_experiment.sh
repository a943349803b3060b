#!/usr/bin/env bash
# Lighter models on a real corpus: trains the `tiny` preset unshared, with all
# layer parameters shared, with the attention block shared, and with a
# factorized embedding (E = 128), each for the same number of steps, and
# draws held-out loss against training time as one SVG (bench/lighter_plot).
#
# usage: bench/lighter_experiment.sh [CORPUS_DIR] [OUT_DIR]
#   CORPUS_DIR  a `ctrl prepare` output (default data/default, the built-in
#               corpus that scripts/main.sh prepares)
#   OUT_DIR     where the runs, lighter.svg and lighter.md go (default runs/lighter)
# Environment: STEPS (default 600, the tiny preset's), EVAL_EVERY (default 50),
#   EVAL_BATCHES (micro-batches per code per evaluation, default 4), THREADS
#   (default: all cores), BUILD (default build), EXTRA (more --set arguments
#   for every run, e.g. "--set model.n_ctx=64").
# Runs one after another, so each gets the whole machine; each run writes a
# checkpoint every EVAL_EVERY steps (training time in metrics.jsonl leaves
# them out), so rerunning resumes finished or interrupted runs (ctrl train
# --resume) instead of redoing them. lighter.md starts with the machine (CPU
# model, ISA flags, cores), commit, date and command.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in STEPS EVAL_EVERY EVAL_BATCHES THREADS BUILD EXTRA; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/lighter_experiment.sh $*"
DATA="${1:-data/default}"
OUT="${2:-runs/lighter}"
BUILD="${BUILD:-build}"
STEPS="${STEPS:-600}"
EVAL_EVERY="${EVAL_EVERY:-50}"
EVAL_BATCHES="${EVAL_BATCHES:-4}"
THREADS="${THREADS:-0}"
read -r -a extra <<< "${EXTRA:-}"
if [ ! -f "$DATA/manifest.json" ]; then
  echo "error: $DATA/manifest.json not found: give a corpus prepared by 'ctrl prepare --out DIR' as the first argument" >&2
  exit 1
fi
[ -x "$BUILD/ctrl" ] && [ -x "$BUILD/lighter_plot" ] || make -C "$BUILD" ctrl lighter_plot -j"$(nproc)" >/dev/null
mkdir -p "$OUT"

declare -A variant=(
  [unshared]=""
  [shared-all]="--set model.sharing=all"
  [shared-attention]="--set model.sharing=attention"
  [factorized-E128]="--set model.embedding_dim=128"
)
plots=()
for name in unshared shared-all shared-attention factorized-E128; do
  run="$OUT/$name"
  read -r -a sets <<< "${variant[$name]}"
  resume=()
  [ -n "$(ls -A "$run/checkpoints" 2>/dev/null)" ] && resume=(--resume)
  echo "=== $name" >&2
  "$BUILD/ctrl" train --config tiny --data "$DATA" --out "$run" "${resume[@]}" "${sets[@]}" "${extra[@]}" \
    --set train.steps="$STEPS" --set train.eval_every="$EVAL_EVERY" --set train.eval_batches="$EVAL_BATCHES" \
    --set train.log_every=1 --set train.checkpoint_every="$EVAL_EVERY" --set train.threads="$THREADS"
  plots+=("$name=$run")
done
{
  echo "$(date -u +%Y-%m-%d), $(cpu_model) ($(nproc) CPUs; ISA: $(cpu_isa)), commit" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')."
  echo "Command: \`${command_line% }\`"
  echo
  "$BUILD/lighter_plot" "$OUT/lighter.svg" "${plots[@]}"
} | tee "$OUT/lighter.md"
echo "chart: $OUT/lighter.svg, table: $OUT/lighter.md" >&2
