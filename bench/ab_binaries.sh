#!/bin/bash
# Two builds of ctrl (A and B) on the same training work, quiet and beside one
# busy single-threaded process, alternating which runs first in each round so
# that a noisy host's drift hits both. Prints one line per round and mode.
#
#   bash bench/ab_binaries.sh OLD/ctrl NEW/ctrl
#
# A and B may be wrapper scripts that set environment variables and exec a
# ctrl. Knobs (environment): PRESET=tiny BATCH=8 STEPS=10 WARMUP=2 THREADS=2
# ROUNDS=3 MODES="quiet busy" EXTRA (more ctrl bench flags). OPS="op op ..."
# (names from `ctrl bench --profile`, e.g. "attention_forward
# attention_backward") adds each op's seconds over all steps to every line,
# and a last line with the medians over rounds.
set -euo pipefail
source "$(dirname "$0")/machine.sh"
[ $# -eq 2 ] || { echo "usage: ab_binaries.sh CTRL_A CTRL_B" >&2; exit 2; }
A=$1 B=$2
for b in "$A" "$B"; do [ -x "$b" ] || { echo "ab_binaries: $b is not executable" >&2; exit 2; }; done
# One run: "tokens/s" or, with OPS, "tokens/s op1-seconds op2-seconds ...".
# ctrl's stderr is kept, and shown (exit 1) when it fails or prints no tokens/s.
measure() {
  local text
  # shellcheck disable=SC2086
  text=$("$1" bench --config "${PRESET:-tiny}" --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" --threads "${THREADS:-2}" \
    --set train.micro_batch="${BATCH:-8}" ${EXTRA:-} ${OPS:+--profile} 2>"$err") && grep -q '[0-9] tokens/s' <<<"$text" ||
    { echo "ab_binaries: $1 bench failed or printed no tokens/s; its stderr:" >&2; cat "$err" >&2; exit 1; }
  OPS="${OPS:-}" python3 -c '
import os, re, sys
text = sys.stdin.read()
seconds = {l.split()[0]: l.split()[2] for l in text.splitlines() if len(l.split()) == 4 and l.split()[3].endswith("%")}
print(round(float(re.search(r"([0-9.]+) tokens/s", text).group(1))),
      *[seconds.get(op, "nan") for op in os.environ["OPS"].split()])' <<<"$text"
}
log=$(mktemp) err=$(mktemp)
busy_pid=
stop_busy() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null || true; busy_pid=; }
trap 'stop_busy; rm -f "$log" "$err"' EXIT
echo "ab_binaries: A=$A B=$B, ${PRESET:-tiny}, $(cpu_model), $(nproc) CPUs" >&2
for r in $(seq 1 "${ROUNDS:-3}"); do
  for mode in ${MODES:-quiet busy}; do
    [ "$mode" = busy ] && { bash -c 'while :; do :; done' & busy_pid=$!; }
    if [ $((r % 2)) = 1 ]; then a=$(measure "$A"); b=$(measure "$B"); else b=$(measure "$B"); a=$(measure "$A"); fi
    line="round $r $mode: A ${a%% *} B ${b%% *} tokens/s"
    i=2
    for op in ${OPS:-}; do
      line+="; $op A $(cut -d' ' -f$i <<<"$a") B $(cut -d' ' -f$i <<<"$b") s"
      i=$((i + 1))
    done
    echo "$line" | tee -a "$log"
    stop_busy
  done
done
# Medians over rounds, per mode and figure, of the lines above.
python3 - "$log" <<'EOF'
import re, statistics, sys
pairs = {}
for line in open(sys.argv[1]):
    mode = line.split()[2].rstrip(":")
    for part in line.split(": ", 1)[1].split("; "):
        m = re.fullmatch(r"(?:(\S+) )?A (\S+) B (\S+) (?:tokens/)?s", part.strip())
        pairs.setdefault((mode, m.group(1) or "tokens/s"), []).append((float(m.group(2)), float(m.group(3))))
for (mode, what), ab in pairs.items():
    a, b = statistics.median(x for x, _ in ab), statistics.median(y for _, y in ab)
    print(f"median {mode} {what}: A {a:g} B {b:g} (B/A {b / a:.2f})")
EOF
