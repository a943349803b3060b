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
(cd build && ctest --output-on-failure -j1 --timeout 900)
bash scripts/test_asan.sh
if [ -f scripts/fuzz.sh ]; then bash scripts/fuzz.sh; fi
