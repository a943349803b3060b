#!/bin/bash
# What each CUDA kernel asks of a multiprocessor, without a GPU: compiles
# src/ops/cuda/*.cu with ptxas's report for the oldest and newest
# architectures built (sm_75, sm_90) and prints, per kernel, its registers
# per thread, static shared memory, stack frame and spills. Fails when a
# kernel spills or needs a stack frame (local memory: slow on every GPU).
# Launches cannot run out of registers: blocks of up to 256 threads fit any
# count ptxas emits (255 at most), and the one wider kernel (head_total, 1024)
# carries __launch_bounds__. Needs nvcc and a configured CUDA build
# (BUILD=build), whose defines, include paths and flags it uses. About 80 s
# on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "check_cuda_resources: no nvcc (set NVCC=)" >&2; exit 2; }
flags=$BUILD/CMakeFiles/ctrl_lib.dir/flags.make
[ -f "$flags" ] && grep -q '^CUDA_FLAGS' "$flags" ||
  { echo "check_cuda_resources: no CUDA flags in $flags: configure a CUDA build in $BUILD first" >&2; exit 2; }
# The build's own defines, include paths and flags, its architectures replaced by the one checked.
compile=$(sed -n 's/^CUDA_\(DEFINES\|INCLUDES\|FLAGS\) = //p' "$flags" | sed 's/--generate-code=[^ ]*//g' | tr '\n' ' ')
sources=$(realpath src/ops/cuda/*.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$BUILD"  # the include list is relative to it
for arch in 75 90; do
  for f in $sources; do
    eval "\"\$NVCC\" $compile -arch=sm_$arch -Xptxas -v -c \"\$f\" -o \"\$tmp/k.o\"" 2>"$tmp/one.txt" ||
      { cat "$tmp/one.txt" >&2; echo "check_cuda_resources: $f did not compile for sm_$arch" >&2; exit 1; }
    cat "$tmp/one.txt" >>"$tmp/ptxas.txt"
  done
done
python3 - "$tmp/ptxas.txt" <<'PY'
import re, subprocess, sys
rows, cur, bad = [], None, []
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)' for 'sm_(\d+)'", line)
    if m:
        name = subprocess.run(["c++filt", m.group(1)], capture_output=True, text=True).stdout.strip()
        name = re.sub(r"ctrl::cuda::|\(anonymous namespace\)::", "", name).split("(")[0]
        cur = [name, m.group(2), 0, 0, 0, 0]
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur:
        cur[4], cur[5] = int(m.group(1)), int(m.group(2)) + int(m.group(3))
    m = re.search(r"Used (\d+) registers", line)
    if m and cur:
        cur[2] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", line)
        cur[3] = int(s.group(1)) if s else 0
        rows.append(cur)
        if cur[4] or cur[5]:
            bad.append(f"{cur[0]} on sm_{cur[1]}: {cur[4]} bytes stack frame, {cur[5]} bytes spilled")
        cur = None
print("| kernel | arch | registers | static shared (bytes) | stack (bytes) | spills (bytes) |")
print("|---|---|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (r[0], r[1])):
    print(f"| {r[0]} | sm_{r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} |")
print(f"{len(rows)} kernel builds, at most {max(r[2] for r in rows)} registers per thread")
for b in bad:
    print("check_cuda_resources: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
