// step_products: times the ops of one training step that hold its matrix
// products, one op at a time, through a backend (cpu, or cuda in a CUDA
// build), with the operand types model.cpp gives them at the config's
// precision: a layer's four linear layers, its attention, and the output head
// fused with the loss. Each is timed forward alone and forward plus backward.
// A whole-step profile says which op takes the time; this says whether that
// op is slow in itself, shape by shape, and, beside bench/pytorch_products.py
// (the same shapes in PyTorch on the same device; bench/products_vs_pytorch.sh
// runs both), by how much against the peer.
//
// Usage: step_products --config PRESET|FILE [--set key=value]... [--device cpu|cuda[:N]]
//                      [--threads N] [--seconds S] [--json]
// The micro-batch and precision come from the config (--set train.micro_batch=32
// --set train.precision=bf16). Each op runs twice untimed, then three rounds of
// calls of about S seconds each (default 0.2); the fastest round counts.
// FLOPs count full products (attention's T×T ones too, masked half and all).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/error.h"
#include "core/sysinfo.h"
#include "model/config.h"
#include "model/layout.h"
#include "ops/ops.h"

namespace {

using namespace ctrl;

const char* kUsage =
    "usage: step_products --config PRESET|FILE [--set key=value]... [--device cpu|cuda[:N]] [--threads N]\n"
    "                     [--seconds S] [--json]";

// Seconds per call of `op`: after two untimed calls (the second sizing the
// rounds), the fastest of three rounds of about `seconds` each.
double time_per_call(Ops& ops, const std::function<void()>& op, double seconds) {
  using clock = std::chrono::steady_clock;
  op();
  ops.synchronize();
  auto start = clock::now();
  op();
  ops.synchronize();
  const double once = std::chrono::duration<double>(clock::now() - start).count();
  const int calls = int(std::clamp(seconds / std::max(once, 1e-7), 1.0, 100000.0));
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    start = clock::now();
    for (int i = 0; i < calls; ++i) op();
    ops.synchronize();
    best = std::min(best, std::chrono::duration<double>(clock::now() - start).count() / calls);
  }
  return best;
}

