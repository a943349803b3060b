#!/bin/bash
# Training throughput on a quiet machine and beside one busy single-threaded
# process (a shell loop, as another user's job would be), for ctrl under each
# OpenMP wait setting and for PyTorch, in one run. Rounds alternate quiet and
# busy and the settings within a round, so that drift hits all alike.
# WORK=generate times `ctrl generate` instead (one-row decoding: tokens per
# second of wall time, start-up and model loading included; no peer).
#
# Settings (POLICIES, space-separated):
#   default      ctrl as it runs when the user sets nothing (its thread count adapts
#                to the machine, ops/cpu/thread_adapter.h; no --threads)
#   spin:N       GOMP_SPINCOUNT=N (a worker spins N iterations at a barrier, then sleeps)
#   passive      OMP_WAIT_POLICY=passive (workers sleep at once)
#   active       OMP_WAIT_POLICY=active (libgomp spins for a long time)
#   threads:N    --threads N with the default wait (a pinned count: no adaptation)
#
# Prints a table: tokens/s quiet, tokens/s busy (median of ROUNDS), busy/quiet,
# the median over rounds of busy against the same round's quiet run of the
# program's reference (its first setting: ctrl's first POLICIES entry, PyTorch's
# default; issue 15's measure when that is `default`), and quiet against the
# reference's quiet, with a bar per row.
#
# Knobs (environment): PRESET=tiny BATCH=8 STEPS=12 WARMUP=2 ROUNDS=3 THREADS=$(nproc)
# POLICIES="default spin:20000 passive active threads:1" CTRL=build/ctrl
# (the adaptation first decides 2 s into a run, then every 20 s: give busy
# runs a WARMUP longer than 2 s, e.g. WARMUP=5 STEPS=20 for tiny at batch 8)
# PY=.venv/bin/python (PyTorch peer, eager fp32; PEER=0 skips it) RESULTS=<folder>
# SESSION=same | other: the busy loop in this script's session, or in a session of
# its own (setsid), as another login's job runs; where the kernel groups tasks by
# session (/proc/sys/kernel/sched_autogroup_enabled = 1), "other" splits the CPUs
# between the two sessions rather than between the threads.
# WORK=train | generate; for generate: MODEL=<checkpoint> (default: the main
# job's latest, runs/tiny), CODE (default: the model's first code), TOKENS=127
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in PRESET BATCH STEPS WARMUP ROUNDS THREADS POLICIES CTRL PEER WORK SESSION MODEL CODE TOKENS; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/shared_machine.sh"

PRESET=${PRESET:-tiny}
BATCH=${BATCH:-8}
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
POLICIES=${POLICIES:-default spin:20000 passive active threads:1}
CTRL=${CTRL:-build/ctrl}
PY=${PY:-.venv/bin/python}
PEER=${PEER:-1}
WORK=${WORK:-train}
SESSION=${SESSION:-same}
case $SESSION in same | other) ;; *) echo "shared_machine: SESSION=$SESSION: expected same or other" >&2; exit 2 ;; esac
TOKENS=${TOKENS:-127}
[ -x "$CTRL" ] || { echo "shared_machine: no $CTRL (build first)" >&2; exit 2; }
case $WORK in
  train) ;;
  generate)
    PEER=0
    MODEL=${MODEL:-$(ls runs/tiny/checkpoints/step-*.ckpt 2>/dev/null | sort -V | tail -n 1)}
    [ -f "$MODEL" ] || { echo "shared_machine: WORK=generate needs MODEL=<checkpoint> (or run scripts/main.sh)" >&2; exit 2; }
    # An unknown code makes ctrl list the model's codes: take the first.
    CODE=${CODE:-$("$CTRL" generate --model "$MODEL" --control '?' 2>&1 | sed -n 's/.*this model knows: \([^ ,)]*\).*/\1/p' | head -n 1 || true)}
    [ -n "$CODE" ] || { echo "shared_machine: could not read $MODEL's control codes; set CODE" >&2; exit 2; } ;;
  *) echo "shared_machine: WORK=$WORK: expected train or generate" >&2; exit 2 ;;
esac
if [ "$PEER" = 1 ] && [ ! -x "$PY" ]; then
  echo "shared_machine: no $PY (bash tools/setup_python.sh), PyTorch skipped" >&2
  PEER=0
fi
out=${RESULTS:-$(mktemp -d)}
mkdir -p "$out"

settings=()
for p in $POLICIES; do settings+=("ctrl $p"); done
if [ "$PEER" = 1 ]; then settings+=("pytorch default" "pytorch passive"); fi

tokens_per_s() { python3 -c 'import json, sys; print(json.load(sys.stdin)["tokens_per_s"])'; }

