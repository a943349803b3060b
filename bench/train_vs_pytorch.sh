#!/bin/bash
# Training throughput, ctrl against PyTorch as users install it (torch 2.x from
# PyPI with MKL, Hugging Face CTRLLMHeadModel), on the same presets, batch and
# precisions, in one run. For each preset and precision a round runs:
#   ctrl         ctrl bench (dropout 0, --threads THREADS)
#   eager        PyTorch eager (bf16: autocast around the forward), glibc malloc
#   eager+tc     the same with Debian's tcmalloc preloaded
#   compile      torch.compile of the same model (inductor), glibc malloc
#   compile+tc   torch.compile with tcmalloc
# PyTorch runs with torch.set_num_threads(THREADS) and OPENBLAS_* unset.
# Rounds rotate the order of the runs, so that drift hits all alike; each
# figure is the median of ROUNDS. PyTorch's best configuration is the
# reference: the table gives every run's tokens/s, the best PyTorch run,
# ctrl / best, and ctrl's and PyTorch's best share of this machine's GEMM peak
# as ctrl measures it (the same model FLOPs per token on both sides).
#
# Output (RESULTS, a new temporary folder unless set; per-round JSON an earlier
# run left there is removed first): every run's JSON,
# train-vs-pytorch.md (machine: CPU model, ISA flags, cores; commit, date,
# command; the table) and train-vs-pytorch.svg (each preset and precision as
# bars against PyTorch's best).
#
# Knobs (environment): PRESETS="tiny small base" PRECISIONS="fp32 bf16"
# PEERS="eager eager+tc compile compile+tc" BATCH=8 STEPS=8 WARMUP=2 ROUNDS=1
# THREADS=$(nproc) CTRL=build/ctrl PY=.venv/bin/python (bash tools/setup_python.sh)
# RESULTS=<folder>. torch.compile compiles in its first warm-up step (a minute
# or more on 2 cores), which is not timed. Exits 1 (after writing the table,
# with "failed" cells) when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
command_line=""
for v in PRESETS PRECISIONS PEERS BATCH STEPS WARMUP ROUNDS THREADS; do
  [ -n "${!v+x}" ] && command_line+="$v=\"${!v}\" "
done
command_line+="bash bench/train_vs_pytorch.sh"

PRESETS=${PRESETS:-tiny small base}
PRECISIONS=${PRECISIONS:-fp32 bf16}
PEERS=${PEERS:-eager eager+tc compile compile+tc}
BATCH=${BATCH:-8}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-1}
THREADS=${THREADS:-$(nproc)}
CTRL=${CTRL:-build/ctrl}
PY=${PY:-.venv/bin/python}
die() { echo "train_vs_pytorch: $*" >&2; exit 2; }
[ -x "$PY" ] || die "no $PY (run: bash tools/setup_python.sh)"
"$PY" -c 'import torch, transformers' 2>/dev/null || die "$PY cannot import torch and transformers (bash tools/setup_python.sh, or set PY=)"
[ -x "$CTRL" ] || die "no ctrl binary at $CTRL (build first, or set CTRL=)"
for p in $PRECISIONS; do [[ $p == fp32 || $p == bf16 ]] || die "PRECISIONS: '$p' is not fp32 or bf16"; done
for p in $PEERS; do [[ $p =~ ^(eager|compile)(\+tc)?$ ]] || die "PEERS: '$p' is not eager, eager+tc, compile or compile+tc"; done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$ROUNDS: expected a positive whole number"

TCMALLOC=$(ldconfig -p | awk '/libtcmalloc_minimal\.so\.4 / && !f {print $NF; f = 1}')
if [ -z "$TCMALLOC" ] && [[ "$PEERS" == *+tc* ]]; then
  die "libtcmalloc_minimal.so.4 not found (apt-get install libtcmalloc-minimal4), or leave the +tc runs out of PEERS"
fi

