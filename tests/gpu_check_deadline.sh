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
# A timed-out op phase is not rerun without cuBLASLt (the slower rerun would only time out again).
grep -q '^| ops_without_cublaslt' "$results" && fail "a timed-out op phase was rerun"
for phase in suite_train suite_mixed suite_hf suite_grad bench_tiny_fp32 bench_base_bf16 profile_medium_bf16 suite_fused products_medium_bf16 peer_bf16 peer_fp16; do
  grep -q "^| $phase | SKIPPED" "$results" || fail "phase $phase not recorded as SKIPPED"
done
(( took <= 40 )) || fail "took ${took}s with DEADLINE=25"

# A bundle that needs cuBLASLt on a machine without it: the tests run, and
# no timed phase is started only to run into its timeout.
printf '#!/bin/sh\nexit 0\n' >"$tmp/bundle/bin/ctrl_tests"
echo "libcublasLt.so.99" >"$tmp/bundle/nvidia-libs.txt"
tar -C "$tmp/bundle" -cJf "$tmp/bundle.tar.xz" .
OUT="$tmp/out2" DEADLINE=60 bash "$repo/scripts/gpu_check.sh" "$tmp/bundle.tar.xz" >"$tmp/log" 2>&1 || true
results="$tmp/out2/results.md"
grep -q '^| cublaslt | FAIL' "$results" || fail "a missing cuBLASLt was not reported"
grep -q '^| suite_grad | ok' "$results" || fail "the tests did not run without cuBLASLt"
grep -q '^| bench_' "$results" && fail "timed phases ran without cuBLASLt"
echo "gpu_check_deadline: ok in ${took}s; without cuBLASLt only the tests ran"
