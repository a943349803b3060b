#!/usr/bin/env bash
# Control you can measure (issue 14): the best model this machine trains in
# MINUTES minutes, on two corpora, and what its control codes do.
#
#   1. Corpora: the built-in default corpus (Debian's Japanese documentation,
#      codes Manual, Reference, Guide, FAQ; as scripts/main.sh prepares it) and
#      Japanese Wikipedia + Aozora Bunko from the two shared sample files, each
#      source under its own code (Wikipedia, Aozora), vocabulary 8000 like the
#      default corpus's. A code with no held-out document (the Aozora sample
#      is a single document) is reported as such: no held-out perplexity, no
#      matrix row, no classifier ceiling; it is not made up.
#   2. Model and steps: a short throughput probe (`ctrl train` for a few steps,
#      eval and checkpoints off) of each candidate — `tiny`, `narrow` (tiny
#      with L 2, D 128, H 2, F 512: the distillation student) and `small`
#      (vocabulary 8000) — gives tokens per second of the whole machine
#      (tokens / (CPU seconds / threads), so a busy machine during the probe
#      does not shrink the budget); MODEL (default narrow) is trained for
#      MINUTES x 60 x its rate / tokens per step steps on each corpus. Why
#      `narrow`: at equal compute it beat `tiny` on every code of the default
#      corpus (bench/results/control-demo-pilot.md), and `small` sees less
#      than one pass over either corpus in 30 minutes. Training is
#      step-based: on a shared machine it takes longer in wall time, with the
#      same result. The chosen steps are kept in OUT/plan.json, so a rerun
#      resumes with the same steps.
#   3. Per corpus: held-out loss and perplexity per code and the code-by-code
#      matrix with control gains (`ctrl eval --codes`, up to MAX_SEQUENCES
#      windows per code), control accuracy with the classifier's ceiling
#      (`--control-accuracy ACCURACY`), SAMPLES samples under each code
#      (`ctrl generate`, temperature 0.8, top-k 40, seeds 1..SAMPLES).
#   4. Report: RESULTS_DIR/control-demo.md (machine, commit, date, command,
#      every figure) and the heatmaps and loss curves as
#      RESULTS_DIR/control-demo-<corpus>.svg and control-demo-<corpus>-loss.svg.
#
# usage: [MINUTES=30] bash bench/control_demo.sh
# Environment: MINUTES (training budget per corpus on an idle machine, default
#   30), MODEL (tiny | narrow | small, default narrow), PROBE (candidates to
#   probe, default "tiny narrow small"), STEPS (skip the budget: train exactly
#   this many steps), OUT (runs, default runs/control-demo-<MINUTES>min),
#   RESULTS_DIR (default bench/results when MINUTES is 30, else OUT),
#   DEFAULT_DATA (data/default), JA_DATA (data/ja-wiki-aozora),
#   SHARED (the sample files' folder, default ../shared/data),
#   JA_VALID_FRACTION (held-out share of the Japanese corpus's documents,
#   default 0.05: 1% would hold out a single Wikipedia article),
#   MAX_SEQUENCES (256), ACCURACY (25), SAMPLES (2), BUILD (build).
# Rerunning resumes: prepared corpora, the plan, finished or interrupted
# trainings are reused; evaluations, samples and the report are redone.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line="bash bench/control_demo.sh"
for v in MINUTES MODEL PROBE STEPS OUT RESULTS_DIR DEFAULT_DATA JA_DATA SHARED JA_VALID_FRACTION \
         MAX_SEQUENCES ACCURACY SAMPLES BUILD; do
  [ -n "${!v+x}" ] && command_line="$v=${!v} $command_line"
done
MINUTES="${MINUTES:-30}"
MODEL="${MODEL:-narrow}"
PROBE="${PROBE:-tiny narrow small}"
STEPS="${STEPS:-}"
OUT="${OUT:-runs/control-demo-${MINUTES}min}"
if [ "$MINUTES" = 30 ]; then RESULTS_DIR="${RESULTS_DIR:-bench/results}"; else RESULTS_DIR="${RESULTS_DIR:-$OUT}"; fi
DEFAULT_DATA="${DEFAULT_DATA:-data/default}"
JA_DATA="${JA_DATA:-data/ja-wiki-aozora}"
SHARED="${SHARED:-../shared/data}"
JA_VALID_FRACTION="${JA_VALID_FRACTION:-0.05}"
MAX_SEQUENCES="${MAX_SEQUENCES:-256}"
ACCURACY="${ACCURACY:-25}"
SAMPLES="${SAMPLES:-2}"
BUILD="${BUILD:-build}"
ja_wiki="$SHARED/jawiki-excerpt.xml.bz2"
aozora="$SHARED/aozora-notation-examples.sjis.txt"

