#!/usr/bin/env bash
# Installs what ctrl.cpp needs on Debian 12 (as root, or with sudo) and builds
# it into build/. Safe to run again: apt skips what is installed, the build is
# incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git
  libgtest-dev                      # tests
  libdnnl-dev                       # oneDNN: the CPU matrix products
  nlohmann-json3-dev libtomlplusplus-dev
  libsentencepiece-dev sentencepiece
  libbz2-dev libexpat1-dev zlib1g-dev libicu-dev libzip-dev libxml2-dev
  libopenmpi-dev openmpi-bin        # data-parallel training
  clang libclang-rt-14-dev libomp-dev  # libFuzzer targets (clang needs its own OpenMP)
  dpkg-dev groff-base               # the built-in corpus: dpkg-deb, man pages rendered by groff
  bzip2 python3                     # fuzz seeds (bzcat), scripts/main.sh reads the manifest
  xz-utils                          # the GPU bundle (scripts/gpu_bundle.sh, gpu_check.sh and its test)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

mkdir -p build
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build/configure.log 2>&1; then
  cat build/configure.log >&2
  exit 1
fi
grep -- "skipped:" build/configure.log | sed 's/^-- //' || true  # optional parts left out, one line each
cmake --build build -j"$(nproc)"
