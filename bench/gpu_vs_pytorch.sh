#!/bin/bash
# GPU training throughput, ctrl against PyTorch on the same GPU, model, batch
# and precision, in one run (issue 13's benchmark). For each preset and
# precision a round runs:
#   ctrl      ctrl bench --device $DEVICE (dropout 0)
#   eager     PyTorch eager, Hugging Face CTRLLMHeadModel, autocast (bf16, or
#             fp16 with a GradScaler), fused AdamW
#   compile   torch.compile of the same model (its compilation is not timed)
# Rounds rotate the order; each figure is the median of ROUNDS.
#
# The table gives tokens/s, MFU (model FLOPs per token from `ctrl plan`,
# against the GPU's dense datasheet peak for the precision, also from
# `ctrl plan`), peak device memory (ctrl: its backend's allocations;
# PyTorch: torch.cuda.max_memory_allocated), and ctrl / each peer. It checks
# issue 13's bars on `medium` in bf16 (>= 1.3x eager, >= 1.1x compile, MFU
# >= 50%) and answers the original CTRL's question where fp16 and fp32 both
# ran: what fp16 with loss scaling gains over fp32 on this GPU.
#
# Output (RESULTS, a new temporary folder unless set): every run's JSON,
# gpu-vs-pytorch.md and gpu-vs-pytorch.svg.
#
# Knobs (environment): PRESETS="medium base" PRECISIONS="bf16" (add fp16 fp32
# for the seed's question) PEERS="eager compile" BATCH=32 STEPS=20 WARMUP=5
# ROUNDS=1 DEVICE=cuda CTRL=build/ctrl COMMIT (default: git's) PY (default .venv/bin/python, else
# python3) GPU=<a name ctrl plan knows, e.g. H200> (default: nvidia-smi's name)
# RESULTS=<folder>. REPORT_ONLY=1 runs nothing and makes the report from the
# JSON already in RESULTS (after an interrupted run; no GPU or torch needed, the
# run's machine.txt and plan files are kept). Otherwise a run first removes the
# per-round JSON an earlier run left in RESULTS. DEVICE=cpu runs the same comparison on the CPU (no MFU),
# which is how the script itself is tested without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in PRESETS PRECISIONS PEERS BATCH STEPS WARMUP ROUNDS DEVICE GPU; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/gpu_vs_pytorch.sh"

PRESETS=${PRESETS:-medium base}
PRECISIONS=${PRECISIONS:-bf16}
PEERS=${PEERS:-eager compile}
BATCH=${BATCH:-32}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-1}
DEVICE=${DEVICE:-cuda}
CTRL=${CTRL:-build/ctrl}
REPORT_ONLY=${REPORT_ONLY:-0}
if [ -z "${PY:-}" ]; then
  PY=python3
  [ -x .venv/bin/python ] && PY=.venv/bin/python
fi
die() { echo "gpu_vs_pytorch: $*" >&2; exit 2; }
[ -x "$CTRL" ] || command -v "$CTRL" >/dev/null || die "no ctrl binary at $CTRL (build first, or set CTRL=)"
[ "$REPORT_ONLY" = 1 ] || "$PY" -c 'import torch, transformers' 2>/dev/null || die "$PY cannot import torch and transformers (bash tools/setup_python.sh, or set PY=)"
for p in $PRECISIONS; do [[ $p =~ ^(fp32|bf16|fp16)$ ]] || die "PRECISIONS: '$p' is not fp32, bf16 or fp16"; done
for p in $PEERS; do [[ $p =~ ^(eager|compile)$ ]] || die "PEERS: '$p' is not eager or compile"; done
for v in BATCH STEPS ROUNDS; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: expected a positive whole number"; done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP=$WARMUP: expected a whole number"