# Runs one setting; prints tokens/s.
run_one() {
  local who=${1%% *} policy=${1#* } threads=$THREADS
  local -a pin=(--threads "$THREADS")
  local -a env=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
  case $policy in
    spin:*) env+=("GOMP_SPINCOUNT=${policy#spin:}") ;;
    passive) env+=(OMP_WAIT_POLICY=passive) ;;
    active) env+=(OMP_WAIT_POLICY=active) ;;
    threads:*) threads=${policy#threads:} pin=(--threads "${policy#threads:}") ;;
    default) pin=() ;;
    *) echo "shared_machine: unknown setting '$policy'" >&2; exit 2 ;;
  esac
  if [ "$WORK" = generate ]; then
    # ctrl generate has no --threads: a pinned count is OMP_NUM_THREADS.
    [ ${#pin[@]} -gt 0 ] && env+=("OMP_NUM_THREADS=${pin[1]}")
    local start end tokens
    start=$(date +%s.%N)
    "${env[@]}" "$CTRL" generate --model "$MODEL" --control "$CODE" --max-tokens "$TOKENS" --temperature 0.8 \
      --top-k 40 --seed 1 --ids 2>"$out/generate.err" >/dev/null
    end=$(date +%s.%N)
    tokens=$(sed -n 's/^(\([0-9]*\) tokens generated.*/\1/p' "$out/generate.err")
    [ -n "$tokens" ] || { cat "$out/generate.err" >&2; exit 1; }
    python3 -c "print($tokens / ($end - $start))"
  elif [ "$who" = ctrl ]; then
    "${env[@]}" "$CTRL" bench --config "$PRESET" --steps "$STEPS" --warmup "$WARMUP" "${pin[@]}" \
      --set train.micro_batch="$BATCH" --set model.embd_pdrop=0 --set model.resid_pdrop=0 --json \
      2>>"$out/stderr.log" | tokens_per_s
  else
    "${env[@]}" "$PY" bench/pytorch_train.py --preset "$PRESET" --batch "$BATCH" --steps "$STEPS" \
      --warmup-steps "$WARMUP" --threads "$threads" --json 2>>"$out/stderr.log" | tokens_per_s
  fi
}

busy_pid=
stop_busy() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null || true; busy_pid=; }
trap stop_busy EXIT

what="$PRESET, batch $BATCH"
[ "$WORK" = generate ] && what="ctrl generate of $TOKENS tokens from $MODEL under $CODE"
echo "shared_machine: $what, $THREADS threads, busy loop in the $SESSION session (autogroup $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo unknown)), $ROUNDS rounds on $(cpu_model), $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
: >"$out/runs.txt"  # this run's rows only, even in a RESULTS folder used before
for r in $(seq 1 "$ROUNDS"); do
  for mode in quiet busy; do
    if [ "$mode" = busy ]; then
      if [ "$SESSION" = other ]; then setsid bash -c 'while :; do :; done' & else bash -c 'while :; do :; done' & fi
      busy_pid=$!
    fi
    for s in "${settings[@]}"; do
      tps=$(run_one "$s")
      echo "$s|$mode|$tps|$r" >>"$out/runs.txt"
      printf '  round %d %-5s %-22s %8.1f tokens/s\n' "$r" "$mode" "$s" "$tps" >&2
    done
    stop_busy
  done
done

{
  echo "# Tokens/s quiet and beside one busy process"
  echo
  echo "$(date -u +%Y-%m-%d), $(cpu_model) ($(nproc) CPUs; ISA: $(cpu_isa)), commit" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')."
  how="ctrl generate, start-up included"
  peer=""
  [ "$PEER" = 1 ] && peer=" and pytorch_train.py"
  [ "$WORK" = train ] && how="ctrl bench$peer, dropout 0, $STEPS steps after $WARMUP warm-up"
  echo "Command: \`$command_line\`. WORK=$WORK: $what ($how), $THREADS threads; busy loop in the $SESSION session; $ROUNDS rounds."
  echo
} | tee "$out/shared_machine.md"
python3 - "$out/runs.txt" "${settings[@]}" <<'EOF' | tee -a "$out/shared_machine.md"
import statistics, sys
runs, by_round = {}, {}
for line in open(sys.argv[1]):
    s, mode, tps, r = line.rstrip("\n").split("|")
    runs.setdefault((s, mode), []).append(float(tps))
    by_round.setdefault((r, mode), {})[s] = float(tps)
settings = sys.argv[2:]
med = {k: statistics.median(v) for k, v in runs.items()}
reference = {}
for s in settings:
    reference.setdefault(s.split()[0], s)
# Per round: a setting's busy run against the same round's quiet run of its
# program's first setting (the reference: what that program gives on a quiet
# machine; minutes apart, so the host's drift cancels).
def round_ratio(s):
    ratios = [got[s] / by_round[(r, "quiet")][reference[s.split()[0]]]
              for (r, mode), got in by_round.items() if mode == "busy" and s in got]
    return statistics.median(ratios)
print("| setting | quiet tokens/s | busy tokens/s | busy / quiet | busy / reference quiet, by round | quiet / reference quiet | busy |")
print("|---|---:|---:|---:|---:|---:|---|")
for s in settings:
    q, b = med[(s, "quiet")], med[(s, "busy")]
    bar = "█" * round(20 * b / q)
    ref_quiet = med[(reference[s.split()[0]], "quiet")]
    print(f"| {s} | {q:,.0f} | {b:,.0f} | {b / q:.2f} | {round_ratio(s):.2f} | {q / ref_quiet:.3f} | {bar} |")
EOF
echo "shared_machine: runs and table in $out" >&2
