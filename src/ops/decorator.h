// An Ops that forwards every call to an inner backend, with hooks around each
// op: the base of ProfiledOps (timing) and the checked backend (memory
// protection, argument checks), so that a new op is forwarded in one place.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"

namespace ctrl {

class OpsDecorator : public Ops {
 public:
  explicit OpsDecorator(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return inner_->name(); }
  int threads() const override { return inner_->threads(); }
  double measure_peak_gflops(bool bf16, double seconds) override { return inner_->measure_peak_gflops(bf16, seconds); }
  std::string between_steps() override { return inner_->between_steps(); }
  std::string between_tokens() override { return inner_->between_tokens(); }
  std::string precision_note(DType low) const override { return inner_->precision_note(low); }
  Bf16Choice choose_bf16_products(const std::string& setting, double seconds) override {
    return inner_->choose_bf16_products(setting, seconds);
  }
  std::string bf16_path() const override { return inner_->bf16_path(); }
  void* allocate(size_t bytes, const char* name) override { return inner_->allocate(bytes, name); }
  void release(void* p) override { inner_->release(p); }
  void upload(void* dst, const void* host_src, size_t bytes) override {
    Scope s(*this, "upload");
    argument(dst, "upload", "dst");
    inner_->upload(dst, host_src, bytes);
  }
  void download(void* host_dst, const void* src, size_t bytes) override {
    Scope s(*this, "download");
    argument(src, "download", "src");
    inner_->download(host_dst, src, bytes);
  }
  void synchronize() override { inner_->synchronize(); }
  void begin_host_access(const void* p) override { inner_->begin_host_access(p); }
  void end_host_access(const void* p) override { inner_->end_host_access(p); }
  bool host_memory() const override { return inner_->host_memory(); }
  uint64_t peak_device_bytes() const override { return inner_->peak_device_bytes(); }
  uint64_t device_room_bytes() const override { return inner_->device_room_bytes(); }
  int gpu() const override { return inner_->gpu(); }
  void* work_queue() const override { return inner_->work_queue(); }
  int timer_mark() override { return inner_->timer_mark(); }
  double timer_seconds(int from, int to) override { return inner_->timer_seconds(from, to); }
  void timer_reset() override { inner_->timer_reset(); }
  std::string gpu_name() const override { return inner_->gpu_name(); }
  std::string gpu_uuid() const override { return inner_->gpu_uuid(); }