out=${RESULTS:-$(mktemp -d)}
mkdir -p "$out"
# This run's figures only: an earlier run's per-round JSON in the same folder would mix into the medians.
rm -f "$out"/*-{fp32,bf16}-{ctrl,eager,eager+tc,compile,compile+tc}-r[0-9]*.json
{
  echo "cpu=$(cpu_model)"
  echo "flags=$(cpu_isa)"
  echo "cpus=$(nproc)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')"
  echo "date=$(date -u +%Y-%m-%d)"
  echo "command=$command_line"
  echo "torch=$("$PY" -c 'import torch; print(torch.__version__)')"
} >"$out/machine.txt"
echo "train_vs_pytorch: results in $out (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
if [[ " $PRECISIONS " == *" bf16 "* ]] && ! grep -q -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  echo "train_vs_pytorch: warning: this CPU has no AVX512-BF16 or AMX; PyTorch's bf16 autocast ran at about 9 tokens/s" \
    "on small on such a CPU (half an hour and more per configuration); PRECISIONS=fp32 leaves it out" >&2
fi

# Runs one configuration; its JSON goes to $out/<preset>-<precision>-<who>-r<round>.json.
run_one() {
  local preset=$1 prec=$2 who=$3 round=$4
  local json="$out/$preset-$prec-$who-r$round.json"
  echo "== round $round: $preset $prec $who" >&2
  if [ "$who" = ctrl ]; then
    "$CTRL" bench --config "$preset" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
      --set train.micro_batch="$BATCH" --set model.embd_pdrop=0 --set model.resid_pdrop=0 \
      --set train.precision="$prec" --json >"$json"
    return
  fi
  local -a env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u LD_PRELOAD) args=()
  [[ $who == *+tc ]] && env+=("LD_PRELOAD=$TCMALLOC")
  [[ $who == compile* ]] && args+=(--compile)
  "${env[@]}" "$PY" bench/pytorch_train.py --preset "$preset" --batch "$BATCH" --steps "$STEPS" \
    --warmup-steps "$WARMUP" --threads "$THREADS" --precision "$prec" "${args[@]}" --json >"$json"
}

# shellcheck source=rounds.sh
source bench/rounds.sh
# shellcheck disable=SC2086 # PEERS is a list
rotated_rounds train_vs_pytorch "$ROUNDS" "$PRESETS" "$PRECISIONS" ctrl $PEERS

"$PY" - "$out" "$PRESETS" "$PRECISIONS" "ctrl $PEERS" <<'EOF'
import os, statistics, sys
sys.path.insert(0, "bench")
from throughput_report import bars_svg, read_results
out, presets, precisions, whos = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
machine, runs = read_results(out)
med = {k: statistics.median(r["tokens_per_s"] for r in v) for k, v in runs.items()}
lines = [
    f"# Training throughput: ctrl against PyTorch {machine['torch']}",
    "",
    f"{machine['date']}, {machine['cpu']} ({machine['cpus']} CPUs; {machine['flags'].strip() or 'no AVX2'}), "
    f"commit {machine['commit']}.",
    f"Command: `{machine['command']}`. Tokens per second of training (forward, backward, clip, AdamW), "
    "median of the rounds; PyTorch's best configuration is the reference.",
    "",
    "| preset | precision | " + " | ".join(whos) + " | PyTorch best | ctrl / best | ctrl share of GEMM peak | PyTorch best share |",
    "|---|---|" + "---:|" * (len(whos) + 4),
]
groups = []
for preset in presets:
    for prec in precisions:
        peers = {w: med[(preset, prec, w)] for w in whos[1:] if (preset, prec, w) in med}
        ctrl = med.get((preset, prec, "ctrl"))
        if ctrl is None and not peers:
            continue
        best = max(peers, key=peers.get) if peers else None
        share = statistics.median(r.get("share_of_gemm_peak", float("nan")) for r in runs.get((preset, prec, "ctrl"), [{}]))
        cells = [f"{med[(preset, prec, w)]:,.0f}" if (preset, prec, w) in med else "failed" for w in whos]
        ratio = f"**{ctrl / peers[best]:.2f}×**" if ctrl and best else "–"
        peer_share = share * peers[best] / ctrl if ctrl and best else float("nan")
        lines.append(f"| {preset} | {prec} | " + " | ".join(cells) +
                     f" | {best or '–'} | {ratio} | {share:.0%} | {peer_share:.0%} |".replace("nan%", "–"))
        groups.append((f"{preset} {prec}", {w: med[(preset, prec, w)] for w in whos if (preset, prec, w) in med}))
lines += ["", "Chart: train-vs-pytorch.svg (each group's bars against its fastest run)."]
report = "\n".join(lines) + "\n"
open(os.path.join(out, "train-vs-pytorch.md"), "w").write(report)
print(report)

title = f"training tokens/s, ctrl and PyTorch {machine['torch']} ({machine['cpu']}, {machine['cpus']} CPUs)"
open(os.path.join(out, "train-vs-pytorch.svg"), "w").write(bars_svg(title, groups))
print(f"chart: {os.path.join(out, 'train-vs-pytorch.svg')}", file=sys.stderr)
EOF
if [ "$rounds_failed" != 0 ]; then
  echo "train_vs_pytorch: $rounds_failed run(s) failed (\"failed\" in the table)" >&2
  exit 1
fi
