#!/bin/bash
# The ops of a training step that hold its matrix products (a layer's four
# linear layers, its attention, the output head with its loss), one at a
# time, in ctrl (bench/step_products) and in PyTorch eager
# (bench/pytorch_products.py) on the same device, shapes and precision, in
# one run: where ctrl's step is faster or slower than PyTorch's, op by op.
#
# Output (RESULTS, a new temporary folder unless set): each side's JSON and
# products-vs-pytorch.md, one table per preset and precision with ctrl's
# speed-up on each op, forward and forward plus backward.
#
# ROUNDS (default 3) runs each side that many times as separate processes,
# alternating which goes first, and the table takes each op's median: where
# a process's buffers land moves an op's time by up to 15% on a 2-core VM.
#
# Knobs (environment): PRESETS="small base" PRECISIONS="fp32 bf16" BATCH=8 ROUNDS=3
# DEVICE=cpu (or cuda, cuda:N) THREADS=2 (CPU: both sides) OP_SECONDS=0.2 (per
# op and round) PRODUCTS=build/step_products PY (default .venv/bin/python,
# else python3) RESULTS=<folder>.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
PRESETS=${PRESETS:-small base}
PRECISIONS=${PRECISIONS:-fp32 bf16}
BATCH=${BATCH:-8}
ROUNDS=${ROUNDS:-3}
DEVICE=${DEVICE:-cpu}
THREADS=${THREADS:-2}
OP_SECONDS=${OP_SECONDS:-0.2}
PRODUCTS=${PRODUCTS:-build/step_products}
if [ -z "${PY:-}" ]; then
  PY=python3
  [ -x .venv/bin/python ] && PY=.venv/bin/python
fi
die() { echo "products_vs_pytorch: $*" >&2; exit 2; }
[ -x "$PRODUCTS" ] || die "no step_products at $PRODUCTS (cmake --build build --target step_products, or set PRODUCTS=)"
"$PY" -c 'import torch' 2>/dev/null || die "$PY cannot import torch (bash tools/setup_python.sh, or set PY=)"
for p in $PRECISIONS; do [[ $p =~ ^(fp32|bf16|fp16)$ ]] || die "PRECISIONS: '$p' is not fp32, bf16 or fp16"; done
for v in BATCH THREADS ROUNDS; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: expected a positive whole number"; done
RESULTS=${RESULTS:-$(mktemp -d /tmp/products-vs-pytorch.XXXXXX)}
mkdir -p "$RESULTS"

cpu_args=()
[[ $DEVICE == cpu ]] && cpu_args=(--threads "$THREADS")
machine=$(cpu_model)
flags=$(cpu_isa)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
report=$RESULTS/products-vs-pytorch.md
{
  echo "# ctrl against PyTorch, op by op"
  echo
  echo "$(date -u +%Y-%m-%d), commit $commit, device $DEVICE; CPU $machine ($(nproc) CPUs; ${flags:-no AVX-512})."
  echo "Each figure is the fastest of three rounds of about $OP_SECONDS s of calls; speed-up = PyTorch's time"
  echo "over ctrl's, each side's median over $ROUNDS processes. Command: \`PRESETS=\"$PRESETS\" PRECISIONS=\"$PRECISIONS\" BATCH=$BATCH ROUNDS=$ROUNDS DEVICE=$DEVICE THREADS=$THREADS bash bench/products_vs_pytorch.sh\`"
  echo
} >"$report.tmp"
# One process of each side, round $r of $name.
run_ctrl() {
  echo "products_vs_pytorch: $name round $r: ctrl" >&2
  "$PRODUCTS" --config "$preset" --device "$DEVICE" "${cpu_args[@]}" --seconds "$OP_SECONDS" \
    --set train.micro_batch="$BATCH" --set train.precision="$precision" --json >"$RESULTS/ctrl-$name-$r.json"
}
run_torch() {
  echo "products_vs_pytorch: $name round $r: PyTorch" >&2
  "$PY" bench/pytorch_products.py --preset "$preset" --batch "$BATCH" --precision "$precision" \
    --device "$DEVICE" "${cpu_args[@]}" --seconds "$OP_SECONDS" --save "$RESULTS/pytorch-$name-$r.json"
}
for preset in $PRESETS; do
  for precision in $PRECISIONS; do
    name=$preset-$precision
    ctrl_runs=() torch_runs=()
    for r in $(seq 1 "$ROUNDS"); do  # odd rounds ctrl first, even rounds PyTorch first
      if ((r % 2)); then run_ctrl; run_torch; else run_torch; run_ctrl; fi
      ctrl_runs+=("$RESULTS/ctrl-$name-$r.json") torch_runs+=("$RESULTS/pytorch-$name-$r.json")
    done
    "$PY" bench/pytorch_products.py --preset "$preset" --batch "$BATCH" --precision "$precision" --device "$DEVICE" \
      --torch "$(IFS=,; echo "${torch_runs[*]}")" --ctrl "$(IFS=,; echo "${ctrl_runs[*]}")" \
      --markdown "$RESULTS/$name.md" >/dev/null
    { echo "## $preset, $precision"; echo; cat "$RESULTS/$name.md"; echo; } >>"$report.tmp"
  done
done
mv "$report.tmp" "$report"
cat "$report"
echo "products_vs_pytorch: $report" >&2
