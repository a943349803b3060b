#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs dependencies,
# builds, runs every GoogleTest (and the MPI tests) under ctest, then the unit
# tests again in a second build under AddressSanitizer and
# UndefinedBehaviorSanitizer (build-asan, CTRL_SANITIZE=ON; any finding fails),
# then each corpus reader's fuzz target for a short fixed time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# Tests time nothing: OpenMP threads sleep instead of spinning at barriers, so a
# suite sharing its cores with other work slows down in proportion instead of
# stalling (MixedPrecision.LossCurvesOnTinyStayCloseToFp32 hit the 900 s timeout
# on a 2-core machine at load 15 with spinning threads).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# Entries run side by side, one per CPU up to 4: most are short or wait on the
# processes they start, so two at a time on 2 cores finish sooner than one at
# a time (a 2-core Xeon: 4 min 33 s against 6 min 46 s, docs/testing.md); 4
# bounds the memory of the largest ones running together.
export CTEST_JOBS="${CTEST_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
(cd build && ctest --output-on-failure -j"$CTEST_JOBS" --timeout 900)
bash scripts/test_asan.sh
if [ -f scripts/fuzz.sh ]; then bash scripts/fuzz.sh; fi