  void linear_forward(TensorRef out, TensorRef in, TensorRef w, const float* b, int64_t N, int64_t Dout,
                      int64_t Din) override {
    Scope s(*this, "linear_forward");
    args("linear_forward", {{out.data, "out"}, {in.data, "in"}, {w.data, "w"}, {b, "b"}});
    inner_->linear_forward(out, in, w, b, N, Dout, Din);
  }
  void linear_backward(TensorRef din, float* dw, float* db, TensorRef dout, TensorRef in, TensorRef w, int64_t N,
                       int64_t Dout, int64_t Din, bool accumulate_din) override {
    Scope s(*this, "linear_backward");
    args("linear_backward",
         {{din.data, "din"}, {dw, "dw"}, {db, "db"}, {dout.data, "dout"}, {in.data, "in"}, {w.data, "w"}});
    inner_->linear_backward(din, dw, db, dout, in, w, N, Dout, Din, accumulate_din);
  }
  void layernorm_forward(TensorRef out, float* mean, float* rstd, TensorRef in, const float* gamma, const float* beta,
                         int64_t N, int64_t D, float eps) override {
    Scope s(*this, "layernorm_forward");
    args("layernorm_forward",
         {{out.data, "out"}, {mean, "mean"}, {rstd, "rstd"}, {in.data, "in"}, {gamma, "gamma"}, {beta, "beta"}});
    inner_->layernorm_forward(out, mean, rstd, in, gamma, beta, N, D, eps);
  }
  void layernorm_backward(TensorRef din, float* dgamma, float* dbeta, TensorRef dout, TensorRef in, const float* mean,
                          const float* rstd, const float* gamma, int64_t N, int64_t D) override {
    Scope s(*this, "layernorm_backward");
    args("layernorm_backward", {{din.data, "din"},
                                {dgamma, "dgamma"},
                                {dbeta, "dbeta"},
                                {dout.data, "dout"},
                                {in.data, "in"},
                                {mean, "mean"},
                                {rstd, "rstd"},
                                {gamma, "gamma"}});
    inner_->layernorm_backward(din, dgamma, dbeta, dout, in, mean, rstd, gamma, N, D);
  }
  void attention_forward(TensorRef out, TensorRef saved, TensorRef qkv, int64_t B, int64_t T, int64_t D,
                         int64_t H) override {
    Scope s(*this, "attention_forward");
    args("attention_forward", {{out.data, "out"}, {saved.data, "saved"}, {qkv.data, "qkv"}});
    inner_->attention_forward(out, saved, qkv, B, T, D, H);
  }
  void attention_backward(TensorRef dqkv, TensorRef dout, TensorRef qkv, TensorRef out, TensorRef saved, int64_t B,
                          int64_t T, int64_t D, int64_t H) override {
    Scope s(*this, "attention_backward");
    args("attention_backward",
         {{dqkv.data, "dqkv"}, {dout.data, "dout"}, {qkv.data, "qkv"}, {out.data, "out"}, {saved.data, "saved"}});
    inner_->attention_backward(dqkv, dout, qkv, out, saved, B, T, D, H);
  }
  size_t attention_saved_bytes(int64_t B, int64_t T, int64_t D, int64_t H, DType qkv_type) const override {
    return inner_->attention_saved_bytes(B, T, D, H, qkv_type);
  }
  void embedding_forward(TensorRef x, const int32_t* tokens, const float* w, int64_t B, int64_t T, int64_t D,
                         float scale) override {
    Scope s(*this, "embedding_forward");
    args("embedding_forward", {{x.data, "x"}, {tokens, "tokens"}, {w, "w"}});
    inner_->embedding_forward(x, tokens, w, B, T, D, scale);
  }
  void embedding_backward(float* dw, TensorRef dx, const int32_t* tokens, int64_t B, int64_t T, int64_t D,
                          float scale) override {
    Scope s(*this, "embedding_backward");
    args("embedding_backward", {{dw, "dw"}, {dx.data, "dx"}, {tokens, "tokens"}});
    inner_->embedding_backward(dw, dx, tokens, B, T, D, scale);
  }
  void embedding_at(float* x, int32_t token, int64_t position, const float* w, int64_t D, float scale) override {
    Scope s(*this, "embedding_at");
    args("embedding_at", {{x, "x"}, {w, "w"}});
    inner_->embedding_at(x, token, position, w, D, scale);
  }
  void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t D,
                        int64_t H) override {
    Scope s(*this, "attention_decode");
    args("attention_decode", {{out, "out"}, {q, "q"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}});
    inner_->attention_decode(out, q, k_cache, v_cache, n, D, H);
  }
  void relu_forward(TensorRef x, size_t n) override {
    Scope s(*this, "relu_forward");
    args("relu_forward", {{x.data, "x"}});
    inner_->relu_forward(x, n);
  }
  void relu_backward(TensorRef dx, TensorRef y, size_t n) override {
    Scope s(*this, "relu_backward");
    args("relu_backward", {{dx.data, "dx"}, {y.data, "y"}});
    inner_->relu_backward(dx, y, n);
  }
  void dropout(TensorRef x, size_t n, const DropoutSpec& spec) override {
    Scope s(*this, "dropout");
    args("dropout", {{x.data, "x"}});
    inner_->dropout(x, n, spec);
  }
  void residual_add(TensorRef y, TensorRef x, TensorRef b, size_t n, const DropoutSpec& spec) override {
    Scope s(*this, "residual_add");
    args("residual_add", {{y.data, "y"}, {x.data, "x"}, {b.data, "b"}});
    inner_->residual_add(y, x, b, n, spec);
  }
  void copy(TensorRef dst, TensorRef src, size_t n) override {
    Scope s(*this, "copy");
    args("copy", {{dst.data, "dst"}, {src.data, "src"}});
    inner_->copy(dst, src, n);
  }
  void lm_head_loss(TensorRef h, TensorRef w, const float* b, const int32_t* targets, int64_t N, int64_t D,
                    int64_t V, float grad_scale, float* dh, float* dw, float* db, double* loss_sum, float* row_loss,
                    float* scratch, int64_t chunk_rows) override {
    Scope s(*this, "lm_head_loss");
    args("lm_head_loss", {{h.data, "h"},
                          {w.data, "w"},
                          {b, "b"},
                          {targets, "targets"},
                          {dh, "dh"},
                          {dw, "dw"},
                          {db, "db"},
                          {loss_sum, "loss_sum"},
                          {row_loss, "row_loss"},
                          {scratch, "scratch"}});
    inner_->lm_head_loss(h, w, b, targets, N, D, V, grad_scale, dh, dw, db, loss_sum, row_loss, scratch, chunk_rows);
  }
  void lm_head_distill(TensorRef h, TensorRef w, const float* b, const int32_t* targets, const TeacherHead& teacher,
                       int64_t N, int64_t D, int64_t V, float alpha, float temperature, float grad_scale, float* dh,
                       float* dw, float* db, double* loss_sum, double* kl_sum, float* scratch,
                       int64_t chunk_rows) override {
    Scope s(*this, "lm_head_distill");
    args("lm_head_distill", {{h.data, "h"},
                             {w.data, "w"},
                             {b, "b"},
                             {targets, "targets"},
                             {teacher.h.data, "teacher.h"},
                             {teacher.w.data, "teacher.w"},
                             {teacher.b, "teacher.b"},
                             {teacher.scratch, "teacher.scratch"},
                             {dh, "dh"},
                             {dw, "dw"},
                             {db, "db"},
                             {loss_sum, "loss_sum"},
                             {kl_sum, "kl_sum"},
                             {scratch, "scratch"}});
    inner_->lm_head_distill(h, w, b, targets, teacher, N, D, V, alpha, temperature, grad_scale, dh, dw, db, loss_sum,
                            kl_sum, scratch, chunk_rows);
  }
  void sum_squares(const float* x, size_t n, double* out) override {
    Scope s(*this, "sum_squares");
    args("sum_squares", {{x, "x"}, {out, "out"}});
    inner_->sum_squares(x, n, out);
  }
  void clip_factor(const double* sum_squares, double loss_scale, double max_norm, float* factor) override {
    Scope s(*this, "clip_factor");
    args("clip_factor", {{sum_squares, "sum_squares"}, {factor, "factor"}});
    inner_->clip_factor(sum_squares, loss_scale, max_norm, factor);
  }
  void scale(float* x, size_t n, float factor) override {
    Scope s(*this, "scale");
    args("scale", {{x, "x"}});
    inner_->scale(x, n, factor);
  }
  void fill(float* x, size_t n, float value) override {
    Scope s(*this, "fill");
    args("fill", {{x, "x"}});
    inner_->fill(x, n, value);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, const std::vector<UpdateSegment>& segments,
                    float lr, float beta1, float beta2, float eps, int64_t t, const float* grad_factor) override {
    Scope s(*this, "adamw_update");
    args("adamw_update", {{params, "params"}, {grads, "grads"}, {m, "m"}, {v, "v"}, {grad_factor, "grad_factor"}});
    inner_->adamw_update(params, grads, m, v, segments, lr, beta1, beta2, eps, t, grad_factor);
  }
  void adagrad_update(float* params, const float* grads, float* acc, const std::vector<UpdateSegment>& segments,
                      float lr, const float* grad_factor) override {
    Scope s(*this, "adagrad_update");
    args("adagrad_update", {{params, "params"}, {grads, "grads"}, {acc, "acc"}, {grad_factor, "grad_factor"}});
    inner_->adagrad_update(params, grads, acc, segments, lr, grad_factor);
  }

 protected:
  // Called around every op and copy (enter, then leave as the call returns or throws).
  virtual void enter(const char* op) {}
  virtual void leave(const char* op) {}
  // Called for every pointer argument that must be backend memory (null ones too).
  virtual void argument(const void* p, const char* op, const char* what) {}
  Ops& inner() { return *inner_; }

 private:
  struct Scope {
    OpsDecorator& d;
    const char* op;
    Scope(OpsDecorator& decorator, const char* name) : d(decorator), op(name) { d.enter(op); }
    ~Scope() { d.leave(op); }
  };
  void args(const char* op, std::initializer_list<std::pair<const void*, const char*>> list) {
    for (const auto& [p, what] : list) argument(p, op, what);
  }
  std::unique_ptr<Ops> inner_;
};

}  // namespace ctrl
