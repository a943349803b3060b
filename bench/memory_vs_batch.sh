#!/bin/bash
# Peak memory of a training step against micro-batch, per precision: runs
# `ctrl bench --json` for each (precision, micro-batch) pair on PRESET and
# draws the peaks with build/memory_plot (SVG + a Markdown table on stdout).
#
# Knobs (environment): PRESET=small PRECISIONS="fp32 bf16" BATCHES="1 8 16 32 64"
# STEPS=2 WARMUP=1 CTRL=build/ctrl PLOT=build/memory_plot RESULTS=<folder>
# (default: a new temporary folder; the SVG is RESULTS/memory-PRESET.svg, the
# table with the machine, commit, date and command RESULTS/memory-PRESET.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in PRESET PRECISIONS BATCHES STEPS WARMUP; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/memory_vs_batch.sh"

PRESET=${PRESET:-small}
PRECISIONS=${PRECISIONS:-fp32 bf16}
BATCHES=${BATCHES:-1 8 16 32 64}
STEPS=${STEPS:-2}
WARMUP=${WARMUP:-1}
CTRL=${CTRL:-build/ctrl}
PLOT=${PLOT:-build/memory_plot}
for tool in "$CTRL" "$PLOT"; do
  [ -x "$tool" ] || { echo "memory_vs_batch: $tool not found (build the project first: scripts/setup.sh)" >&2; exit 1; }
done
out=${RESULTS:-$(mktemp -d)}
mkdir -p "$out"
echo "memory_vs_batch: results in $out (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
files=()
for prec in $PRECISIONS; do
  for b in $BATCHES; do
    echo "== ctrl bench --config $PRESET, $prec, micro-batch $b" >&2
    "$CTRL" bench --config "$PRESET" --steps "$STEPS" --warmup "$WARMUP" --set train.precision="$prec" \
      --set train.micro_batch="$b" --set train.global_batch="$b" --json > "$out/ctrl-$prec-b$b.json"
    files+=("$out/ctrl-$prec-b$b.json")
  done
done
{
  echo "# Peak memory against micro-batch, \`$PRESET\`"
  echo
  echo "$(date -u +%Y-%m-%d), $(cpu_model) ($(nproc) CPUs; ISA: $(cpu_isa)), commit" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')."
  echo "Command: \`$command_line\` ($STEPS steps after $WARMUP warm-up, dropout as the preset)."
  echo
  "$PLOT" "$out/memory-$PRESET.svg" "${files[@]}"
} | tee "$out/memory-$PRESET.md"
echo "memory_vs_batch: chart in $out/memory-$PRESET.svg, table in $out/memory-$PRESET.md" >&2
