#include "ops/profiled_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace ctrl {
namespace {

class ProfiledOps final : public Ops {
 public:
  explicit ProfiledOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return inner_->name(); }
  std::string precision_note(DType low) const override { return inner_->precision_note(low); }

  struct Entry {
    long calls = 0;
    double seconds = 0;
  };
  std::map<std::string, Entry> entries;

  void linear_forward(TensorRef out, TensorRef in, TensorRef w, const float* b, int64_t N, int64_t Dout,
                      int64_t Din) override {
    Timer timer(entries["linear_forward"]);
    inner_->linear_forward(out, in, w, b, N, Dout, Din);
  }
  void linear_backward(TensorRef din, float* dw, float* db, TensorRef dout, TensorRef in, TensorRef w, int64_t N,
                       int64_t Dout, int64_t Din, bool accumulate_din) override {
    Timer timer(entries["linear_backward"]);
    inner_->linear_backward(din, dw, db, dout, in, w, N, Dout, Din, accumulate_din);
  }
  void layernorm_forward(TensorRef out, float* mean, float* rstd, TensorRef in, const float* gamma, const float* beta,
                         int64_t N, int64_t D, float eps) override {
    Timer timer(entries["layernorm_forward"]);
    inner_->layernorm_forward(out, mean, rstd, in, gamma, beta, N, D, eps);
  }
  void layernorm_backward(TensorRef din, float* dgamma, float* dbeta, TensorRef dout, TensorRef in, const float* mean,
                          const float* rstd, const float* gamma, int64_t N, int64_t D) override {
    Timer timer(entries["layernorm_backward"]);
    inner_->layernorm_backward(din, dgamma, dbeta, dout, in, mean, rstd, gamma, N, D);
  }
  void attention_forward(TensorRef out, TensorRef probs, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                         int64_t H) override {
    Timer timer(entries["attention_forward"]);
    inner_->attention_forward(out, probs, qkv, B, T, D, H);
  }
  void attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef probs, int64_t B, int64_t T,
                          int64_t D, int64_t H) override {
    Timer timer(entries["attention_backward"]);
    inner_->attention_backward(dqkv, dout, qkv, probs, B, T, D, H);
  }
  void embedding_forward(TensorRef x, const int32_t* tokens, const float* w, int64_t B, int64_t T, int64_t D,
                         float scale) override {
    Timer timer(entries["embedding_forward"]);
    inner_->embedding_forward(x, tokens, w, B, T, D, scale);
  }
  void embedding_backward(float* dw, TensorRef dx, const int32_t* tokens, int64_t B, int64_t T, int64_t D,
                          float scale) override {
    Timer timer(entries["embedding_backward"]);
    inner_->embedding_backward(dw, dx, tokens, B, T, D, scale);
  }
  void embedding_at(float* x, int32_t token, int64_t position, const float* w, int64_t D, float scale) override {
    Timer timer(entries["embedding_at"]);
    inner_->embedding_at(x, token, position, w, D, scale);
  }
  void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t D,
                        int64_t H) override {
    Timer timer(entries["attention_decode"]);
    inner_->attention_decode(out, q, k_cache, v_cache, n, D, H);
  }
  void relu_forward(TensorRef x, size_t n) override {
    Timer timer(entries["relu_forward"]);
    inner_->relu_forward(x, n);
  }
  void relu_backward(TensorRef dx, TensorRef y, size_t n) override {
    Timer timer(entries["relu_backward"]);
    inner_->relu_backward(dx, y, n);
  }
  void dropout(TensorRef x, size_t n, const DropoutSpec& spec) override {
    Timer timer(entries["dropout"]);
    inner_->dropout(x, n, spec);
  }
  void residual_add(TensorRef y, TensorRef x, TensorRef b, size_t n, const DropoutSpec& spec) override {
    Timer timer(entries["residual_add"]);
    inner_->residual_add(y, x, b, n, spec);
  }
  void copy(TensorRef dst, TensorRef src, size_t n) override {
    Timer timer(entries["copy"]);
    inner_->copy(dst, src, n);
  }
  double lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                      int64_t V, float grad_scale, float* dh, float* dw, float* db, float* row_loss, float* scratch,
                      int64_t chunk_rows) override {
    Timer timer(entries["lm_head_loss"]);
    return inner_->lm_head_loss(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, row_loss, scratch, chunk_rows);
  }
  double sum_squares(const float* x, size_t n) override {
    Timer timer(entries["sum_squares"]);
    return inner_->sum_squares(x, n);
  }
  void scale(float* x, size_t n, float factor) override {
    Timer timer(entries["scale"]);
    inner_->scale(x, n, factor);
  }
  void fill(float* x, size_t n, float value) override {
    Timer timer(entries["fill"]);
    inner_->fill(x, n, value);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, const std::vector<UpdateSegment>& segments,
                    float lr, float beta1, float beta2, float eps, int64_t t) override {
    Timer timer(entries["adamw_update"]);
    inner_->adamw_update(params, grads, m, v, segments, lr, beta1, beta2, eps, t);
  }
  void adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                      float lr) override {
    Timer timer(entries["adagrad_update"]);
    inner_->adagrad_update(params, grads, acc, segments, lr);
  }

 private:
  struct Timer {
    Entry& e;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    explicit Timer(Entry& entry) : e(entry) {}
    ~Timer() {
      ++e.calls;
      e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  };
  std::unique_ptr<Ops> inner_;
};

}  // namespace

std::unique_ptr<Ops> make_profiled_ops(std::unique_ptr<Ops> inner) {
  return std::make_unique<ProfiledOps>(std::move(inner));
}

std::string profile_report(const Ops& ops) {
  const auto* p = dynamic_cast<const ProfiledOps*>(&ops);
  if (!p) return "";
  std::vector<std::pair<std::string, ProfiledOps::Entry>> rows(p->entries.begin(), p->entries.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "op                      calls    seconds   share\n";
  char line[128];
  for (const auto& [name, e] : rows) {
    std::snprintf(line, sizeof line, "%-22s %6ld %10.3f %6.1f%%\n", name.c_str(), e.calls, e.seconds,
                  total > 0 ? 100.0 * e.seconds / total : 0.0);
    out += line;
  }
  return out;
}

}  // namespace ctrl
