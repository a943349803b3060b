#!/usr/bin/env bash
# The fast unit tests (ctest label "unit" of this build; list below) built
# with -fsanitize=address,undefined in build-asan and run there. Any heap or
# stack overflow, use after free, leak or undefined behaviour ends the test
# with a report. MPI is left out of this build (the MPI suites run in build/).
#   scripts/test_asan.sh [extra ctest arguments, e.g. -R Trainer]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-asan
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
mkdir -p "$BUILD"
# The fast unit tests: file formats, readers, tokenizer, prepare, trainer and
# run directory, export/import, generation, gradients. Left out (they run in
# build/): the long numeric comparisons (mixed precision, toy tasks, the
# double-precision reference, GEMM and bf16 kernel sweeps, lighter models,
# the planner's benchmarks), which would multiply the time, not the coverage.
TESTS="tests/test_core.cpp;tests/test_run_dir.cpp;tests/test_trainer.cpp;tests/test_prepare.cpp;tests/test_tokenizer.cpp"
TESTS+=";tests/test_clean.cpp;tests/test_corpus_text.cpp;tests/test_corpus_wikipedia.cpp;tests/test_corpus_wikitext.cpp"
TESTS+=";tests/test_corpus_aozora.cpp;tests/test_corpus_wikiextractor.cpp;tests/test_hf_and_generate.cpp"
TESTS+=";tests/test_gradcheck.cpp;tests/test_vec_math.cpp;tests/test_schedule.cpp;tests/test_model_fixture.cpp"
if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCTRL_SANITIZE=ON -DCTRL_WITH_MPI=OFF "${launcher[@]}" \
     -DCTRL_TEST_ONLY="$TESTS" > "$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log" >&2
  exit 1
fi
cmake --build "$BUILD" -j"$(nproc)" --target ctrl ctrl_tests
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
(cd "$BUILD" && ctest -L unit --output-on-failure -j"${CTEST_JOBS:-1}" --timeout 900 "$@")
