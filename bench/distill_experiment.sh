#!/usr/bin/env bash
# Distillation on a real corpus: a teacher (`tiny`, trained here unless
# TEACHER names a checkpoint) and a lighter student trained twice for the same
# compute — once alone, once with the teacher (ctrl train --teacher) — then
# each model's held-out loss per control code and control gain
# (ctrl eval --codes), a table and a chart of held-out loss against training
# time (bench/lighter_plot).
#
# Equal compute, not equal measured time: the distilled student runs
# STEPS x F_s / (F_s + F_t) steps, where F_s is the student's training FLOPs
# per token and F_t the teacher's forward FLOPs per token (both from
# `ctrl plan --teacher`), so on an idle machine both take about the same
# wall-clock time, and the figure does not depend on what else the machine
# runs. The measured training times are printed beside it.
#
# usage: bench/distill_experiment.sh [CORPUS_DIR] [OUT_DIR]
#   CORPUS_DIR  a `ctrl prepare` output (default data/default)
#   OUT_DIR     runs, distill.svg and distill.md (default runs/distill)
# Environment: TEACHER (a checkpoint; default: train `tiny` for TEACHER_STEPS,
#   default 600, into OUT_DIR/teacher), STUDENT (--set arguments of the
#   student, default L2 D128 H2 F512), STEPS (the plain student's steps,
#   default 600), ALPHA (0.5), TAU (2), EVAL_EVERY (25), EVAL_BATCHES (2),
#   MAX_SEQUENCES (windows per code for the final matrices, 64), BUILD (build).
# Each run writes a checkpoint every EVAL_EVERY steps (training time leaves
# them out), so rerunning resumes finished or interrupted runs instead of
# redoing them. distill.md starts with the machine (CPU model, ISA flags,
# cores), commit, date and command.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in TEACHER TEACHER_STEPS STUDENT STEPS ALPHA TAU EVAL_EVERY EVAL_BATCHES MAX_SEQUENCES BUILD; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/distill_experiment.sh $*"
DATA="${1:-data/default}"
OUT="${2:-runs/distill}"
BUILD="${BUILD:-build}"
STEPS="${STEPS:-600}"
TEACHER_STEPS="${TEACHER_STEPS:-600}"
ALPHA="${ALPHA:-0.5}"
TAU="${TAU:-2}"
EVAL_EVERY="${EVAL_EVERY:-25}"
EVAL_BATCHES="${EVAL_BATCHES:-2}"
MAX_SEQUENCES="${MAX_SEQUENCES:-64}"
read -r -a student <<< "${STUDENT:---set model.n_layer=2 --set model.d_model=128 --set model.n_head=2 --set model.d_ff=512}"
if [ ! -f "$DATA/manifest.json" ]; then
  echo "error: $DATA/manifest.json not found: give a corpus prepared by 'ctrl prepare --out DIR' as the first argument" >&2
  exit 1
fi
[ -x "$BUILD/ctrl" ] && [ -x "$BUILD/lighter_plot" ] || make -C "$BUILD" ctrl lighter_plot -j"$(nproc)" >/dev/null
mkdir -p "$OUT"
start=$(date +%s)

train() {  # train NAME STEPS ARGS...: one run into $OUT/NAME, resumed if it has checkpoints
  local name=$1 steps=$2
  shift 2
  local resume=()
  [ -n "$(ls -A "$OUT/$name/checkpoints" 2>/dev/null)" ] && resume=(--resume)
  echo "=== $name ($steps steps)" >&2
  "$BUILD/ctrl" train --config tiny --data "$DATA" --out "$OUT/$name" "${resume[@]}" "$@" \
    --set train.steps="$steps" --set train.eval_every="$EVAL_EVERY" --set train.eval_batches="$EVAL_BATCHES" \
    --set train.log_every=1 --set train.checkpoint_every="$EVAL_EVERY"
}
last() { ls "$1"/checkpoints/step-*.ckpt | sort -V | tail -n 1; }