say() { echo "control-demo: $*" >&2; }
die() { echo "control-demo: error: $*" >&2; exit 1; }

[[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]] && [ "$MINUTES" != 0 ] || die "MINUTES=$MINUTES: expected a positive number of minutes"
[ -z "$STEPS" ] || [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS=$STEPS: expected a positive whole number"
declare -A cand_config=([tiny]=tiny [narrow]=tiny [small]=small)
declare -A cand_sets=(
  [tiny]=""
  [narrow]="--set model.n_layer=2 --set model.d_model=128 --set model.n_head=2 --set model.d_ff=512"
  [small]="--set model.vocab_size=8000"
)
# Probe steps: about 20 s each on an idle 2-core EPYC (small: 11 s a step).
declare -A cand_probe_steps=([tiny]=20 [narrow]=40 [small]=3)
[ -n "${cand_config[$MODEL]+x}" ] || die "MODEL=$MODEL: expected one of ${!cand_config[*]}"
for c in $PROBE; do [ -n "${cand_config[$c]+x}" ] || die "PROBE: unknown candidate '$c' (expected some of ${!cand_config[*]})"; done
[[ " $PROBE " == *" $MODEL "* ]] || PROBE="$MODEL $PROBE"
for f in "$ja_wiki" "$aozora"; do
  [ -f "$f" ] || die "$f not found: set SHARED to the folder that holds jawiki-excerpt.xml.bz2 and aozora-notation-examples.sjis.txt"
done
command -v python3 >/dev/null || die "python3 not found (it reads the JSON outputs and writes the report)"
if [ ! -x "$BUILD/ctrl" ]; then
  say "building $BUILD/ctrl"
  make -C "$BUILD" ctrl -j"$(nproc)" >/dev/null || die "could not build $BUILD/ctrl (configure it first: see README.md)"
fi
mkdir -p "$OUT" "$RESULTS_DIR"
start=$(date +%s)
date_started=$(date '+%Y-%m-%d %H:%M %Z')
load_started=$(cut -d' ' -f1-3 /proc/loadavg)

# CPU seconds used by the finished children of this shell so far (the second line of bash's `times`),
# for the probe and the trainings: `mark_cpu NAME` in this shell (not in $(...), whose subshell starts
# from zero), then `cpu_of NAME`.
mark_cpu() { times > "$OUT/.times-$1"; }
cpu_of() {
  python3 - "$OUT/.times-$1" <<'EOF'
import re, sys
line = open(sys.argv[1]).read().splitlines()[1]
print(sum(float(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", line)))
EOF
}

# --- 1. Corpora -------------------------------------------------------------
if [ -f "$DEFAULT_DATA/manifest.json" ]; then
  say "default corpus: reusing $DEFAULT_DATA"
else
  say "default corpus: preparing $DEFAULT_DATA (ctrl prepare, Debian's Japanese documentation; a few minutes)"
  "$BUILD/ctrl" prepare --out "$DEFAULT_DATA"
fi
ja_matches() {  # the JA corpus in $JA_DATA was prepared from these files with these options
  python3 - "$JA_DATA/manifest.json" "$JA_VALID_FRACTION" "$ja_wiki" "$aozora" <<'EOF'
import json, os, sys
m = json.load(open(sys.argv[1]))
paths = [os.path.realpath(s["path"]) for s in m["sources"]]
ok = (abs(m["split"]["valid_fraction"] - float(sys.argv[2])) < 1e-12 and m["vocab_size"] == 8000
      and [c["name"] for c in m["codes"]] == ["Wikipedia", "Aozora"]
      and paths == [os.path.realpath(p) for p in sys.argv[3:]])
sys.exit(0 if ok else 1)
EOF
}
if [ -f "$JA_DATA/manifest.json" ] && ja_matches; then
  say "Japanese Wikipedia + Aozora corpus: reusing $JA_DATA"
else
  say "Japanese Wikipedia + Aozora corpus: preparing $JA_DATA"
  "$BUILD/ctrl" prepare --source Wikipedia="$ja_wiki" --source Aozora="$aozora" --vocab-size 8000 \
    --valid-fraction "$JA_VALID_FRACTION" --out "$JA_DATA"
fi
# Say plainly which codes have no held-out (or no training) text.
for data in "$DEFAULT_DATA" "$JA_DATA"; do
  python3 - "$data" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
for c in m["codes"]:
    d = c["documents"]
    if d["valid"] == 0:
        print(f"control-demo: note: {sys.argv[1]}: code {c['name']} has {d['train']} document(s), all in training: no "
              "held-out split, so no held-out perplexity, matrix row or classifier ceiling for it (its column, "
              "control accuracy and samples are still measured)", file=sys.stderr)
    if d["train"] == 0:
        print(f"control-demo: note: {sys.argv[1]}: code {c['name']} has no training document: the model never "
              "sees its text", file=sys.stderr)
EOF
done

# --- 2. Throughput probe and the plan ----------------------------------------
plan="$OUT/plan.json"
if [ -f "$plan" ]; then
  say "plan: reusing $plan ($(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p["model"], p["steps"], "steps")' "$plan"))"
else
  probes=()
  for c in $PROBE; do
    dir="$OUT/probe-$c"
    rm -rf "$dir"
    read -r -a sets <<< "${cand_sets[$c]}"
    say "probe: $c (${cand_config[$c]} ${cand_sets[$c]:-as is}), ${cand_probe_steps[$c]} steps on $DEFAULT_DATA"
    mark_cpu 0
    t0=$(date +%s.%N)
    "$BUILD/ctrl" train --config "${cand_config[$c]}" "${sets[@]}" --data "$DEFAULT_DATA" --out "$dir" \
      --set train.steps="${cand_probe_steps[$c]}" --set train.eval_every=0 --set train.checkpoint_every=0 \
      --set train.log_every=1 2> "$dir.log" || { cat "$dir.log" >&2; die "the probe of $c failed"; }
    t1=$(date +%s.%N)
    mark_cpu 1
    probes+=("$c" "$dir" "$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$t1")"
             "$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$(cpu_of 0)" "$(cpu_of 1)")")
  done
  python3 - "$plan" "$MODEL" "$MINUTES" "$STEPS" "$DEFAULT_DATA" "$JA_DATA" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "${probes[@]}" <<'EOF'
import json, os, re, statistics, sys
out, model, minutes, steps_override, default_data, ja_data, load = sys.argv[1:8]
rest = sys.argv[8:]
def train_tokens(data):
    m = json.load(open(data + "/manifest.json"))
    n = 0
    for c in m["codes"]:
        for s in c["shards"]["train"]:
            with open(f"{data}/{s}", "rb") as f:
                n += int.from_bytes(f.read(64)[24:32], "little")
    return n
corpus_tokens = {"default": train_tokens(default_data), "ja": train_tokens(ja_data)}
probes = {}
for i in range(0, len(rest), 4):
    name, d, wall, cpu = rest[i], rest[i + 1], float(rest[i + 2]), float(rest[i + 3])
    log = open(d + ".log").read()
    h = re.search(r"training \S+: ([\d.]+)M parameters, ([\d.]+) MFLOP/token.*?(\d+) steps of (\d+) sequences x (\d+) tokens, (\d+) threads", log)
    if not h:
        sys.exit(f"control-demo: error: no training header in {d}.log")
    params, mflop, steps, seqs, T, threads = float(h[1]), float(h[2]), int(h[3]), int(h[4]), int(h[5]), int(h[6])
    lines = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    rates = [l["tokens_per_s"] for l in lines if "tokens_per_s" in l and l["step"] > 1]
    per_step = seqs * T
    machine = steps * per_step / (cpu / threads)
    budget_tokens = float(minutes) * 60 * machine
    probes[name] = {
        "parameters_M": params, "mflop_per_token": mflop, "tokens_per_step": per_step, "n_ctx": T,
        "threads": threads, "probe_steps": steps, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "cpu_share": round(cpu / (threads * wall), 3),
        "tokens_per_s_wall": round(statistics.median(rates or [steps * per_step / wall]), 1),
        "tokens_per_s_machine": round(machine, 1),
        "budget_steps": max(1, int(budget_tokens // per_step)),
        "budget_tokens": int(budget_tokens),
        "budget_passes": {k: round(budget_tokens / v, 2) for k, v in corpus_tokens.items()},
        "budget_tokens_per_parameter": round(budget_tokens / (params * 1e6), 2),
    }
    print(f"control-demo: probe {name}: {params}M parameters, {probes[name]['tokens_per_s_wall']:.0f} tokens/s wall "
          f"at {100 * probes[name]['cpu_share']:.0f}% of {threads} threads' CPU, {machine:.0f} tokens/s of the whole "
          f"machine: {probes[name]['budget_steps']} steps in {minutes} minutes "
          f"({', '.join(f'{v:.2f} passes over {k}' for k, v in probes[name]['budget_passes'].items())})",
          file=sys.stderr)
steps = int(steps_override) if steps_override else probes[model]["budget_steps"]
plan = {"model": model, "minutes": float(minutes), "steps": steps, "steps_given": bool(steps_override),
        "corpus_train_tokens": corpus_tokens, "load_average": load, "probes": probes}
json.dump(plan, open(out + ".tmp", "w"), indent=1)
os.replace(out + ".tmp", out)
EOF
  for c in $PROBE; do rm -rf "$OUT/probe-$c" "$OUT/probe-$c.log"; done
fi
steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$plan")
planned_model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$plan")
[ "$planned_model" = "$MODEL" ] || die "$plan was made for MODEL=$planned_model; remove it (or $OUT) to plan MODEL=$MODEL"
read -r -a model_sets <<< "${cand_sets[$MODEL]}"
eval_every=$(( steps / 10 > 0 ? steps / 10 : 1 ))
checkpoint_every=$(( steps / 4 > 0 ? steps / 4 : 1 ))
warmup=$(( steps / 10 < 50 ? (steps / 10 > 0 ? steps / 10 : 1) : 50 ))  # tiny's 50, or a tenth of a short run
say "plan: $MODEL, $steps steps per corpus (warmup $warmup, held-out evaluation every $eval_every steps)"

# --- 3. Train, measure, sample -------------------------------------------------
for corpus in default ja; do
  if [ "$corpus" = default ]; then data="$DEFAULT_DATA"; else data="$JA_DATA"; fi
  run="$OUT/$corpus"
  ckpt="$run/checkpoints/step-$(printf '%08d' "$steps").ckpt"
  if [ -f "$ckpt" ] && [ -f "$run/timing.json" ]; then
    say "=== $corpus ($data): $run already trained for $steps steps"
  else
    resume=()
    [ -n "$(ls -A "$run/checkpoints" 2>/dev/null)" ] && resume=(--resume)
    say "=== $corpus ($data): training $MODEL for $steps steps into $run${resume:+ (resuming)}"
    load0=$(cut -d' ' -f1 /proc/loadavg)
    mark_cpu 0
    t0=$(date +%s.%N)
    "$BUILD/ctrl" train --config "${cand_config[$MODEL]}" "${model_sets[@]}" --data "$data" --out "$run" "${resume[@]}" \
      --set train.steps="$steps" --set train.warmup_steps="$warmup" --set train.eval_every="$eval_every" \
      --set train.eval_batches=4 --set train.log_every=10 --set train.checkpoint_every="$checkpoint_every"
    t1=$(date +%s.%N)
    mark_cpu 1
    python3 - "$run/timing.json" "$t0" "$t1" "$(cpu_of 0)" "$(cpu_of 1)" "$load0" "$(cut -d' ' -f1 /proc/loadavg)" \
      "${#resume[@]}" <<'EOF'
import json, os, sys
out, t0, t1, c0, c1, l0, l1, resumed = sys.argv[1:]
j = {"wall_s": float(t1) - float(t0), "cpu_s": float(c1) - float(c0), "load_before": float(l0),
     "load_after": float(l1), "resumed": resumed != "0"}
json.dump(j, open(out + ".tmp", "w"))
os.replace(out + ".tmp", out)
EOF
    [ -f "$ckpt" ] || die "$run: training ended without $ckpt"
  fi

  say "=== $corpus: ctrl eval --codes --control-accuracy $ACCURACY"
  t0=$(date +%s)
  "$BUILD/ctrl" eval --model "$ckpt" --data "$data" --codes --max-sequences "$MAX_SEQUENCES" \
    --control-accuracy "$ACCURACY" --out "$run" | tee "$run/eval.txt.tmp"
  mv "$run/eval.txt.tmp" "$run/eval.txt"
  echo "$(( $(date +%s) - t0 ))" > "$run/eval-seconds.txt"

  say "=== $corpus: $SAMPLES samples under each code"
  rm -rf "$run/samples.tmp"
  mkdir -p "$run/samples.tmp"
  mapfile -t codes < <(python3 -c 'import json,sys; [print(c["name"]) for c in json.load(open(sys.argv[1]))["codes"]]' "$data/manifest.json")
  for i in "${!codes[@]}"; do
    for seed in $(seq 1 "$SAMPLES"); do
      echo "--- ${codes[$i]}, seed $seed" >&2
      "$BUILD/ctrl" generate --model "$ckpt" --control "${codes[$i]}" --max-tokens 80 --temperature 0.8 --top-k 40 \
        --seed "$seed" > "$run/samples.tmp/$i.$seed.txt"
      cat "$run/samples.tmp/$i.$seed.txt" >&2
    done
  done
  rm -rf "$run/samples"
  mv "$run/samples.tmp" "$run/samples"
done

# --- 4. Report --------------------------------------------------------------------
secs=$(( $(date +%s) - start ))
cpu_model=$(cpu_model)
isa=$(cpu_isa)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain -- src CMakeLists.txt bench/control_demo.sh 2>/dev/null)" ] || commit="$commit (with uncommitted changes to src/ or this script)"
report="$RESULTS_DIR/control-demo.md"
python3 - "$report.tmp" "$OUT" "$DEFAULT_DATA" "$JA_DATA" "$RESULTS_DIR" \
  date="$date_started" cpu="$cpu_model" isa="$isa" cores="$(nproc)" commit="$commit" command="$command_line" \
  seconds="$secs" load_started="$load_started" load_ended="$(cut -d' ' -f1-3 /proc/loadavg)" \
  max_sequences="$MAX_SEQUENCES" accuracy_n="$ACCURACY" samples="$SAMPLES" eval_every="$eval_every" \
  warmup="$warmup" ja_valid_fraction="$JA_VALID_FRACTION" preset="${cand_config[$MODEL]}" <<'EOF'
import json, math, os, sys
out_md, OUT, default_data, ja_data, results_dir = sys.argv[1:6]
meta = dict(a.split("=", 1) for a in sys.argv[6:])
pilot = os.path.relpath("bench/results/control-demo-pilot.md", results_dir)
plan = json.load(open(f"{OUT}/plan.json"))
model, steps = plan["model"], plan["steps"]
probe = plan["probes"][model]
L = []
w = L.append

def shard_tokens(data, shards):
    n = 0
    for s in shards:
        with open(f"{data}/{s}", "rb") as f:
            n += int.from_bytes(f.read(64)[24:32], "little")
    return n

def pct(x):
    return f"{100 * x:.1f}%"

def fmt_time(s):
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"

corpora = [
    ("default", default_data, "The default corpus (Debian's Japanese documentation)"),
    ("ja", ja_data, "Japanese Wikipedia + Aozora Bunko"),
]
w(f"# Control you can measure: the best model in {plan['minutes']:g} minutes, on two corpora\n")
w(f"{meta['date']}, {meta['cores']} cores of an {meta['cpu']} (`lscpu` model name with the vendor's family and model; ISA flags: "
  f"{meta['isa'] or 'none'}), {probe['threads']} training threads; commit {meta['commit']}. "
  f"Load average {meta['load_started']} at the start, {meta['load_ended']} at the end; the whole script "
  f"took {fmt_time(float(meta['seconds']))} of wall time. Written by `bench/control_demo.sh`:\n")
w("```sh\n" + meta["command"] + "\n```\n")
summary_at = len(L)
summary = []

# --- the model and its budget
w("## The model and its budget\n")
w(f"A throughput probe (`ctrl train` for a few steps on the default corpus, evaluation and checkpoints "
  f"off) measures each candidate's tokens per second of the whole machine: tokens / (CPU seconds / threads), "
  f"so a machine busy with other work during the probe does not shrink the budget (the wall-clock rate and "
  f"the share of {probe['threads']} threads' CPU the probe got are beside it). The budget is "
  f"{plan['minutes']:g} minutes of that rate per corpus.\n")
w("| candidate | parameters | MFLOP/token | tokens/step | probe tokens/s (wall) | CPU share | tokens/s (machine) "
  "| steps in budget | tokens | passes over default | passes over ja | tokens/parameter |")
w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
names = {"tiny": "`tiny` (L 4, D 256, H 4, F 1024, T 128)", "narrow": "`narrow` (tiny with L 2, D 128, H 2, F 512)",
         "small": "`small` (L 6, D 384, H 6, F 1536, T 256; V 8000)"}
for name, p in plan["probes"].items():
    mark = " **(trained)**" if name == model else ""
    w(f"| {names.get(name, name)}{mark} | {p['parameters_M']:.2f}M | {p['mflop_per_token']:.1f} | {p['tokens_per_step']} | "
      f"{p['tokens_per_s_wall']:.0f} | {pct(p['cpu_share'])} | {p['tokens_per_s_machine']:.0f} | {p['budget_steps']} | "
      f"{p['budget_tokens'] / 1e6:.2f}M | {p['budget_passes']['default']:.2f} | {p['budget_passes']['ja']:.2f} | "
      f"{p['budget_tokens_per_parameter']:.2f} |")
w("")
given = " (given as STEPS, not derived from the budget)" if plan["steps_given"] else ""
# The optimizer, schedule and dropout as the run recorded them (its config.json), not as assumed.
cfg = json.load(open(f"{OUT}/default/config.json"))
lr = float(cfg["train.lr"])
embd, resid = float(cfg["model.embd_pdrop"]), float(cfg["model.resid_pdrop"])
dropout = f"dropout {resid:g}" if embd == resid else f"embedding dropout {embd:g}, residual dropout {resid:g}"
w(f"Trained: **{model}**, **{steps} steps**{given} of {probe['tokens_per_step']} tokens "
  f"({steps * probe['tokens_per_step'] / 1e6:.2f}M tokens) on each corpus, the `{meta['preset']}` preset's "
  f"`{cfg['train.optimizer']}` optimizer and {cfg['train.schedule']} schedule (lr {lr:g} to "
  f"{lr * float(cfg['train.min_lr_ratio']):g}, warmup {cfg['train.warmup_steps']}, {dropout}), held-out evaluation "
  f"every {meta['eval_every']} steps on 4 micro-batches of windows per code. ")
pilot_text = (f"the pilot ([control-demo-pilot.md]({pilot})) trained `tiny` and `narrow` for equal compute (10 minutes "
              f"of a 2-core machine) on the default corpus, and `narrow`, with 3 times the steps, had the lower "
              f"held-out loss on every code")
if model == "narrow":
    L[-1] += f"Why `{model}`: {pilot_text}"
else:
    L[-1] += f"Why `{model}`: chosen with MODEL={model}; the default, `narrow`, is the pilot's choice: {pilot_text}"
if "small" in plan["probes"] and model != "small":
    sp = plan["probes"]["small"]["budget_passes"]
    L[-1] += (f"; `small` would see {sp['default']:.2f} passes over the default corpus and {sp['ja']:.2f} over the "
              f"Japanese one in the budget")
L[-1] += ".\n"

# --- corpora
w("## The corpora\n")
w("| corpus | code | training documents | training tokens | held-out documents | held-out tokens |")
w("|---|---|---:|---:|---:|---:|")
notes = []
for key, data, title in corpora:
    m = json.load(open(f"{data}/manifest.json"))
    passes = steps * probe["tokens_per_step"] / sum(shard_tokens(data, c["shards"]["train"]) for c in m["codes"])
    for c in m["codes"]:
        tr, va = shard_tokens(data, c["shards"]["train"]), shard_tokens(data, c["shards"].get("valid", []))
        w(f"| {key} (`{data}`) | {c['name']} | {c['documents']['train']} | {tr:,} | {c['documents']['valid']} | {va:,} |")
        if c["documents"]["valid"] == 0:
            notes.append(f"**{c['name']} ({key}) has no held-out split**: its source is {c['documents']['train']} "
                         f"document ({tr:,} tokens), and `ctrl prepare` splits by document, so all of it is training "
                         f"text. It has no held-out perplexity, no row in the matrix and no row in the classifier's "
                         f"ceiling; it is still a column of the matrix (how the other code's text reads under it), "
                         f"and its samples are still labelled by the classifier (trained on that same text, which "
                         f"the model has also seen about {passes:.1f} times: a sample labelled {c['name']} may be recall, "
                         f"not generalisation).")
w("")
w(f"The default corpus is `ctrl prepare --out {default_data}` (scripts/main.sh's, held-out share 1%). The "
  f"Japanese one is `ctrl prepare --source Wikipedia=jawiki-excerpt.xml.bz2 --source "
  f"Aozora=aozora-notation-examples.sjis.txt --vocab-size 8000 --valid-fraction {meta['ja_valid_fraction']}` "
  f"from the shared sample files (../shared/data/README.md): 1% would hold out a single Wikipedia article.\n")

# --- per corpus
for key, data, title in corpora:
    run = f"{OUT}/{key}"
    m = json.load(open(f"{data}/manifest.json"))
    codes = [c["name"] for c in m["codes"]]
    train_tok = sum(shard_tokens(data, c["shards"]["train"]) for c in m["codes"])
    cc = json.load(open(f"{run}/control-codes.json"))
    ca = json.load(open(f"{run}/control-accuracy.json"))
    timing = json.load(open(f"{run}/timing.json"))
    lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    tl = [l for l in lines if "tokens_per_s" in l]
    ev = [l for l in lines if "eval" in l]
    w(f"## {title}\n")
    seen = steps * probe["tokens_per_step"]
    rate = sum(l["tokens_per_s"] for l in tl) / len(tl) if tl else float("nan")
    share = timing["cpu_s"] / (probe["threads"] * timing["wall_s"]) if timing["wall_s"] > 0 else float("nan")
    resumed = " (resumed: the times cover the last part only)" if timing["resumed"] else ""
    w(f"**Training**: {steps} steps, {seen / 1e6:.2f}M tokens = {seen / train_tok:.2f} passes over its "
      f"{train_tok / 1e6:.2f}M training tokens; {fmt_time(timing['wall_s'])} of wall time with evaluations{resumed} "
      f"({rate:.0f} tokens/s, the mean of the logged steps' rates); the process got "
      f"{pct(share)} of {probe['threads']} threads' CPU (load average {timing['load_before']:.1f} before, "
      f"{timing['load_after']:.1f} after). Last training loss {tl[-1]['loss']:.3f} (step {tl[-1]['step']}).\n")
    # held-out per code
    w(f"**Held-out loss and perplexity per code** (`ctrl eval --codes --max-sequences {meta['max_sequences']}`: "
      f"up to {meta['max_sequences']} windows of {probe['n_ctx']} tokens per code, spread evenly over its held-out "
      f"text), the "
      f"control gain (mean loss under the other codes minus the own, nats/token) and, for comparison, the last "
      f"in-training evaluation (step {ev[-1]['step'] if ev else '-'}, 4 micro-batches of windows):\n")
    w("| code | windows | tokens | loss | perplexity | control gain | in-training perplexity |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for c in codes:
        last = ev[-1]["eval"].get(c) if ev else None
        lt = f"{last['perplexity']:.2f}" if last else "—"
        if c in cc["rows"]:
            w(f"| {c} | {cc['windows'][c]} | {cc['tokens'][c]:,} | {cc['loss'][c][c]:.4f} | "
              f"{cc['perplexity'][c][c]:.2f} | {cc['control_gain'][c]:+.4f} | {lt} |")
        else:
            w(f"| {c} | 0 | 0 | — | — | — | {lt} |")
    rows = cc["rows"]
    if rows:
        tok = sum(cc["tokens"][r] for r in rows)
        mean = sum(cc["loss"][r][r] * cc["tokens"][r] for r in rows) / tok
        w(f"| all (token-weighted) | {sum(cc['windows'][r] for r in rows)} | {tok:,} | {mean:.4f} | "
          f"{math.exp(mean):.2f} | | |")
    missing = [c for c in codes if c not in rows]
    if missing:
        w(f"\n{', '.join(missing)}: no held-out window of {probe['n_ctx']} tokens, so no row (see the corpora above).")
    w("")
    w("**Perplexity by the code given** (rows: the held-out text's code; columns: the code at position 0; "
      "bold: its own code):\n")
    w("| text \\ code given | " + " | ".join(codes) + " |")
    w("|---|" + "---:|" * len(codes))
    for r in rows:
        w(f"| {r} | " + " | ".join((f"**{cc['perplexity'][r][c]:.2f}**" if c == r else f"{cc['perplexity'][r][c]:.2f}")
                                 for c in codes) + " |")
    w("")
    w(f"![code-by-code matrix, {key}](control-demo-{key}.svg)\n")
    w(f"![training and held-out loss, {key}](control-demo-{key}-loss.svg)\n")
    # control accuracy
    n = ca["samples_per_code"]
    s = ca["sampling"]
    hc = ca["classifier"]["held_out_confusion"]
    ceiling_codes = [c for c in codes if sum(hc.get(c, {}).values())]
    chance = 1 / len(codes)
    w(f"**Control accuracy** (`--control-accuracy {n}`: {n} samples per code of up to {s['max_tokens']} tokens, "
      f"temperature {s['temperature']}, top-k {s['top_k']}, penalty {s['penalty']}, seed {s['seed']}; labelled by "
      f"the character 1–3-gram naive Bayes classifier trained on "
      f"{', '.join(f'{x:,}' for x in ca['classifier']['training_characters'])} characters of "
      f"{', '.join(codes)} training text): **{pct(ca['accuracy'])}** against a chance of {pct(chance)} and the "
      f"classifier's ceiling of **{pct(ca['classifier']['held_out_accuracy'])}**"
      f"{' (the ceiling covers only ' + ', '.join(ceiling_codes) + ', the codes with held-out text)' if len(ceiling_codes) < len(codes) else ''}.\n")
    w("| generated under | " + " | ".join(codes) + " | correct | ceiling (held-out snippets) |")
    w("|---|" + "---:|" * (len(codes) + 2))
    for g in codes:
        row = ca["confusion"][g]
        tot = sum(row.values()) + ca["empty_samples"].get(g, 0)  # an empty sample is a miss
        hrow = hc.get(g, {})
        htot = sum(hrow.values())
        ceil = f"{pct(hrow.get(g, 0) / htot)} of {htot}" if htot else "— (no held-out text)"
        w(f"| {g} | " + " | ".join(str(row.get(c, 0)) for c in codes) +
          f" | {pct(row.get(g, 0) / tot) if tot else '—'} | {ceil} |")
        summary.append(f"| {key} | {g} | " + (f"{cc['perplexity'][g][g]:.2f} | {cc['control_gain'][g]:+.4f}" if g in rows
                       else "— | —") + f" | {pct(row.get(g, 0) / tot) if tot else '—'} | {ceil} |")
    summary.append(f"| {key} | **all** | " + (f"{math.exp(mean):.2f} | {sum(cc['control_gain'][r] for r in rows) / len(rows):+.4f}"
                   if rows else "— | —") + f" | **{pct(ca['accuracy'])}** (chance {pct(chance)}) | "
                   f"**{pct(ca['classifier']['held_out_accuracy'])}**"
                   f"{' (' + ', '.join(ceiling_codes) + ' only)' if len(ceiling_codes) < len(codes) else ''} |")
    empty = sum(ca["empty_samples"].values())
    if empty:
        w(f"\n{empty} samples were empty (not in the matrix, counted as misses).")
    w("")
    w(f"**Samples** (`ctrl generate --control CODE --max-tokens 80 --temperature 0.8 --top-k 40 --seed 1..{meta['samples']}`):\n")
    for i, c in enumerate(codes):
        for seed in range(1, int(meta["samples"]) + 1):
            text = open(f"{run}/samples/{i}.{seed}.txt").read().strip()
            fence = "````" if "```" in text else "```"
            w(f"{c}, seed {seed}:\n\n{fence}text\n{text}\n{fence}\n")
    try:
        w(f"(`ctrl eval` took {int(open(f'{run}/eval-seconds.txt').read())} s.)\n")
    except OSError:
        pass
L[summary_at:summary_at] = [
    "## Summary\n",
    f"Per code: held-out perplexity under its own code, control gain (nats/token: mean loss of its held-out text "
    f"under the other codes minus under its own), the share of its {meta['accuracy_n']} samples the classifier "
    f"labels with it, and the classifier's own accuracy on held-out snippets of that code (the ceiling). "
    f"**all**: token-weighted perplexity, mean gain, control accuracy and ceiling.\n",
    "| corpus | code | held-out perplexity | control gain | samples labelled with their code | ceiling |",
    "|---|---|---:|---:|---:|---:|",
    *summary, ""]
if notes:
    w("## Codes without held-out text\n")
    for n in notes:
        w("- " + n)
    w("")
open(out_md, "w").write("\n".join(L))
EOF
mv "$report.tmp" "$report"
for corpus in default ja; do
  cp "$OUT/$corpus/control-codes.svg" "$RESULTS_DIR/control-demo-$corpus.svg.tmp"
  mv "$RESULTS_DIR/control-demo-$corpus.svg.tmp" "$RESULTS_DIR/control-demo-$corpus.svg"
  cp "$OUT/$corpus/loss.svg" "$RESULTS_DIR/control-demo-$corpus-loss.svg.tmp"
  mv "$RESULTS_DIR/control-demo-$corpus-loss.svg.tmp" "$RESULTS_DIR/control-demo-$corpus-loss.svg"
done
say "done in $((secs / 60))m$((secs % 60))s on $cpu_model, $(nproc) cores"
say "report: $report; heatmaps: $RESULTS_DIR/control-demo-{default,ja}.svg; loss curves: $RESULTS_DIR/control-demo-{default,ja}-loss.svg"
