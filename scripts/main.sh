#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install and build, prepare the
# built-in Japanese corpus (Debian's Japanese documentation), train the `tiny`
# model on it, generate text under each of its control codes, and measure
# control: the code-by-code matrix and control accuracy (ctrl eval).
# Environment: RUN (default runs/tiny), DATA (default data/default), STEPS.
# Ends by naming its outputs: the loss plot, the metrics and the samples.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
start=$(date +%s)
bash scripts/setup.sh
DATA="${DATA:-data/default}"
RUN="${RUN:-runs/tiny}"
STEPS="${STEPS:-600}"
if [ ! -f "$DATA/manifest.json" ]; then
  build/ctrl prepare --out "$DATA"
fi
# An interrupted run goes on: from its newest checkpoint, or from step 0 when it
# was killed before its first (its metrics.jsonl is there, no checkpoint yet).
resume=()
if [ -f "$RUN/metrics.jsonl" ] || [ -n "$(ls -A "$RUN/checkpoints" 2>/dev/null)" ]; then
  resume=(--resume)
fi
build/ctrl train --config tiny --data "$DATA" --out "$RUN" --set train.steps="$STEPS" "${resume[@]}"
ckpt=$(ls "$RUN"/checkpoints/step-*.ckpt | sort -V | tail -n 1)
codes=$(python3 -c "import json,sys; print(' '.join(c['name'] for c in json.load(open(sys.argv[1]))['codes']))" "$DATA/manifest.json")
samples="$RUN/samples.txt"
: > "$samples.tmp"
for code in $codes; do
  echo "=== $code" | tee -a "$samples.tmp"
  # A few-minute `tiny` model repeats itself under CTRL's near-greedy setting, so sample instead.
  build/ctrl generate --model "$ckpt" --control "$code" --max-tokens 80 --temperature 0.8 --top-k 40 --seed 1 |
    tee -a "$samples.tmp"
done
mv "$samples.tmp" "$samples"
# Does the code steer the model? The held-out loss of each code's text under every code, and
# samples under each code labelled by an independent classifier (docs/training.md, "Measuring control").
build/ctrl eval --model "$ckpt" --data "$DATA" --codes --max-sequences 16 --control-accuracy 25 --out "$RUN"
secs=$(( $(date +%s) - start ))
echo
echo "main job done in $((secs / 60))m$((secs % 60))s on $(cpu_model), $(nproc) cores"
echo "  loss curve: $RUN/loss.svg"
echo "  metrics:    $RUN/metrics.jsonl"
echo "  samples:    $samples"
echo "  control:    $RUN/control-codes.svg (heatmap), $RUN/control-codes.json, $RUN/control-accuracy.json"
echo "  checkpoint: $ckpt"
echo "  corpus:     $DATA (manifest.json, tokenizer, shards)"
