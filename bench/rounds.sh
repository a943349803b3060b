# Sourced by the throughput benchmarks (train_vs_pytorch.sh, gpu_vs_pytorch.sh).
# rotated_rounds NAME ROUNDS "PRESETS" "PRECISIONS" WHO...: calls the script's
# run_one PRESET PRECISION WHO ROUND for every preset, precision and run, in
# ROUNDS rounds; round r starts at the r-th run of the list, so that no
# configuration always runs first and drift hits all alike. A failed run is
# reported under NAME and left out, and counted in rounds_failed (for the
# script's exit status).
rounds_failed=0
rotated_rounds() {
  local name=$1 rounds=$2 presets=$3 precisions=$4
  shift 4
  local -a order=("$@")
  local n=${#order[@]} round preset prec i who
  for round in $(seq 1 "$rounds"); do
    for preset in $presets; do
      for prec in $precisions; do
        for i in $(seq 0 $((n - 1))); do
          who=${order[$(((i + round - 1) % n))]}
          run_one "$preset" "$prec" "$who" "$round" ||
            { echo "$name: $preset $prec $who failed; left out" >&2; rounds_failed=$((rounds_failed + 1)); }
        done
      done
    done
  done
}
