# The machine as the bench scripts record it beside their figures; sourced.
# cpu_model: lscpu's model name and, since a VM's name ("AMD EPYC") does not
# tell the generation, the vendor's family and model numbers.
cpu_model() {
  local name family model
  name=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
  family=$(grep -m1 '^cpu family' /proc/cpuinfo 2>/dev/null | sed 's/.*: *//')
  model=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo 2>/dev/null | sed 's/.*: *//')
  echo "${name:-unknown CPU}${family:+ (family $family model $model)}"
}
# cpu_isa: the flags that choose ctrl's CPU kernels (AVX2, AVX-512, its BF16, AMX).
cpu_isa() {
  grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo 2>/dev/null | sort -u | tr '\n' ' ' |
    sed 's/ $//'
}
