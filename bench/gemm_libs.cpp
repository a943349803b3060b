// gemm_libs: compares the GEMM libraries available as Debian packages on the
// shapes one training step of a preset runs (`small` unless --model says
// otherwise), so that the engine's GEMM layer (src/ops/cpu/gemm.cpp) is chosen
// by measurement.
//
// Shape letters: M rows of C, N columns of C, K the reduced dimension.
// `small` preset: tokens 8*256 = 2048, D 384, F 1536, V 32000, head dim 64.
//
// Libraries: OpenBLAS (cblas_sgemm; threads from openblas_set_num_threads),
// BLIS (typed API bli_sgemm_ex with an explicit thread count), oneDNN
// (dnnl_sgemm, the same cut into dynamically scheduled tiles, and the matmul
// primitive for fp32 and bf16), and the engine's
// own ctrl::cpu::gemm_f32 / gemm_bf16 for comparison.
//
// Usage: gemm_libs [--threads 1,2] [--libs openblas,blis,dnnl_sgemm,dnnl_tiled,dnnl_matmul,ctrl]
//                  [--seconds 0.1] [--rounds 3] [--shapes substring]
//                  [--model PRESET|FILE] [--tokens N]   (a preset's or config
//                                     file's layer sizes, default small; rows of
//                                     the linear layers' products, default 8 sequences)
//                  [--idle-wait S]   (before each timing, wait up to S seconds
//                                     until no other process is runnable; rows
//                                     timed on a busy machine are marked '*')
// Prints one table per thread count: GFLOP/s per library and shape (best
// repeat over `rounds` interleaved rounds of `seconds` each), and the ratio of
// each to the best fp32 library on that shape.
// BLIS 0.9 does not recognise AMD family 0x1A (Zen 5) and falls back to its
// generic kernels; run with BLIS_ARCH_TYPE=0 to force its skx (AVX-512) kernels.
//
// Note: OpenBLAS and BLIS both export cblas_sgemm; OpenBLAS is linked first so
// the cblas_* names resolve to it, and BLIS is called only through bli_*.
#include <blis.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/config.h"
#include "ops/cpu/gemm.h"

// OpenBLAS's cblas.h would clash with blis.h, which declares the same
// cblas_sgemm (it resolves to OpenBLAS, linked first); the OpenBLAS-only entry
// points used here are declared by hand.
extern "C" {
void openblas_set_num_threads(int n);
char* openblas_get_corename(void);
char* openblas_get_config(void);
}

