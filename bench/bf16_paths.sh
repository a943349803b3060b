#!/bin/bash
# The CPU's two bf16 paths (train.cpu_bf16: oneDNN's bf16 kernels, "native",
# and the bf16 values multiplied as fp32, "widened") against fp32, on the same
# preset in one run: `ctrl bench` tokens/s and peak memory, the three runs of a
# round back to back so that the host's drift hits them alike.
# Knobs (environment): PRESET=small STEPS=4 WARMUP=1 THREADS=$(nproc) ROUNDS=3
# CTRL=build/ctrl. ONEDNN_MAX_CPU_ISA=AVX512_CORE (or AVX2) holds oneDNN to an
# ISA without AVX512-BF16, so that its bf16 kernels are emulated.
set -euo pipefail
CTRL=${CTRL:-build/ctrl}
[ -x "$CTRL" ] || { echo "bf16_paths: $CTRL is not executable (build first)" >&2; exit 2; }
echo "bf16_paths: ${PRESET:-small}, $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-unset}"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for path in native widened fp32; do
    set_precision=(--set train.precision=bf16 --set "train.cpu_bf16=$path")
    [ "$path" = fp32 ] && set_precision=()
    "$CTRL" bench --config "${PRESET:-small}" --steps "${STEPS:-4}" --warmup "${WARMUP:-1}" \
      --threads "${THREADS:-$(nproc)}" "${set_precision[@]}" --json 2>/dev/null |
      python3 -c 'import json, sys; d = json.load(sys.stdin)
print("round %s %-8s %8.0f tokens/s  peak %.0f MiB" % (sys.argv[1], sys.argv[2], d["tokens_per_s"], d["peak_rss_bytes"] / 2**20))' "$r" "$path"
  done
done
