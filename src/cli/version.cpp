#include <string>

#include "ops/ops.h"

namespace ctrl::cli {

// What this binary was built with, so bug reports and benchmarks say it.
std::string version_string() {
  std::string v = std::string("ctrl ") + CTRL_VERSION + " (CPU backend: oneDNN GEMM, OpenMP";
#ifdef CTRL_HAVE_MPI
  v += "; MPI: yes";
#else
  v += "; MPI: no, single process only";
#endif
#ifdef CTRL_HAVE_CUDA
  const std::string missing = cuda_unavailable_reason();  // "" when a device is present
  v += std::string("; CUDA: yes, built with CUDA ") + CTRL_CUDA_VERSION + " (cuBLASLt loaded at run time); " +
       (missing.empty() ? "a CUDA device is present" : "no CUDA device found (" + missing + ")");
#else
  v += "; CUDA: no";
#endif
  return v + ")";
}

}  // namespace ctrl::cli
