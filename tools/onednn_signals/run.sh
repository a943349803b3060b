#!/usr/bin/env bash
# Builds signal_storm.cpp against the system's oneDNN and runs its three
# modes on one thread: whether a signal handler that interrupts dnnl_sgemm
# corrupts the heap on this CPU and oneDNN (docs/reliability.md, "Signals").
#   bash tools/onednn_signals/run.sh [seconds per mode, default 3]
set -uo pipefail
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O2 -std=c++17 -o "$out/signal_storm" signal_storm.cpp -ldnnl -lpthread || exit 1
echo "oneDNN $(dpkg-query -W -f '${Version}' libdnnl2 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for mode in stack altstack blocked; do
  (OMP_NUM_THREADS=1 exec "$out/signal_storm" "$mode" "${1:-3}") > "$out/log" 2>&1
  status=$?
  if [ "$status" = 0 ]; then tail -1 "$out/log"; else echo "$mode: died with status $status: $(head -1 "$out/log")"; fi
done
