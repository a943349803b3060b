#!/bin/sh
# Installs what tools/*.py and bench/pytorch_train.py need on a fresh Debian 12:
# Debian's PyTorch 1.13 for /usr/bin/python3, pip, tcmalloc for the tuned
# PyTorch benchmark, and the pinned PyPI packages of tools/requirements.txt.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
apt-get update
apt-get install -y python3-torch python3-pip libtcmalloc-minimal4
/usr/bin/python3 -m pip install --break-system-packages -r "$here/requirements.txt"
/usr/bin/python3 -c "import torch, transformers; from transformers import CTRLLMHeadModel; print('torch', torch.__version__, 'transformers', transformers.__version__)"
