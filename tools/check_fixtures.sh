#!/usr/bin/env bash
# Checks the committed oracle fixtures against the Hugging Face model that the
# Python environment has now (tools/setup_python.sh: today's torch and
# transformers from PyPI): regenerates both fixtures into a temporary
# directory, compares them tensor by tensor with the committed ones
# (tools/compare_fixtures.py), runs ctrl's oracle tests against the regenerated
# files (CTRL_FIXTURE_DIR), and round-trips the HF model through
# `ctrl import hf` / `ctrl export hf` into transformers (tools/check_export.py).
#   bash tools/check_fixtures.sh        # needs build/ (scripts/setup.sh) and .venv
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "check_fixtures: no $PY (run: bash tools/setup_python.sh)" >&2; exit 2; }
[ -x build/ctrl_tests ] || { echo "check_fixtures: no build/ctrl_tests (run: bash scripts/setup.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -c "import torch, transformers; print('oracle: torch', torch.__version__, 'transformers', transformers.__version__)"
"$PY" tools/make_fixture.py --seed 1234 --out "$tmp/ctrl_tiny.safetensors" \
  --vocab 96 --n-positions 32 --d-model 32 --dff 64 --layers 2 --heads 4 --batch 2 --seq 16 \
  --hf-dir "$tmp/hf_tiny" --hf-logits "$tmp/hf_tiny_logits.safetensors" 2>/dev/null | head -n 1
"$PY" tools/make_fixture.py --seed 4321 --out "$tmp/ctrl_tiny2.safetensors" \
  --vocab 50 --n-positions 16 --d-model 48 --dff 40 --layers 3 --heads 3 --batch 3 --seq 12 2>/dev/null | head -n 1
for f in ctrl_tiny ctrl_tiny2 hf_tiny_logits; do
  "$PY" tools/compare_fixtures.py "tests/fixtures/$f.safetensors" "$tmp/$f.safetensors"
done
CTRL_FIXTURE_DIR="$tmp" build/ctrl_tests --gtest_filter='Oracle/*' --gtest_brief=1
build/ctrl import hf --in "$tmp/hf_tiny" --out "$tmp/imported.ckpt" --control Wiki=5 >/dev/null
build/ctrl export hf --model "$tmp/imported.ckpt" --out "$tmp/exported" >/dev/null
"$PY" tools/check_export.py "$tmp/exported" "$tmp/hf_tiny_logits.safetensors"
"$PY" tools/check_export.py tests/fixtures/hf_tiny tests/fixtures/hf_tiny_logits.safetensors
echo "check_fixtures: the committed fixtures agree with this torch and transformers"
