#!/bin/bash
# Training throughput and peak memory of two builds of ctrl on the same work,
# alternating within each round so that drift hits both: is a change a
# regression? (Issue 12 asked that the backend seam keep `ctrl bench` on
# `small` within 3% of before, in fp32 and bf16, with equal memory.)
#
# BEFORE and AFTER are git revisions (built here, `ctrl` target only, in a
# worktree under $WORK) or paths to a built ctrl binary. Defaults: BEFORE is
# the commit before the memory seam (956076b), AFTER is this checkout's build/ctrl.
#
# Knobs: PRESET=small PRECISIONS="fp32 bf16" STEPS=6 WARMUP=2 ROUNDS=3
#        THREADS=$(nproc) SETS="train.micro_batch=8" (extra --set options, space-separated)
#        WORK=/tmp/ctrl-compare RESULTS=<folder for the .md table>
# Prints a table: median tokens/s of each build, after/before, peak RSS of each.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in BEFORE AFTER PRESET PRECISIONS STEPS WARMUP ROUNDS THREADS SETS WORK RESULTS; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/compare_builds.sh"

BEFORE=${BEFORE:-956076b}
AFTER=${AFTER:-build/ctrl}
PRESET=${PRESET:-small}
PRECISIONS=${PRECISIONS:-fp32 bf16}
STEPS=${STEPS:-6}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
SETS=${SETS:-}
WORK=${WORK:-/tmp/ctrl-compare}
mkdir -p "$WORK"
sets=()
for s in $SETS; do sets+=(--set "$s"); done

# A revision's ctrl binary, built once (ccache makes a rebuild cheap).
binary_of() {
  local what=$1
  if [ -x "$what" ]; then echo "$what"; return; fi
  local sha
  sha=$(git rev-parse --short=10 "$what^{commit}") || { echo "compare_builds: '$what' is neither a binary nor a revision" >&2; exit 2; }
  local tree="$WORK/$sha"
  if [ ! -x "$tree/build/ctrl" ]; then
    echo "compare_builds: building ctrl at $sha in $tree (a few minutes)" >&2
    [ -d "$tree" ] || git worktree add --detach "$tree" "$sha" >&2
    local launcher=()
    command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DCTRL_WITH_CUDA=OFF -DCTRL_BUILD_TESTS=OFF \
      "${launcher[@]}" > "$tree/build.log" 2>&1 &&
      cmake --build "$tree/build" --target ctrl -j "$(nproc)" >> "$tree/build.log" 2>&1 ||
      { echo "compare_builds: build of $sha failed, see $tree/build.log" >&2; exit 1; }
  fi
  echo "$tree/build/ctrl"
}

before_bin=$(binary_of "$BEFORE")
after_bin=$(binary_of "$AFTER")
raw="$WORK/raw.jsonl"
: > "$raw"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for precision in $PRECISIONS; do
    # Alternate which build goes first, so neither always runs on a warmer machine.
    order="before after"
    [ $((round % 2)) = 0 ] && order="after before"
    for which in $order; do
      bin=$before_bin
      [ "$which" = after ] && bin=$after_bin
      # ctrl's stderr is kept, and shown when it fails or prints no JSON.
      line=$("$bin" bench --config "$PRESET" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --set train.precision="$precision" "${sets[@]}" --json 2> "$err") &&
        line=$(python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])))' "$line" 2> /dev/null) ||
        { echo "compare_builds: $bin bench ($which, $precision) failed or printed no JSON; its stderr:" >&2
          cat "$err" >&2; exit 1; }
      echo "{\"build\": \"$which\", \"round\": $round, \"result\": $line}" >> "$raw"
      printf 'round %d/%d  %-5s %-6s %8.1f tokens/s\n' "$round" "$ROUNDS" "$precision" "$which" \
        "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$line")" >&2
    done
  done
done

table=$(python3 - "$raw" "$BEFORE" "$AFTER" "$PRESET" "$ROUNDS" "$STEPS" "$(cpu_model)" "$(nproc)" <<'EOF'
import json, statistics, sys
raw, before, after, preset, rounds, steps, cpu, cores = sys.argv[1:]
runs = [json.loads(l) for l in open(raw)]
threads = runs[0]["result"]["threads"]
print(f"`{preset}`, {steps} timed steps per run, median of {rounds} alternating rounds; {cpu}, {cores} CPUs, "
      f"{threads} threads.")
print(f"before = {before}, after = {after}\n")
print("| precision | before tokens/s | after tokens/s | after/before | before peak RSS | after peak RSS |")
print("|---|---:|---:|---:|---:|---:|")
for p in dict.fromkeys(r["result"]["precision"] for r in runs):
    def pick(b, key):
        return [r["result"][key] for r in runs if r["build"] == b and r["result"]["precision"] == p]
    tb, ta = statistics.median(pick("before", "tokens_per_s")), statistics.median(pick("after", "tokens_per_s"))
    mb, ma = max(pick("before", "peak_rss_bytes")), max(pick("after", "peak_rss_bytes"))
    spread = lambda v: f" ({min(v):.0f}-{max(v):.0f})"
    print(f"| {p} | {tb:.1f}{spread(pick('before','tokens_per_s'))} | {ta:.1f}{spread(pick('after','tokens_per_s'))} "
          f"| {ta / tb:.3f} | {mb / 2**20:.0f} MiB | {ma / 2**20:.0f} MiB |")
EOF
)
echo "$table"
if [ -n "${RESULTS:-}" ]; then
  mkdir -p "$RESULTS"
  out="$RESULTS/compare-builds-$PRESET.md"
  {
    echo "# ctrl bench, two builds alternating ($(date -u +%Y-%m-%d))"
    echo
    echo "Command: \`$command_line\`"
    echo "at commit $(git rev-parse --short HEAD); $(cpu_model), $(nproc) CPUs; ISA: $(cpu_isa)"
    echo
    echo "$table"
  } > "$out.tmp"
  mv "$out.tmp" "$out"
  echo "written: $out" >&2
fi
