#!/bin/bash
# The CPU's two bf16 paths (train.cpu_bf16: oneDNN's bf16 kernels, "native",
# and the bf16 values multiplied as fp32, "widened") against fp32, on the same
# preset in one run: `ctrl bench` tokens/s and peak memory, the three runs of a
# round back to back so that the host's drift hits them alike. Each bf16 run
# also reports ctrl's own bf16-against-fp32 probe (the step times behind its
# fp32 advice) and whether it advised fp32, so the table shows whether the
# advice matches what the whole runs measured.
# Knobs (environment): PRESET=small STEPS=4 WARMUP=1 THREADS=$(nproc) ROUNDS=3
# PATHS="native widened" CTRL=build/ctrl. ONEDNN_MAX_CPU_ISA=AVX512_CORE (or
# AVX2) holds oneDNN to an ISA without AVX512-BF16, so that its bf16 kernels
# are emulated. On a CPU without oneDNN bf16 kernels both paths are widened.
set -euo pipefail
source "$(dirname "$0")/machine.sh"
CTRL=${CTRL:-build/ctrl}
[ -x "$CTRL" ] || { echo "bf16_paths: $CTRL is not executable (build first)" >&2; exit 2; }
echo "bf16_paths: ${PRESET:-small}, $(cpu_model), $(nproc) CPUs, ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-unset}, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
runs=$(mktemp) err=$(mktemp)
trap 'rm -f "$runs" "$err"' EXIT
for r in $(seq 1 "${ROUNDS:-3}"); do
  for path in ${PATHS:-native widened} fp32; do
    set_precision=(--set train.precision=bf16 --set "train.cpu_bf16=$path")
    [ "$path" = fp32 ] && set_precision=()
    # ctrl's stderr is kept, and shown when it fails or prints no JSON.
    json=$("$CTRL" bench --config "${PRESET:-small}" --steps "${STEPS:-4}" --warmup "${WARMUP:-1}" \
      --threads "${THREADS:-$(nproc)}" "${set_precision[@]}" --json 2>"$err") &&
      python3 -c 'import json, sys; json.loads(sys.argv[1])' "$json" 2>/dev/null ||
      { echo "bf16_paths: ctrl bench ($path, round $r) failed or printed no JSON; its stderr:" >&2; cat "$err" >&2; exit 1; }
    printf '%s\n' "$json" |
      python3 -c 'import json, sys; d = json.load(sys.stdin); d["round"], d["path"] = sys.argv[1], sys.argv[2]
line = "round %s %-8s %8.0f tokens/s  peak %5.0f MiB" % (d["round"], d["path"], d["tokens_per_s"], d["peak_rss_bytes"] / 2**20)
if "bf16_probe_step_s" in d:
    line += "  probe: bf16 step / fp32 step %.2f (%d layers), advice %s" % (
        d["bf16_probe_step_s"] / d["fp32_probe_step_s"], d["bf16_probe_layers"],
        "yes" if "precision_advice" in d else "no")
print(line, file=sys.stderr); print(json.dumps(d))' "$r" "$path" >> "$runs"
  done
done
python3 - "$runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
fp32 = {r["round"]: r["tokens_per_s"] for r in runs if r["path"] == "fp32"}
print("\n| path | tokens/s (median) | fp32 / path, same round (median) | probe: bf16 step / fp32 step (median) | advised fp32 |")
print("|---|---:|---:|---:|---:|")
for path in dict.fromkeys(r["path"] for r in runs):
    rs = [r for r in runs if r["path"] == path]
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    if path == "fp32":
        print(f"| fp32 | {tps:.0f} | 1 | | |")
        continue
    ratio = statistics.median(fp32[r["round"]] / r["tokens_per_s"] for r in rs)
    probes = [r["bf16_probe_step_s"] / r["fp32_probe_step_s"] for r in rs if "bf16_probe_step_s" in r]
    probe = f"{statistics.median(probes):.2f}" if probes else "not measured"
    advised = sum("precision_advice" in r for r in rs)
    ran = rs[0].get("bf16_products", path)  # without oneDNN bf16 kernels, native runs widened
    print(f"| {path}{'' if ran == path else f' (ran {ran})'} | {tps:.0f} | {ratio:.2f} | {probe} | {advised} of {len(rs)} |")
PY
