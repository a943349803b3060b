#!/bin/bash
# Training throughput, ctrl against PyTorch (Hugging Face CTRLLMHeadModel) on
# the same preset, in one run. PyTorch runs twice per precision:
#   defaults: the environment as it is (torch's own thread count, glibc malloc);
#   tuned:    torch.set_num_threads(THREADS), OPENBLAS_CORETYPE and
#             OPENBLAS_L2_SIZE unset (they matter only to an OpenBLAS build of
#             torch; PyPI's x86 wheels use MKL), Debian's tcmalloc preloaded.
# PyTorch is the peer users install: torch 2.x from PyPI in .venv
# (tools/setup_python.sh), or any python with torch given as PY=.
# Then `ctrl bench` on the same preset, micro-batch and precisions (dropout 0,
# as PyTorch's side) if the binary ($CTRL, else build/ctrl) exists, and a table
# with the ratios of ctrl to each PyTorch run of the same precision.
# The JSON of every run is kept in RESULTS (a new temporary folder unless set),
# with train_vs_pytorch.svg: tokens/s and peak memory of every run as bars.
#
# Knobs (environment): PRESET=small PRECISIONS="fp32 bf16 fp16" (fp16: ctrl only) BATCH=8 STEPS=8
# WARMUP=2 THREADS=$(nproc) CTRL=build/ctrl RESULTS=<folder>
# TUNED_ENV="VAR=value ..." (extra environment for the tuned runs only, e.g.
# OMP_WAIT_POLICY=PASSIVE, which helps when other work shares the cores).
set -euo pipefail
cd "$(dirname "$0")/.."

PRESET=${PRESET:-small}
PRECISIONS=${PRECISIONS:-fp32 bf16 fp16}
BATCH=${BATCH:-8}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-$(nproc)}
CTRL=${CTRL:-build/ctrl}
PY=${PY:-.venv/bin/python}   # today's PyTorch from PyPI (bash tools/setup_python.sh)
[ -x "$PY" ] || { echo "train_vs_pytorch: no $PY (run: bash tools/setup_python.sh)" >&2; exit 2; }

TCMALLOC=$(ldconfig -p | awk '/libtcmalloc_minimal\.so\.4 / && !f {print $NF; f = 1}')
if [ -z "$TCMALLOC" ]; then
  echo "train_vs_pytorch: libtcmalloc_minimal.so.4 not found (apt-get install libtcmalloc-minimal4); tuned runs use glibc malloc" >&2
fi

out=${RESULTS:-$(mktemp -d)}
mkdir -p "$out"
echo "train_vs_pytorch: results in $out (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
common=(--preset "$PRESET" --batch "$BATCH" --steps "$STEPS" --warmup-steps "$WARMUP" --json)

for prec in $PRECISIONS; do
  if [ "$prec" = fp16 ]; then  # PyTorch's CPU autocast has no fp16; ctrl's fp16 is shown against ctrl fp32
    echo "== PyTorch: no fp16 autocast on the CPU; ctrl fp16 only" >&2
    continue
  fi
  echo "== PyTorch $PRESET $prec, defaults" >&2
  "$PY" bench/pytorch_train.py "${common[@]}" --precision "$prec" > "$out/pytorch-defaults-$prec.json"
  echo "== PyTorch $PRESET $prec, tuned (threads $THREADS, AVX-512 OpenBLAS, tcmalloc${TUNED_ENV:+, $TUNED_ENV})" >&2
  # shellcheck disable=SC2086  # TUNED_ENV is a list of VAR=value words
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${TCMALLOC:+LD_PRELOAD="$TCMALLOC"} ${TUNED_ENV:-} \
    "$PY" bench/pytorch_train.py "${common[@]}" --precision "$prec" --threads "$THREADS" \
    > "$out/pytorch-tuned-$prec.json"
done

