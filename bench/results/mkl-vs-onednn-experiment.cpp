// Throwaway: MKL 2020.4 (Debian non-free) sgemm vs dnnl_sgemm on ctrl's small-step shapes.
#include <dnnl.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
extern "C" {
void cblas_sgemm(int layout, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void MKL_Set_Num_Threads(int);
int MKL_Set_Num_Threads_Local(int);
}
enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
struct Case { const char* name; int M, N, K; bool ta, tb; float beta; };
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(int argc, char** argv) {
  int nthr = argc > 1 ? atoi(argv[1]) : 2;  // threads per call (1: two concurrent 1-thread calls)
  double secs = 0.3;
  Case cases[] = {{"qkv fwd 2048x384x384 NT",2048,384,384,false,true,0},
                  {"qkv dx 2048x384x384 NN",2048,384,384,false,false,0},
                  {"qkv dW 384x384x2048 TN",384,384,2048,true,false,1},
                  {"ffn up fwd 2048x1536x384",2048,1536,384,false,true,0},
                  {"ffn up dW 1536x384x2048",1536,384,2048,true,false,1},
                  {"ffn down fwd 2048x384x1536",2048,384,1536,false,true,0},
                  {"ffn down dx 2048x1536x384",2048,1536,384,false,false,0},
                  {"head fwd 256x2048x384 NT",256,2048,384,false,true,0},
                  {"head dW 2048x384x256 TN",2048,384,256,true,false,1},
                  {"head dh 256x384x2048 NN",256,384,2048,false,false,0}};
  for (auto& c : cases) {
    double best[2] = {0, 0};
    for (int round = 0; round < 3; ++round)
      for (int lib = 0; lib < 2; ++lib) {
        int conc = nthr == 1 ? 2 : 1;
        double flops = 0, t0 = 0, t1 = 0;
#pragma omp parallel num_threads(conc)
        {
          std::mt19937 g(omp_get_thread_num()); std::uniform_real_distribution<float> u(-1, 1);
          std::vector<float> A(size_t(c.M) * c.K), B(size_t(c.K) * c.N), C(size_t(c.M) * c.N, 0.f);
          for (auto& x : A) x = u(g); for (auto& x : B) x = u(g);
          int lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
          if (conc == 2) { MKL_Set_Num_Threads_Local(1); omp_set_num_threads(1);} else MKL_Set_Num_Threads(nthr);
          auto run = [&] {
            if (lib == 0) dnnl_sgemm(c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', c.M, c.N, c.K, 1.f, A.data(), lda, B.data(), ldb, c.beta, C.data(), c.N);
            else cblas_sgemm(RowMajor, c.ta ? Trans : NoTrans, c.tb ? Trans : NoTrans, c.M, c.N, c.K, 1.f, A.data(), lda, B.data(), ldb, c.beta, C.data(), c.N);
          };
          run(); run();
#pragma omp barrier
#pragma omp master
          t0 = now();
#pragma omp barrier
          int n = 0; double st = now(); while (now() - st < secs) { run(); ++n; }
#pragma omp atomic
          flops += 2.0 * c.M * c.N * c.K * n;
#pragma omp barrier
#pragma omp master
          t1 = now();
        }
        best[lib] = std::max(best[lib], flops / (t1 - t0) / 1e9);
      }
    std::printf("%-28s %s dnnl_sgemm %6.1f  mkl %6.1f  (%.2fx)\n", c.name, nthr == 1 ? "2x1thr" : "2thr  ", best[0], best[1], best[1] / best[0]);
  }
}