int run(int argc, char** argv) {
  cli::Args args = cli::Args::tool("step_products", std::string(kUsage) + "\n");
  for (const char* name : {"config", "device", "threads", "seconds"}) args.flag(name);
  args.repeated("set");
  args.boolean("json");
  if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
  const std::string config_name = args.require("config"), device = args.get("device", "cpu");
  const int threads = int(args.get_int("threads", 0, 1, 4096));
  const double seconds = args.get_double("seconds", 0.2, 0.001, 60);
  const bool json = args.has("json");
  Config config = load_config(config_name);
  for (const auto& s : args.all("set")) apply_override(config, s);
  validate(config);
  const auto& m = config.model;
  const int64_t B = config.train.micro_batch, T = m.n_ctx, N = B * T, D = m.d_model, F = m.d_ff, V = m.vocab_size,
                H = m.n_head;
  const std::string& precision = config.train.precision;
  auto ops = make_ops(device, threads);
  std::string products = precision;
  if (precision == "bf16" && ops->gpu() < 0) {  // the CPU's bf16 path, chosen as ctrl train chooses it
    ops->choose_bf16_products(config.train.cpu_bf16, 0.2);
    products = "bf16, " + ops->bf16_path() + " products";
  }
  // model.cpp's types: `low` feeds the products, `inner` is a layer's inner gradients.
  const DType low = activation_dtype(precision), inner = low == DType::BF16 ? DType::BF16 : DType::F32;

  // Buffers big enough for every op below (fp32 runs take the fp32 ones as `low`),
  // filled from one fp32 upload that the backend converts.
  const int64_t widest = std::max({3 * D, F}), weights = std::max({3 * D * D, F * D, V * D});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-0.05f, 0.05f);
  const size_t most = size_t(std::max(N * widest, weights));
  std::vector<float> host(most);
  for (float& v : host) v = uniform(rng);
  DeviceArray<float> staging(*ops, most, "staging");
  ops->upload(staging.data(), host.data(), most * sizeof(float));
  std::vector<DeviceArray<float>> owned;
  auto buffer = [&](DType t, int64_t n, const char* name) {
    owned.emplace_back(*ops, size_t(n), name);
    const TensorRef ref(owned.back().data(), t);
    ops->copy(ref, staging.data(), size_t(n));
    return ref;
  };
  const TensorRef x = buffer(low, N * widest, "x"), w = buffer(low, weights, "w"),
                  out_low = buffer(low, N * widest, "out"), out_f32 = buffer(DType::F32, N * widest, "out (fp32)"),
                  g_low = buffer(inner, N * widest, "dout"), g_f32 = buffer(DType::F32, N * widest, "dout (fp32)"),
                  din_low = buffer(inner, N * widest, "din"), din_f32 = buffer(DType::F32, N * widest, "din (fp32)"),
                  dw = buffer(DType::F32, weights, "dw"), bias = buffer(DType::F32, std::max(widest, V), "b"),
                  db = buffer(DType::F32, std::max(widest, V), "db");
  auto of = [](DType t, TensorRef low_ref, TensorRef f32_ref) { return t == DType::F32 ? f32_ref : low_ref; };

  nlohmann::json rows = nlohmann::json::array();
  auto add_row = [&](const std::string& op, const std::string& shape, double forward_flops,
                     const std::function<void()>& forward, const std::function<void()>& backward) {
    const double f = time_per_call(*ops, forward, seconds), b = time_per_call(*ops, backward, seconds);
    rows.push_back({{"op", op},
                    {"shape", shape},
                    {"forward_s", f},
                    {"total_s", f + b},
                    {"forward_flops", forward_flops},
                    {"total_flops", 3 * forward_flops}});
  };
  const auto dims = [](std::initializer_list<int64_t> v) {
    std::string s;
    for (int64_t d : v) {
      if (!s.empty()) s += 'x';
      s += std::to_string(d);
    }
    return s;
  };
  // The four linear layers as model.cpp calls them: out of the forward, din and dout of the backward.
  struct Linear {
    const char* name;
    int64_t Dout, Din;
    DType out, din, dout;
  };
  for (const Linear& c : {Linear{"qkv", 3 * D, D, low, DType::F32, inner},
                          Linear{"attention output", D, D, DType::F32, inner, DType::F32},
                          Linear{"feed-forward in", F, D, low, DType::F32, inner},
                          Linear{"feed-forward out", D, F, DType::F32, inner, DType::F32}}) {
    const TensorRef out = of(c.out, out_low, out_f32), din = of(c.din, din_low, din_f32),
                    dout = of(c.dout, g_low, g_f32);
    add_row(
        c.name, dims({N, c.Dout, c.Din}), 2.0 * double(N * c.Dout) * double(c.Din),
        [&] { ops->linear_forward(out, x, w, bias.f32(), N, c.Dout, c.Din); },
        [&] { ops->linear_backward(din, dw.f32(), db.f32(), dout, x, w, N, c.Dout, c.Din, false); });
  }
  {  // attention: qkv [B, T, 3D] -> [B, T, D], keeping what the backend keeps for the backward
    DeviceArray<float> saved(*ops, (ops->attention_saved_bytes(B, T, D, H, low) + 3) / 4, "attention saved");
    const TensorRef keep(saved.data(), low);
    add_row(
        "attention", dims({B, H, T, T, D / H}), 4.0 * double(B * T) * double(T * D),
        [&] { ops->attention_forward(out_low, keep, x, B, T, D, H); },
        [&] { ops->attention_backward(din_low, g_low, x, out_low, keep, B, T, D, H); });
  }
  {  // the output head and loss over the model's row chunks: forward alone (no dh), then with the backward
    const int64_t chunk_rows = std::min(N, kHeadChunkRows);
    DeviceArray<float> scratch(*ops, size_t(chunk_rows * head_row_stride(V)), "logits");
    DeviceArray<double> loss(*ops, 1, "loss");
    DeviceArray<int32_t> targets(*ops, size_t(N), "targets");
    std::vector<int32_t> ids(static_cast<size_t>(N));
    for (auto& id : ids) id = int32_t(rng() % uint32_t(V));
    ops->upload(targets.data(), ids.data(), ids.size() * sizeof(int32_t));
    auto head = [&](float* dh) {
      ops->lm_head_loss(x, w, bias.f32(), targets.data(), N, D, V, 1.0f / float(N), dh, dh ? dw.f32() : nullptr,
                        dh ? db.f32() : nullptr, loss.data(), nullptr, scratch.data(), chunk_rows);
    };
    const auto forward = [&] { head(nullptr); };
    const auto both = [&] { head(din_f32.f32()); };
    const double f = time_per_call(*ops, forward, seconds), total = time_per_call(*ops, both, seconds);
    const double flops = 2.0 * double(N * D) * double(V);
    rows.push_back({{"op", "output head and loss"},
                    {"shape", dims({N, V, D})},
                    {"forward_s", f},
                    {"total_s", total},
                    {"forward_flops", flops},
                    {"total_flops", 3 * flops}});
  }

  const std::string hardware =
      ops->gpu() >= 0 ? ops->gpu_name() : cpu_model() + ", " + std::to_string(ops->threads()) + " threads";
  if (json) {
    const nlohmann::json doc = {{"program", "step_products"},
                                {"preset", config.preset},
                                {"precision", precision},
                                {"products", products},
                                {"device", device},
                                {"hardware", hardware},
                                {"micro_batch", B},
                                {"T", T},
                                {"rows", rows}};
    std::printf("%s\n", doc.dump(1).c_str());
    return 0;
  }
  std::printf("step_products: %s, %s, %lld x %lld tokens, %s on %s\n", config.preset.c_str(), products.c_str(),
              (long long)B, (long long)T, device.c_str(), hardware.c_str());
  std::printf("%-22s %-22s %11s %9s %11s %9s\n", "op", "shape", "forward ms", "TFLOP/s", "+backward", "TFLOP/s");
  for (const auto& r : rows) {
    const double f = r["forward_s"].get<double>(), t = r["total_s"].get<double>();
    std::printf("%-22s %-22s %11.3f %9.3f %11.3f %9.3f\n", r["op"].get<std::string>().c_str(),
                r["shape"].get<std::string>().c_str(), f * 1e3, r["forward_flops"].get<double>() / f / 1e12, t * 1e3,
                r["total_flops"].get<double>() / t / 1e12);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ctrl::cli::run_tool(argc, argv, run); }