# The GPU, for the datasheet peak that ctrl plan has for it (REPORT_ONLY: the run's, from machine.txt).
gpu_name=cpu
if [[ $DEVICE == cuda* ]] && [ "$REPORT_ONLY" != 1 ]; then
  index=${DEVICE#cuda}; index=${index#:}
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${index:-0}" 2>/dev/null | head -1) ||
    die "nvidia-smi found no GPU ${index:-0}"
  [ -n "$gpu_name" ] || die "nvidia-smi found no GPU ${index:-0}"
  GPU=${GPU:-$gpu_name}  # ctrl plan knows the driver's names of the GPUs in its table
  if ! "$CTRL" plan --config tiny --tokens 1e6 --gpu "$GPU" --json >/dev/null 2>&1; then
    echo "gpu_vs_pytorch: ctrl plan does not know '$GPU' (set GPU= to a name from ctrl plan --help): no MFU" >&2
    GPU=""
  fi
fi

out=${RESULTS:-$(mktemp -d)}
mkdir -p "$out"
# A new run's figures only: an earlier run's per-round JSON in the same folder would mix into the medians.
[ "$REPORT_ONLY" = 1 ] || rm -f "$out"/*-{fp32,bf16,fp16}-{ctrl,eager,compile}-r[0-9]*.json
[ "$REPORT_ONLY" = 1 ] && [ -f "$out/machine.txt" ] || {
  echo "gpu=$gpu_name"
  echo "plan_gpu=${GPU:-}"
  echo "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
  echo "cpu=$(cpu_model)"
  echo "commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "date=$(date -u +%Y-%m-%d)"
  echo "command=$command_line"
  echo "torch=$("$PY" -c 'import torch; print(torch.__version__)')"
  echo "ctrl=$("$CTRL" --version 2>&1 | head -1)"
  echo "presets=$PRESETS"
  echo "precisions=$PRECISIONS"
  echo "peers=$PEERS"
} >"$out/machine.txt"
if [ "$REPORT_ONLY" = 1 ]; then  # what the interrupted run was asked for, on its GPU
  PRESETS=$(sed -n 's/^presets=//p' "$out/machine.txt")
  PRECISIONS=$(sed -n 's/^precisions=//p' "$out/machine.txt")
  PEERS=$(sed -n 's/^peers=//p' "$out/machine.txt")
  gpu_name=$(sed -n 's/^gpu=//p' "$out/machine.txt")
  GPU=$(sed -n 's/^plan_gpu=//p' "$out/machine.txt")
fi
echo "gpu_vs_pytorch: results in $out ($gpu_name)" >&2

# Model FLOPs per token and the datasheet peak (TFLOP/s) for a preset and precision
# (REPORT_ONLY keeps the run's own).
for preset in $PRESETS; do
  for prec in $PRECISIONS; do
    [ "$REPORT_ONLY" = 1 ] && [ -f "$out/$preset-$prec-plan.json" ] && continue
    if [ -n "${GPU:-}" ]; then
      "$CTRL" plan --config "$preset" --tokens 1e9 --gpu "$GPU" --set train.precision="$prec" --json \
        >"$out/$preset-$prec-plan.json" || die "ctrl plan failed for $preset $prec on $GPU"
    else
      echo '{}' >"$out/$preset-$prec-plan.json"  # no datasheet: no MFU
    fi
  done
done

# Runs one configuration; its JSON goes to $out/<preset>-<precision>-<who>-r<round>.json.
run_one() {
  local preset=$1 prec=$2 who=$3 round=$4
  local json="$out/$preset-$prec-$who-r$round.json"
  echo "== round $round: $preset $prec $who" >&2
  if [ "$who" = ctrl ]; then
    "$CTRL" bench --device "$DEVICE" --config "$preset" --steps "$STEPS" --warmup "$WARMUP" \
      --set train.micro_batch="$BATCH" --set train.global_batch="$BATCH" --set model.embd_pdrop=0 \
      --set model.resid_pdrop=0 --set train.precision="$prec" --json >"$json"
    return
  fi
  local -a args=()
  [ "$who" = compile ] && args+=(--compile)
  "$PY" bench/pytorch_train.py --device "$DEVICE" --preset "$preset" --batch "$BATCH" --steps "$STEPS" \
    --warmup-steps "$WARMUP" --precision "$prec" "${args[@]}" --json >"$json"
}

[ "$REPORT_ONLY" = 1 ] && ROUNDS=0
# shellcheck source=rounds.sh
source bench/rounds.sh
# shellcheck disable=SC2086 # PEERS is a list
rotated_rounds gpu_vs_pytorch "$ROUNDS" "$PRESETS" "$PRECISIONS" ctrl $PEERS

"$PY" - "$out" "$PRESETS" "$PRECISIONS" "ctrl $PEERS" <<'EOF'
import os, statistics, sys
sys.path.insert(0, "bench")
from throughput_report import bars_svg, first_json, read_results
out, presets, precisions, whos = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
machine, runs = read_results(out)
plans = {(p, q): first_json(os.path.join(out, f"{p}-{q}-plan.json")) or {} for p in presets for q in precisions}
tps = {k: statistics.median(r["tokens_per_s"] for r in v) for k, v in runs.items()}
memory = {k: max(r.get("peak_device_bytes", 0) for r in v) for k, v in runs.items()}


def mfu(preset, prec, who):
    plan = plans[(preset, prec)]
    if (preset, prec, who) not in tps or not machine["plan_gpu"] or "peak_tflops_per_device" not in plan:
        return None
    return tps[(preset, prec, who)] * plan["flops_per_token"] / (plan["peak_tflops_per_device"] * 1e12)


pct = lambda x: "–" if x is None else f"{x:.0%}"
lines = [
    f"# GPU training throughput: ctrl against PyTorch {machine['torch']}",
    "",
    f"{machine['date']}, {machine['gpu']} (driver {machine['driver'] or '–'}; host {machine['cpu']}), "
    f"commit {machine['commit']}, {machine['ctrl']}.",
    f"Command: `{machine['command']}`. Tokens per second of training (forward, backward, clip, AdamW), "
    "median of the rounds. MFU: model FLOPs per token (`ctrl plan`) × tokens/s against the datasheet's dense peak "
    f"for the precision ({machine['plan_gpu'] or 'no datasheet: no MFU'}).",
    "",
    "| preset | precision | run | tokens/s | MFU | peak device memory | ctrl / run |",
    "|---|---|---|---:|---:|---:|---:|",
]
groups, verdicts = [], []
for preset in presets:
    for prec in precisions:
        ctrl = tps.get((preset, prec, "ctrl"))
        present = [w for w in whos if (preset, prec, w) in tps]
        for who in whos:
            key = (preset, prec, who)
            if key not in tps:
                lines.append(f"| {preset} | {prec} | {who} | failed | | | |")
                continue
            ratio = "" if who == "ctrl" or not ctrl else f"**{ctrl / tps[key]:.2f}×**"
            mem = f"{memory[key] / 2**30:.1f} GiB" if memory[key] else "–"
            lines.append(f"| {preset} | {prec} | {who} | {tps[key]:,.0f} | {pct(mfu(*key))} | {mem} | {ratio} |")
        if present:
            groups.append((f"{preset} {prec}", {w: tps[(preset, prec, w)] for w in present}))

# Issue 13's bars, on medium in bf16.
ctrl = tps.get(("medium", "bf16", "ctrl"))
if ctrl:
    for who, bar in (("eager", 1.3), ("compile", 1.1)):
        if ("medium", "bf16", who) in tps:
            r = ctrl / tps[("medium", "bf16", who)]
            verdicts.append(f"- ctrl / PyTorch {who} on medium bf16: {r:.2f}× (bar ≥ {bar}×: {'met' if r >= bar else 'NOT met'})")
    m = mfu("medium", "bf16", "ctrl")
    if m is not None:
        verdicts.append(f"- ctrl's MFU on medium bf16: {m:.0%} (bar ≥ 50%: {'met' if m >= 0.5 else 'NOT met'})")
# The original CTRL's question: fp16 with loss scaling against fp32 on the same GPU.
for preset in presets:
    for who in whos:
        a, b = tps.get((preset, "fp16", who)), tps.get((preset, "fp32", who))
        if a and b:
            verdicts.append(f"- {preset}, {who}: fp16 with loss scaling {a:,.0f} tokens/s against fp32 {b:,.0f}: {a / b:.2f}×")
if verdicts:
    lines += ["", "Bars and questions:", ""] + verdicts
lines += ["", "Chart: gpu-vs-pytorch.svg (each group's bars against its fastest run)."]
report = "\n".join(lines) + "\n"
open(os.path.join(out, "gpu-vs-pytorch.md"), "w").write(report)
print(report)
title = f"training tokens/s on {machine['gpu']}, ctrl and PyTorch {machine['torch']}"
open(os.path.join(out, "gpu-vs-pytorch.svg"), "w").write(bars_svg(title, groups))
print(f"chart: {os.path.join(out, 'gpu-vs-pytorch.svg')}", file=sys.stderr)
EOF