namespace {

using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

struct Shape {
  std::string name;
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  int heads;  // > 0: `heads` independent products inside one omp parallel for
};

// The products of one training step of a model's layer sizes at `tokens`
// tokens per micro-batch (default: 8 sequences), plus attention and a square.
std::vector<Shape> shapes(const ctrl::ModelConfig& m, int64_t tokens) {
  const int64_t D = m.d_model, F = m.d_ff, V = m.vocab_size, ctx = m.n_ctx, hd = D / m.n_head;
  const int64_t T = tokens > 0 ? tokens : 8 * ctx;
  const int64_t heads = std::max<int64_t>(1, T / ctx) * m.n_head;  // B*H products of ctx x ctx
  const std::string h = " x" + std::to_string(heads) + " heads";
  return {
      {"qkv/proj fwd  x.W^T", false, true, T, D, D, 0.f, 0},
      {"qkv/proj dx   dy.W", false, false, T, D, D, 0.f, 0},
      {"qkv/proj dW   dy^T.x", true, false, D, D, T, 1.f, 0},
      {"ffn up fwd    x.W^T", false, true, T, F, D, 0.f, 0},
      {"ffn up dx     dy.W", false, false, T, D, F, 0.f, 0},
      {"ffn up dW     dy^T.x", true, false, F, D, T, 1.f, 0},
      {"ffn down fwd  x.W^T", false, true, T, D, F, 0.f, 0},
      {"logits fwd    x.E^T", false, true, T, V, D, 0.f, 0},
      {"logits dx     dy.E", false, false, T, D, V, 0.f, 0},
      {"logits dE     dy^T.x", true, false, V, D, T, 1.f, 0},
      {"attn q.k^T " + h, false, true, ctx, ctx, hd, 0.f, int(heads)},
      {"attn p.v   " + h, false, false, ctx, hd, ctx, 0.f, int(heads)},
      {"attn dp^T.q" + h, true, false, ctx, hd, ctx, 0.f, int(heads)},
      {"square 2048^3", false, false, 2048, 2048, 2048, 0.f, 0},
  };
}

// Row-major storage sizes: op(A) is M x K, op(B) is K x N.
int64_t rows_a(const Shape& s) { return s.ta ? s.K : s.M; }
int64_t cols_a(const Shape& s) { return s.ta ? s.M : s.K; }
int64_t rows_b(const Shape& s) { return s.tb ? s.N : s.K; }
int64_t cols_b(const Shape& s) { return s.tb ? s.K : s.N; }

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// One oneDNN matmul primitive for a fixed shape, created up front (creation
// time is reported separately). User-managed scratchpad so concurrent calls
// from an omp parallel region are safe.
struct DnnlMatmul {
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
  double create_ms = 0;
};

dnnl::engine& dnnl_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

DnnlMatmul make_matmul(const Shape& s, bool bf16) {
  const auto dtype = bf16 ? dt::bf16 : dt::f32;
  const int64_t lda = cols_a(s), ldb = cols_b(s), ldc = s.N;
  const auto t0 = std::chrono::steady_clock::now();
  md a({s.M, s.K}, dtype, s.ta ? dims{1, lda} : dims{lda, 1});
  md b({s.K, s.N}, dtype, s.tb ? dims{1, ldb} : dims{ldb, 1});
  md c({s.M, s.N}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(s.beta);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, dnnl_engine());
  DnnlMatmul m;
  m.prim = dnnl::matmul(pd);
  m.scratch_bytes = pd.scratchpad_desc().get_size();
  m.create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

// oneDNN builds without bf16 matmul kernels for CPUs below AVX-512 (AVX2 only).
bool bf16_matmul_available() {
  try {
    make_matmul(Shape{"probe", false, false, 16, 16, 16, 0.f, 0}, true);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

void run_matmul(const DnnlMatmul& m, const Shape& s, bool bf16, const void* A, const void* B,
                float* C) {
  using md = dnnl::memory::desc;
  thread_local dnnl::stream strm(dnnl_engine());
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < m.scratch_bytes) scratch.resize(m.scratch_bytes);
  const auto dtype = bf16 ? dt::bf16 : dt::f32;
  const int64_t lda = cols_a(s), ldb = cols_b(s);
  md a({s.M, s.K}, dtype, s.ta ? dims{1, lda} : dims{lda, 1});
  md b({s.K, s.N}, dtype, s.tb ? dims{1, ldb} : dims{ldb, 1});
  md c({s.M, s.N}, dt::f32, dims{s.N, 1});
  auto& eng = dnnl_engine();
  dnnl::memory ma(a, eng, const_cast<void*>(A)), mb(b, eng, const_cast<void*>(B)), mc(c, eng, C);
  dnnl::memory ms({{static_cast<int64_t>(m.scratch_bytes)}, dt::u8, dnnl::memory::format_tag::a},
                  eng, scratch.data());
  m.prim.execute(strm, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                        {DNNL_ARG_SCRATCHPAD, ms}});
  strm.wait();
}

// One library call computing one product of shape s (single product; the
// attention rows call it per head inside an omp parallel for).
using Call = std::function<void(const Shape&, const void* A, const void* B, float* C)>;

struct Lib {
  std::string name;
  bool bf16;
  Call call;
  std::function<void(const Shape&)> prepare;  // per shape, outside the timing
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GFLOP/s of lib on s: the fastest of the repeats made in `secs` (3 at least),
// after one warm-up call. The best repeat, not the mean, because the machine is
// shared: other processes only ever make a repeat slower.
double time_lib(const Lib& lib, const Shape& s, const void* A, const void* B, float* C,
                double secs) {
  const int heads = std::max(1, s.heads);
  const int64_t a_sz = rows_a(s) * cols_a(s), b_sz = rows_b(s) * cols_b(s), c_sz = s.M * s.N;
  const size_t el = lib.bf16 ? 2 : 4;
  auto once = [&] {
    if (s.heads > 0) {
#pragma omp parallel for schedule(static)
      for (int h = 0; h < heads; ++h)
        lib.call(s, static_cast<const char*>(A) + h * a_sz * el,
                 static_cast<const char*>(B) + h * b_sz * el, C + h * c_sz);
    } else {
      lib.call(s, A, B, C);
    }
  };
  once();
  int reps = 0;
  double best = 1e30;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    const auto t1 = std::chrono::steady_clock::now();
    once();
    best = std::min(best, seconds_since(t1));
    ++reps;
  } while (reps < 3 || seconds_since(t0) < secs);
  return 2.0 * s.M * s.N * s.K * heads / best / 1e9;
}

// Runnable processes on the machine right now (4th field of /proc/loadavg,
// which counts this process too).
int runnable_now() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return 1;
  double l1, l5, l15;
  int running = 1, total = 0;
  if (std::fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5) running = 1;
  std::fclose(f);
  return running;
}

// The machine is shared: waits (up to max_wait seconds) until no other process
// is runnable, so a timing is not taken while someone else computes. Returns
// whether the machine was idle.
bool wait_for_idle(double max_wait) {
  const auto t0 = std::chrono::steady_clock::now();
  int idle_polls = 0;
  while (seconds_since(t0) < max_wait) {
    idle_polls = runnable_now() <= 1 ? idle_polls + 1 : 0;
    if (idle_polls >= 3) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

}  // namespace

int run(int argc, char** argv) {
  ctrl::cli::Args args = ctrl::cli::Args::tool(
      "gemm_libs",
      "usage: gemm_libs [--threads 1,2] [--libs openblas,blis,dnnl_sgemm,dnnl_tiled,dnnl_matmul,ctrl]\n"
      "                 [--seconds 0.1] [--rounds 3] [--shapes substring] [--model PRESET|FILE] [--tokens N]\n"
      "                 [--idle-wait S]\n");
  for (const char* name : {"threads", "libs", "seconds", "idle-wait", "rounds", "shapes", "model", "tokens"})
    args.flag(name);
  if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
  std::vector<int> threads;
  for (const auto& t : split(args.get("threads", "1,2"))) {
    const auto n = ctrl::parse_whole_int(t);
    if (!n || *n < 1 || *n > 4096) ctrl::fail("gemm_libs: --threads " + t + ": expected whole numbers from 1 to 4096");
    threads.push_back(int(*n));
  }
  const std::string libs_arg = args.get("libs", "openblas,blis,dnnl_sgemm,dnnl_matmul,ctrl");
  const std::string shape_filter = args.get("shapes");
  const ctrl::ModelConfig model = ctrl::load_config(args.get("model", "small")).model;
  const int64_t tokens = args.get_int("tokens", 0, 1);
  const double secs = args.get_double("seconds", 0.1, 0.001, 60);
  const int rounds = int(args.get_int("rounds", 3, 1, 1000));
  const double idle_wait = args.get_double("idle-wait", 0, 0, 3600);  // seconds to wait for an idle machine
  const auto wanted = split(libs_arg);
  auto want = [&](const std::string& n) {
    return std::find(wanted.begin(), wanted.end(), n) != wanted.end();
  };

  bli_init();  // the arch query below needs an initialised BLIS
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS %s, core %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_config(),
              openblas_get_corename(), ct ? ct : "<unset>");
  std::printf("BLIS %s, sgemm kernel config %s\n", bli_info_get_version_str(),
              bli_arch_string(bli_arch_query_id()));
  const auto* dv = dnnl_version();
  std::printf("oneDNN %d.%d.%d, effective ISA code %d (avx512_core_bf16=%d, avx512_core_amx=%d)\n",
              dv->major, dv->minor, dv->patch, static_cast<int>(dnnl::get_effective_cpu_isa()),
              static_cast<int>(dnnl::cpu_isa::avx512_core_bf16),
              static_cast<int>(dnnl::cpu_isa::avx512_core_amx));
  std::printf("ctrl::cpu::cpu_has_native_bf16() = %d\n\n", ctrl::cpu::cpu_has_native_bf16());

  // Current-thread-count handle for the BLIS and OpenBLAS calls: inside an
  // omp parallel region every library call is single-threaded.
  int lib_threads = 1;
  auto inner_threads = [&] { return omp_in_parallel() ? 1 : lib_threads; };

  std::map<std::string, DnnlMatmul> mm_cache;  // filled in prepare(), read-only when timed
  auto key = [](const Shape& s, bool bf16) { return s.name + (bf16 ? "/bf16" : "/f32"); };

  std::vector<Lib> libs;
  if (want("openblas"))
    libs.push_back({"openblas", false,
                    [&](const Shape& s, const void* A, const void* B, float* C) {
                      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                                  s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.f,
                                  static_cast<const float*>(A), cols_a(s),
                                  static_cast<const float*>(B), cols_b(s), s.beta, C, s.N);
                    },
                    [&](const Shape& s) {
                      openblas_set_num_threads(s.heads > 0 ? 1 : lib_threads);
                    }});
  if (want("blis"))
    libs.push_back({"blis", false,
                    [&](const Shape& s, const void* A, const void* B, float* C) {
                      rntm_t rntm = BLIS_RNTM_INITIALIZER;
                      bli_rntm_set_num_threads(inner_threads(), &rntm);
                      float alpha = 1.f, beta = s.beta;
                      // Row-major: row stride = leading dimension, column stride 1.
                      bli_sgemm_ex(s.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                                   s.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.M, s.N, s.K,
                                   &alpha, const_cast<float*>(static_cast<const float*>(A)),
                                   cols_a(s), 1, const_cast<float*>(static_cast<const float*>(B)),
                                   cols_b(s), 1, &beta, C, s.N, 1, nullptr, &rntm);
                    },
                    nullptr});
  if (want("dnnl_sgemm"))
    libs.push_back({"dnnl_sgemm", false,
                    [&](const Shape& s, const void* A, const void* B, float* C) {
                      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f,
                                 static_cast<const float*>(A), cols_a(s),
                                 static_cast<const float*>(B), cols_b(s), s.beta, C, s.N);
                    },
                    nullptr});
  // dnnl_tiled: C cut into fixed tiles (at most 256 x 512), each a
  // single-threaded dnnl_sgemm, handed out dynamically: a thread whose core is
  // shared with another process takes fewer tiles (the shared-machine
  // question), and the bits no longer depend on the thread count.
  if (want("dnnl_tiled"))
    libs.push_back({"dnnl_tiled", false,
                    [&](const Shape& s, const void* A, const void* B, float* C) {
                      const int64_t lda = cols_a(s), ldb = cols_b(s);
                      const int64_t tm = (s.M + 255) / 256, tn = (s.N + 511) / 512;
                      const int64_t mb = (s.M + tm - 1) / tm, nb = (s.N + tn - 1) / tn;
                      const float* a0 = static_cast<const float*>(A);
                      const float* b0 = static_cast<const float*>(B);
#pragma omp parallel for schedule(dynamic, 1) num_threads(inner_threads())
                      for (int64_t t = 0; t < tm * tn; ++t) {
                        const int64_t i0 = t / tn * mb, j0 = t % tn * nb;
                        const int64_t m = std::min(mb, s.M - i0), n = std::min(nb, s.N - j0);
                        dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', m, n, s.K, 1.f,
                                   s.ta ? a0 + i0 : a0 + i0 * lda, lda, s.tb ? b0 + j0 * ldb : b0 + j0,
                                   ldb, s.beta, C + i0 * s.N + j0, s.N);
                      }
                    },
                    nullptr});
  for (bool bf16 : {false, true}) {
    if (!want("dnnl_matmul")) break;
    if (bf16 && !bf16_matmul_available()) {
      std::printf("dnnl_matmul_bf16 skipped: oneDNN has no bf16 matmul for this CPU\n");
      continue;
    }
    libs.push_back({bf16 ? "dnnl_matmul_bf16" : "dnnl_matmul", bf16,
                    [&, bf16](const Shape& s, const void* A, const void* B, float* C) {
                      run_matmul(mm_cache.at(key(s, bf16)), s, bf16, A, B, C);
                    },
                    [&, bf16](const Shape& s) {
                      // Primitives depend on the thread count at creation: one per
                      // shape and table; the first creation includes JIT compilation.
                      if (mm_cache.count(key(s, bf16))) return;
                      if (s.heads > 0) {
                        DnnlMatmul m;
#pragma omp parallel num_threads(1)
                        m = make_matmul(s, bf16);
                        mm_cache[key(s, bf16)] = m;
                      } else {
                        mm_cache[key(s, bf16)] = make_matmul(s, bf16);
                      }
                    }});
  }
  for (bool bf16 : {false, true}) {
    if (!want("ctrl")) break;
    libs.push_back({bf16 ? "ctrl_bf16" : "ctrl_f32", bf16,
                    [bf16](const Shape& s, const void* A, const void* B, float* C) {
                      if (bf16)
                        ctrl::cpu::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f,
                                             static_cast<const uint16_t*>(A), cols_a(s),
                                             static_cast<const uint16_t*>(B), cols_b(s), s.beta,
                                             C, s.N);
                      else
                        ctrl::cpu::gemm_f32(s.ta, s.tb, s.M, s.N, s.K, 1.f,
                                            static_cast<const float*>(A), cols_a(s),
                                            static_cast<const float*>(B), cols_b(s), s.beta, C,
                                            s.N);
                    },
                    nullptr});
  }

  std::vector<Shape> all;
  for (auto& s : shapes(model, tokens))
    if (shape_filter.empty() || s.name.find(shape_filter) != std::string::npos) all.push_back(s);

  for (int nt : threads) {
    omp_set_num_threads(nt);
    lib_threads = nt;
    bli_thread_set_num_threads(nt);
    std::printf("== %d thread%s (GFLOP/s; in brackets: ratio to the best fp32 library) ==\n", nt,
                nt > 1 ? "s" : "");
    std::printf("%-24s %14s", "shape (M x N x K)", "");
    for (auto& l : libs) std::printf(" %17s", l.name.c_str());
    std::printf("\n");
    std::vector<double> create_ms;
    const auto t_table = std::chrono::steady_clock::now();
    for (auto& s : all) {
      const int heads = std::max(1, s.heads);
      const size_t a_sz = rows_a(s) * cols_a(s) * heads, b_sz = rows_b(s) * cols_b(s) * heads,
                   c_sz = s.M * s.N * heads;
      std::vector<float> A(a_sz), B(b_sz), C(c_sz, 0.f);
      std::vector<uint16_t> A16(a_sz), B16(b_sz);
      uint64_t x = 12345;
      auto rnd = [&] {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<float>((x >> 40) & 0xffff) / 65536.f - 0.5f;
      };
      for (size_t i = 0; i < a_sz; ++i) A16[i] = to_bf16(A[i] = rnd());
      for (size_t i = 0; i < b_sz; ++i) B16[i] = to_bf16(B[i] = rnd());
      // Libraries take turns for `rounds` rounds, so a burst of load from
      // other processes does not fall on one library only; best round kept.
      std::vector<double> g(libs.size(), 0.0);
      bool busy = false;
      for (int round = 0; round < rounds; ++round)
        for (size_t i = 0; i < libs.size(); ++i) {
          const auto& l = libs[i];
          if (l.prepare) l.prepare(s);
          if (idle_wait > 0 && !wait_for_idle(idle_wait)) busy = true;
          std::fill(C.begin(), C.end(), 0.f);
          g[i] = std::max(g[i], l.bf16 ? time_lib(l, s, A16.data(), B16.data(), C.data(), secs)
                                       : time_lib(l, s, A.data(), B.data(), C.data(), secs));
        }
      double best = 0;
      for (size_t i = 0; i < libs.size(); ++i)
        if (!libs[i].bf16 && libs[i].name.rfind("ctrl", 0) != 0) best = std::max(best, g[i]);
      char dims[64];
      std::snprintf(dims, sizeof dims, "%ldx%ldx%ld", long(s.M), long(s.N), long(s.K));
      std::printf("%-24s%c%14s", s.name.c_str(), busy ? '*' : ' ', dims);
      for (double v : g) std::printf(" %8.1f (%5.2fx)", v, best > 0 ? v / best : 0.0);
      std::printf("\n");
      std::fflush(stdout);
      for (auto& [k, m] : mm_cache) create_ms.push_back(m.create_ms);
      mm_cache.clear();
    }
    std::printf("table time %.0f s\n", seconds_since(t_table));
    if (!create_ms.empty()) {
      std::sort(create_ms.begin(), create_ms.end());
      std::printf("oneDNN matmul primitive creation: median %.3f ms, max %.3f ms (%zu primitives)\n",
                  create_ms[create_ms.size() / 2], create_ms.back(), create_ms.size());
    }
    std::printf("\n");
  }
  return 0;
}

int main(int argc, char** argv) { return ctrl::cli::run_tool(argc, argv, run); }