teacher="${TEACHER:-}"
if [ -z "$teacher" ]; then
  train teacher "$TEACHER_STEPS"
  teacher=$(last "$OUT/teacher")
fi
# The distilled student's steps: equal compute with the plain student's.
plan=$("$BUILD/ctrl" plan --config tiny "${student[@]}" --tokens 1 --hardware cpu --teacher "$teacher" --json)
steps_distilled=$(python3 -c '
import json, sys
p = json.loads(sys.argv[1]); f_s = p["flops_per_token"]; f_t = p["teacher_flops_per_token"]
print(max(1, round(int(sys.argv[2]) * f_s / (f_s + f_t))))
print(f"student {f_s/1e6:.1f} MFLOP/token per training step, teacher forward {f_t/1e6:.1f}", file=sys.stderr)' \
  "$plan" "$STEPS")
train student "$STEPS" "${student[@]}"
train student-distilled "$steps_distilled" "${student[@]}" --teacher "$teacher" \
  --distill-alpha "$ALPHA" --distill-temperature "$TAU"

# Held-out loss per code and control gain of each model (the code-by-code matrix).
for name in teacher student student-distilled; do
  if [ "$name" = teacher ]; then ckpt=$teacher; else ckpt=$(last "$OUT/$name"); fi
  mkdir -p "$OUT/$name"  # with TEACHER given, nothing was trained into $OUT/teacher
  "$BUILD/ctrl" eval --model "$ckpt" --data "$DATA" --codes --max-sequences "$MAX_SEQUENCES" \
    --out "$OUT/$name" --json > "$OUT/$name/codes.json"
done
"$BUILD/lighter_plot" "$OUT/distill.svg" student="$OUT/student" \
  student-distilled="$OUT/student-distilled" > "$OUT/runs.md"
{
  echo "$(date -u +%Y-%m-%d), $(cpu_model) ($(nproc) CPUs; ISA: $(cpu_isa)), commit" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')."
  echo "Command: \`${command_line% }\`"
  echo
} > "$OUT/distill.md"
python3 - "$OUT" "$teacher" "$ALPHA" "$TAU" "$STEPS" "$steps_distilled" >> "$OUT/distill.md" <<'EOF'
import json, sys
out, teacher, alpha, tau, steps, steps_d = sys.argv[1:]
models = [("teacher (tiny)", "teacher"), ("student alone", "student"), ("student + teacher", "student-distilled")]
m = {k: json.load(open(f"{out}/{k}/codes.json"))["codes"] for _, k in models}
rows = m["student"]["rows"]
print(f"Teacher {teacher}; student trained {steps} steps alone and {steps_d} steps with the teacher "
      f"(alpha {alpha}, temperature {tau}): equal compute.\n")
print("| model | " + " | ".join(f"{r} loss | {r} gain" for r in rows) + " | mean loss | mean gain |")
print("|---|" + "---:|---:|" * len(rows) + "---:|---:|")
for label, k in models:
    x = m[k]
    cells, tok, loss_sum, gains = [], 0, 0.0, []
    for r in rows:
        l, g, n = x["loss"][r][r], x["control_gain"][r], x["tokens"][r]
        cells.append(f"{l:.4f} | {g:+.4f}")
        tok += n; loss_sum += l * n; gains.append(g)
    print(f"| {label} | " + " | ".join(cells) + f" | {loss_sum / tok:.4f} | {sum(gains) / len(gains):+.4f} |")
print()
print(open(f"{out}/runs.md").read())
EOF
cat "$OUT/distill.md"
secs=$(( $(date +%s) - start ))
echo "distillation experiment done in $((secs / 60))m$((secs % 60))s on $(cpu_model), $(nproc) cores" >&2
echo "table: $OUT/distill.md, chart: $OUT/distill.svg" >&2
