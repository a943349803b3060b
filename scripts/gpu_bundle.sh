#!/usr/bin/env bash
# Builds ctrl with the CUDA backend on a development machine (no GPU needed)
# and packs what a GPU machine without Debian's libraries needs to run the
# GPU check (scripts/gpu_check.sh): ctrl, ctrl_tests, bench/step_products, the test fixtures and
# data, and every shared library ldd lists except the NVIDIA driver's and
# CUDA's own (cudart is linked statically; cuBLASLt is opened at run time
# from the GPU machine's toolkit or PyTorch's NVIDIA wheels). One xz
# tarball, at most 60 MiB.
#
#   scripts/gpu_bundle.sh            # build-gpu/, sm_90 (H100/H200) + PTX
#   CTRL_GPU_ARCHS="75;80;90" scripts/gpu_bundle.sh
#
# The build is portable (-march=x86-64-v2: the GPU machine's CPU differs) and
# without MPI (the CUDA backend trains on one rank). Output:
# build-gpu/ctrl-gpu-bundle.tar.xz (an ignored path; pass it to the device
# run tool as a carry path).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${CTRL_GPU_BUILD:-build-gpu}
archs=${CTRL_GPU_ARCHS:-90}
jobs=${JOBS:-2}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
command -v nvcc >/dev/null || { echo "gpu_bundle: nvcc not found (the CUDA toolkit is needed to build)" >&2; exit 1; }

start=$(date +%s)
nice -n 10 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCTRL_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=x86-64-v2" \
  -DCMAKE_C_FLAGS="-march=x86-64-v2" -DCTRL_WITH_CUDA=ON -DCTRL_WITH_MPI=OFF -DCTRL_CUDA_ARCHITECTURES="$archs" \
  "${launcher[@]}" >"$build.cmake.log" 2>&1 || { tail -30 "$build.cmake.log" >&2; exit 1; }
mv "$build.cmake.log" "$build/cmake.log"
binaries=(ctrl ctrl_tests step_products)  # what the GPU check runs
nice -n 10 cmake --build "$build" -j "$jobs" --target "${binaries[@]}"
echo "gpu_bundle: built in $(( $(date +%s) - start )) s"

stage=$build/bundle
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/tests"
for b in "${binaries[@]}"; do cp "$build/$b" "$stage/bin/"; done
cp -r tests/fixtures tests/data "$stage/tests/"
# Every library the binaries load, except the C library's core (present on
# any Linux) and NVIDIA's (the GPU machine's driver and toolkit provide them).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcublas|libcublasLt|libcudart|libnvidia)'
for bin in "${binaries[@]/#/$stage/bin/}"; do
  ldd "$bin" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ $name =~ $skip ]]; then continue; fi
  cp -L "$path" "$stage/lib/$name"
done
# The C library and loader too, in their own folder: gpu_check.sh runs the
# binaries through them only if the GPU machine's C library is older.
mkdir -p "$stage/glibc"
for bin in "${binaries[@]/#/$stage/bin/}"; do
  ldd "$bin" | awk '/(ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so)/ {print ($3 ~ /^\//) ? $3 : $1}'
done | sort -u | while read -r path; do cp -L "$path" "$stage/glibc/"; done
# What the binaries need from NVIDIA, for gpu_check.sh to find on the GPU
# machine: cuBLASLt, which the backend opens at run time (the toolkit's major
# version only), NCCL (opened likewise), and anything ldd shows linked.
cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
{
  echo "libcublasLt.so.$cuda_major"
  echo "libnccl.so.2"  # opened at run time by the NCCL communicator (multi-GPU, --zero 1)
  for bin in "${binaries[@]/#/$stage/bin/}"; do ldd "$bin" | awk '{print $1}'; done |
    grep -E '^(libcublas|libcudart)' || true
} | awk '!seen[$0]++' >"$stage/nvidia-libs.txt"
git rev-parse HEAD >"$stage/commit.txt" 2>/dev/null || echo unknown >"$stage/commit.txt"
{
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $(cat "$stage/commit.txt")$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "cuda architectures: $archs"
  nvcc --version | tail -2
  # The newest C library symbol version the binaries and libraries need (the
  # GPU machine's glibc must be at least this, or gpu_check.sh uses the bundled one).
  echo "needs glibc: $(objdump -T "$stage"/bin/* "$stage"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
} >"$stage/build-info.txt"
cp scripts/gpu_check.sh "$stage/"

out=$build/ctrl-gpu-bundle.tar.xz
tar -C "$stage" -cf - . | xz -T"$jobs" -9 >"$out"
size=$(stat -c %s "$out")
echo "gpu_bundle: $out, $(( size / 1024 / 1024 )) MiB ($size bytes); libraries: $(ls "$stage/lib" | wc -l)"
echo "gpu_bundle: needs from the GPU machine: $(tr '\n' ' ' <"$stage/nvidia-libs.txt")"
if (( size > 60 * 1024 * 1024 )); then
  echo "gpu_bundle: larger than 60 MiB" >&2
  exit 1
fi