if [ -x "$CTRL" ]; then
  for prec in $PRECISIONS; do
    echo "== ctrl bench --config $PRESET --steps $STEPS --threads $THREADS --set train.micro_batch=$BATCH (dropout 0) $prec" >&2
    if ! "$CTRL" bench --config "$PRESET" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
         --set train.micro_batch="$BATCH" --set model.embd_pdrop=0 --set model.resid_pdrop=0 \
         --set train.precision="$prec" --json > "$out/ctrl-$prec.json"; then
      echo "train_vs_pytorch: '$CTRL bench' failed for $prec" >&2
      rm -f "$out/ctrl-$prec.json"
    fi
  done
else
  echo "train_vs_pytorch: no ctrl binary at $CTRL (set CTRL=...); showing PyTorch only" >&2
fi

"$PY" - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    start = text.find("{")  # one JSON object, on one line or pretty-printed
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        print(f"train_vs_pytorch: {path}: not one JSON object", file=sys.stderr)
        return None
rows = []
for name in sorted(n for n in os.listdir(out) if n.endswith(".json")):
    r = load(name)
    if r:
        rows.append((name[:-5], r))
print(f"{'run':<24}{'tokens/s':>10}{'it/s':>8}{'peak RSS MiB':>14}{'threads':>9}  blas")
for name, r in rows:
    print(f"{name:<24}{r['tokens_per_s']:>10.0f}{r['it_per_s']:>8.3f}{r['peak_rss_bytes'] / 2**20:>14.0f}"
          f"{r.get('threads', ''):>9}  {r.get('blas', r.get('precision', ''))[:48]}")
# Each precision of ctrl against PyTorch's runs of the same precision: speed and peak memory.
for name, r in rows:
    if not name.startswith("pytorch-"):
        continue
    prec = name.rsplit("-", 1)[1]
    ctrl = load(f"ctrl-{prec}.json")
    if ctrl:
        print(f"ctrl {prec} / {name[8:]}: {ctrl['tokens_per_s'] / r['tokens_per_s']:.2f}x tokens/s, "
              f"{ctrl['peak_rss_bytes'] / r['peak_rss_bytes']:.2f}x peak memory")
c32 = load("ctrl-fp32.json")
for prec in ("bf16", "fp16"):
    c = load(f"ctrl-{prec}.json")
    if c32 and c:
        print(f"ctrl {prec} / ctrl fp32: {c['tokens_per_s'] / c32['tokens_per_s']:.2f}x tokens/s, "
              f"{c['peak_rss_bytes'] / c32['peak_rss_bytes']:.2f}x peak memory")

# The same runs drawn: tokens/s and peak memory as horizontal bars, ctrl in red.
def panel(x0, title, values, unit):
    width, top, bar = 330, 50, 24
    most = max(v for _, v in values) or 1
    parts = [f"<text x='{x0}' y='32' font-size='14'>{title}</text>"]
    for i, (name, v) in enumerate(values):
        y = top + i * (bar + 8)
        color = "#d62728" if name.startswith("ctrl") else "#1f77b4"
        w = width * v / most
        parts.append(f"<text x='{x0 - 8}' y='{y + 16}' text-anchor='end'>{name}</text>")
        parts.append(f"<rect x='{x0}' y='{y}' width='{w:.1f}' height='{bar}' fill='{color}'/>")
        parts.append(f"<text x='{x0 + w + 4:.1f}' y='{y + 16}'>{v:,.0f} {unit}</text>")
    return parts
if rows:
    height = 70 + len(rows) * 32
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='1180' height='{height}' font-family='sans-serif' "
           "font-size='12'>", "<rect width='100%' height='100%' fill='white'/>"]
    svg += panel(190, "training throughput (higher is better)", [(n, r["tokens_per_s"]) for n, r in rows], "tok/s")
    svg += panel(780, "peak memory (lower is better)", [(n, r["peak_rss_bytes"] / 2**20) for n, r in rows], "MiB")
    svg.append("</svg>")
    with open(os.path.join(out, "train_vs_pytorch.svg"), "w") as f:
        f.write("\n".join(svg) + "\n")
    print(f"chart: {os.path.join(out, 'train_vs_pytorch.svg')}")
EOF
