#include <string>

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
  v += "; CUDA: yes";
#else
  v += "; CUDA: no";
#endif
  return v + ")";
}

}  // namespace ctrl::cli
