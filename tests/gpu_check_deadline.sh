#!/bin/bash
# scripts/gpu_check.sh keeps to its DEADLINE: from a stand-in bundle whose
# ctrl claims a CUDA device and whose ctrl_tests hangs, with DEADLINE=25 the
# op phase must be cut short (TIMEOUT, not its own 75 s), every later phase
# recorded as SKIPPED, and the whole check end in well under its phases'
# own timeouts. No GPU is needed: this checks the script, not the backend.
# A phase starts only with at least 15 s left (less a 5 s reserve), so 25
# leaves the op phase up to 5 s of unpacking on a slow machine (with 20, one
# second's start-up in a fresh Debian root skipped it).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bundle/bin"
printf '#!/bin/sh\necho "ctrl (stand-in), a CUDA device is present"\n' >"$tmp/bundle/bin/ctrl"
printf '#!/bin/sh\nexec sleep 120\n' >"$tmp/bundle/bin/ctrl_tests"
chmod +x "$tmp/bundle/bin/"*
echo "commit=stand-in" >"$tmp/bundle/build-info.txt"
tar -C "$tmp/bundle" -cJf "$tmp/bundle.tar.xz" .

start=$(date +%s)
OUT="$tmp/out" DEADLINE=25 bash "$repo/scripts/gpu_check.sh" "$tmp/bundle.tar.xz" >"$tmp/log" 2>&1 || true
took=$(( $(date +%s) - start ))
results="$tmp/out/results.md"
fail() { echo "gpu_check_deadline: $*"; cat "$tmp/log"; exit 1; }
[[ -f $results ]] || fail "no results.md"
grep -q '^| machine | ok' "$results" || fail "the machine phase did not pass with the stand-in ctrl"
grep -q '^| ops | TIMEOUT' "$results" || fail "the op phase was not cut by the deadline"
for phase in ops_without_cublaslt suite_train suite_mixed suite_hf suite_grad bench_tiny_fp32 bench_base_bf16 profile_medium_bf16 products_medium_bf16 peer_bf16 peer_fp16; do
  grep -q "^| $phase | SKIPPED" "$results" || fail "phase $phase not recorded as SKIPPED"
done
(( took <= 40 )) || fail "took ${took}s with DEADLINE=25"
echo "gpu_check_deadline: ok in ${took}s"
