#!/bin/bash
# Two builds of ctrl (A and B) generating the same long text: a `tiny` with
# model.n_ctx=4096 (one training step on the sample corpus in
# ../shared/data), 4,000 sampled tokens from a fixed seed, alternating which
# runs first in each round. Prints each run's seconds and the medians; the
# texts must be the same bytes (only their speed may differ).
#
#   bash bench/generate_long.sh OLD/ctrl NEW/ctrl
#
# Knobs (environment): TOKENS=4000 ROUNDS=3 THREADS=2 DATA (default
# ../shared/data) WORK (default a temporary folder, removed at the end).
set -euo pipefail
source "$(dirname "$0")/machine.sh"
[ $# -eq 2 ] || { echo "usage: generate_long.sh CTRL_A CTRL_B" >&2; exit 2; }
A=$1 B=$2
DATA=${DATA:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
work=${WORK:-$(mktemp -d)}
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
echo "generate_long: A=$A B=$B, $(cpu_model), $(nproc) CPUs, ${TOKENS:-4000} tokens" >&2
if [ ! -d "$work/run" ]; then
  "$B" prepare --source Wikipedia="$DATA/jawiki-excerpt.xml.bz2" --source Aozora="$DATA/aozora-notation-examples.sjis.txt" \
    --out "$work/corpus" --vocab-size 4000 >/dev/null 2>&1
  "$B" train --config tiny --out "$work/run" --data "$work/corpus" --set model.n_ctx=4096 --set train.steps=1 \
    --set train.global_batch=1 --set train.micro_batch=1 --quiet >/dev/null 2>&1
fi
run() {  # seconds of one generation; its text into $work/$2.txt
  local start end
  start=$(date +%s.%N)
  "$1" generate --model "$work/run" --control Wikipedia --max-tokens "${TOKENS:-4000}" --temperature 1 --penalty 1 \
    --seed 3 --threads "${THREADS:-2}" >"$work/$2.txt" 2>/dev/null
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.2f}')"
}
a=() b=()
for r in $(seq 1 "${ROUNDS:-3}"); do
  if ((r % 2)); then ta=$(run "$A" a); tb=$(run "$B" b); else tb=$(run "$B" b); ta=$(run "$A" a); fi
  a+=("$ta") b+=("$tb")
  echo "round $r: A ${ta} s, B ${tb} s"
done
cmp -s "$work/a.txt" "$work/b.txt" && same="the same text" || same="DIFFERENT texts ($(wc -c <"$work/a.txt") and $(wc -c <"$work/b.txt") bytes)"
python3 -c "
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f'median seconds: A {ma:.2f} B {mb:.2f} (A/B {ma / mb:.2f}); ' + sys.argv[3])" "${a[*]}" "${b[*]}" "$same"
