#!/usr/bin/env bash
# Creates the Python environment for tools/*.py (oracle fixtures, export check)
# and the PyTorch peer in bench/: a virtual environment at .venv (or $VENV) with
# today's PyTorch, transformers, safetensors and sentencepiece from PyPI, the
# way users install them. Nothing from Debian's python3-torch is used.
# Also installs tcmalloc for the tuned PyTorch runs. Safe to run again.
#   bash tools/setup_python.sh            # then: .venv/bin/python tools/make_fixture.py ...
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
need=()
for p in python3-venv python3-pip libtcmalloc-minimal4; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$here/tools/requirements.txt"
"$venv/bin/python" - <<'PY'
import sys, torch, transformers, safetensors, sentencepiece
from transformers import CTRLLMHeadModel  # the oracle must exist in this transformers
print(f"python env ready: {sys.prefix}: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"safetensors {safetensors.__version__}, sentencepiece {sentencepiece.__version__}")
PY
