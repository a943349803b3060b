// The planner: its byte counts are the engine's allocations, its CPU total
// predicts a real run's peak memory, and its answers behave (fits, largest
// micro-batch, ZeRO, calibration, communication, errors).
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sysinfo.h"
#include "model/layout.h"
#include "model/model.h"
#include "ops/cpu/gemm.h"
#include "plan/plan.h"
#include "test_support.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/synthetic_steps.h"

using namespace ctrl;

// Counts the bytes the engine's buffers (Buffer, Buffer16) request
// (std::aligned_alloc) while a Model and Optimizer are constructed. The definition here takes the place of
// libc's in this binary and forwards to memalign.
static std::atomic<bool> g_counting{false};
static std::atomic<uint64_t> g_counted{0};
extern "C" void* aligned_alloc(size_t alignment, size_t size) {
  if (g_counting) g_counted += size;
  return memalign(alignment, size);
}

namespace {

Config config_of(const std::string& preset, std::vector<std::string> sets = {}) {
  Config c = load_config(preset);
  for (const auto& s : sets) apply_override(c, s);
  validate(c);
  return c;
}

plan::Request gpu_request(const Config& c, const std::string& gpu, int gpus, double tokens = 10e9) {
  plan::Request r;
  r.config = c;
  r.tokens = tokens;
  r.gpu = gpu;
  r.gpus_per_node = gpus;
  return r;
}

plan::Request cpu_request(const Config& c, double memory_gib) {
  plan::Request r;
  r.config = c;
  r.tokens = 1e8;
  r.cpu_memory_bytes = uint64_t(memory_gib * double(1ull << 30));
  r.cpu_peak_gflops = 400;
  return r;
}

int run(const std::string& cmd, std::string* out) { return test_support::run_shell(cmd, out); }

// A teacher's run directory: one step of `ctrl train --config CONFIG` (a
// preset and its --set flags) on synthetic tokens, its output in *trained; a
// test failure when training fails. Its checkpoint is dir + kTeacherCheckpoint.
const char* const kTeacherCheckpoint = "/checkpoints/step-00000001.ckpt";
std::string trained_teacher(const std::string& name, const std::string& config, std::string* trained) {
  const std::string dir = test_support::fresh_dir("ctrl_test", name);
  EXPECT_EQ(
      run(test_support::ctrl_binary() + " train --config " + config + " --out " + dir + " --set train.steps=1 2>&1",
          trained),
      0)
      << *trained;
  return dir;
}

// Independent closed form of a CTRL model's parameters (Hugging Face
// CTRLLMHeadModel: tied embedding, biased q/k/v/dense and FFN, two LayerNorms
// per layer, final LayerNorm, lm_head bias).
uint64_t ctrl_parameters(uint64_t V, uint64_t L, uint64_t D, uint64_t F) {
  return V * D + L * (4 * D * D + 4 * D + 2 * D * F + F + D + 4 * D) + 2 * D + V;
}

}  // namespace

TEST(Plan, ParameterCountsOfThePresets) {
  EXPECT_EQ(plan::make_plan(cpu_request(config_of("tiny"), 24)).parameters, ctrl_parameters(8000, 4, 256, 1024));
  EXPECT_EQ(plan::make_plan(cpu_request(config_of("small"), 24)).parameters, ctrl_parameters(32000, 6, 384, 1536));
  EXPECT_EQ(plan::make_plan(cpu_request(config_of("base"), 24)).parameters, ctrl_parameters(32000, 12, 768, 3072));
  const uint64_t n = plan::make_plan(gpu_request(config_of("ctrl"), "A100-80GB", 8)).parameters;
  EXPECT_EQ(n, ctrl_parameters(246534, 48, 1280, 8192));
  EXPECT_EQ(n, 1637964550u);  // "1.63 billion parameters" (Keskar et al. 2019)
}

TEST(Plan, SharedParametersCountOnceAndRecomputationCostsTime) {
  const uint64_t V = 32000, L = 12, D = 768, F = 3072;
  const uint64_t attention = 4 * D * D + 4 * D + 2 * D, ffn = 2 * D * F + F + D + 2 * D;
  auto count = [](const Config& c) { return plan::make_plan(cpu_request(c, 24)).parameters; };
  EXPECT_EQ(count(config_of("base", {"model.sharing=all"})), V * D + attention + ffn + 2 * D + V);
  EXPECT_EQ(count(config_of("base", {"model.sharing=attention"})), V * D + attention + L * ffn + 2 * D + V);
  EXPECT_EQ(count(config_of("base", {"model.sharing=ffn"})), V * D + L * attention + ffn + 2 * D + V);
  // Recomputation saves activation memory and costs time; model FLOPs stay the same.
  const plan::Plan none = plan::make_plan(gpu_request(config_of("base"), "A100-40GB", 1));
  const plan::Plan layers = plan::make_plan(gpu_request(config_of("base", {"model.recompute=layers"}), "A100-40GB", 1));
  EXPECT_GT(layers.largest_micro_batch, 2 * none.largest_micro_batch);
  EXPECT_EQ(layers.flops_per_token, none.flops_per_token);
  EXPECT_GT(layers.hardware_flops_per_token, none.flops_per_token);
  EXPECT_EQ(none.hardware_flops_per_token, none.flops_per_token);
  EXPECT_NEAR(layers.hours_no_overlap / none.hours_no_overlap,
              layers.hardware_flops_per_token / none.flops_per_token, 1e-9);
}

TEST(Plan, PredictedBuffersEqualTheEnginesAllocationExactly) {
  auto ops = test_support::make_cpu_reference();  // counts the CPU backend's aligned_alloc calls
  struct Case {
    const char* preset;
    std::vector<std::string> sets;
    int64_t batch;
  };
  const std::vector<Case> cases = {
      {"tiny", {}, 3},
      {"tiny", {"train.optimizer=adagrad", "model.n_ctx=64", "model.vocab_size=1001"}, 5},
      {"small", {"model.n_layer=2"}, 2},
      {"tiny", {"model.d_model=96", "model.n_head=3", "model.d_ff=200", "model.n_ctx=37"}, 7},
      {"tiny", {"model.sharing=all", "model.recompute=cheap"}, 4},
      {"tiny", {"model.sharing=attention", "model.embedding_dim=64", "model.recompute=layers"}, 3},
      {"small", {"model.sharing=ffn", "model.n_layer=3", "train.optimizer=adagrad"}, 2},
      {"tiny", {"train.precision=bf16"}, 3},
      {"tiny", {"train.precision=bf16", "model.recompute=cheap", "model.n_ctx=37"}, 2},
      {"tiny", {"train.precision=bf16", "model.recompute=layers", "model.embedding_dim=64"}, 3},
      {"tiny", {"train.precision=fp16", "model.sharing=attention"}, 4},
  };
  for (const auto& k : cases) {
    const Config c = config_of(k.preset, k.sets);
    g_counted = 0;
    g_counting = true;
    uint64_t optimizer_floats = 0;
    {
      Model model(c.model, *ops, k.batch, activation_dtype(c.train.precision));
      Optimizer optimizer(c.train, model.layout(), *ops);
      g_counting = false;
      for (auto& [name, buffer] : optimizer.state()) optimizer_floats += buffer->size();
      const plan::Memory m = plan::memory_for(c, k.batch, 1, 0);
      EXPECT_EQ(m.weights, model.params.size() * 4);
      EXPECT_EQ(m.grads, model.grads.size() * 4);
      EXPECT_EQ(m.optimizer, optimizer_floats * 4) << c.train.optimizer;
      EXPECT_EQ(m.activations + m.workspace, model.activation_layout().total * 4);
    }
    g_counting = false;
    EXPECT_GT(g_counted.load(), 0u);
    EXPECT_EQ(g_counted.load(), plan::engine_buffer_bytes(c, k.batch))
        << k.preset << " B=" << k.batch << " " << c.train.precision;
  }
}

// A distillation teacher: what the trainer allocates for it (forward only, no gradients, one layer's
// activations at a time, the student's precision and micro-batch) is Memory::teacher exactly, and
// its forward pass joins the executed FLOPs of every step.
TEST(Plan, TeacherMemoryEqualsTheEnginesAllocationAndItsForwardCountsInTheFlops) {
  auto ops = test_support::make_cpu_reference();
  const Config teacher = config_of("tiny", {"model.n_layer=3", "model.n_ctx=64"});
  for (const auto& sets : std::vector<std::vector<std::string>>{
           {"model.n_layer=2", "model.n_ctx=64"}, {"train.precision=bf16", "model.d_model=128", "model.n_head=2", "model.n_ctx=64"},
           {"model.sharing=all", "model.embedding_dim=64", "model.n_ctx=32"}}) {
    const Config student = config_of("tiny", sets);
    g_counted = 0;
    g_counting = true;
    {
      Model t(plan::teacher_forward_config(teacher.model), *ops, 3, activation_dtype(student.train.precision), false);
      g_counting = false;
      EXPECT_EQ(t.grads.size(), 0u);
    }
    g_counting = false;
    const plan::Memory m = plan::memory_for(student, 3, 1, 0, &teacher.model);
    EXPECT_EQ(g_counted.load(), m.teacher) << sets[0];
    EXPECT_EQ(m.buffers(), plan::memory_for(student, 3, 1, 0).buffers() + m.teacher);
    EXPECT_LT(m.teacher, plan::memory_for(teacher, 3, 1, 0).buffers()) << "no gradients, optimizer or saved layers";
  }
  plan::Request r = cpu_request(config_of("tiny", {"model.n_layer=2"}), 24);
  const plan::Plan without = plan::make_plan(r);
  r.teacher = teacher.model;
  const plan::Plan with = plan::make_plan(r);
  EXPECT_DOUBLE_EQ(with.teacher_flops_per_token, train_flops_per_token(teacher.model) / 3);
  EXPECT_DOUBLE_EQ(with.hardware_flops_per_token, without.hardware_flops_per_token + with.teacher_flops_per_token);
  EXPECT_EQ(with.flops_per_token, without.flops_per_token) << "the model FLOPs (the MFU basis) stay the student's";
  EXPECT_GT(with.memory.teacher, 0u);
  EXPECT_NE(plan::plan_text(with).find("teacher (forward only)"), std::string::npos);
}

// A GPU plan counts the CUDA backend's own scratch (the head's larger logits
// chunk, attention's head-layout copies and scores, cuBLASLt's workspace, ...)
// beside the layout's buffers. The peaks are `ctrl bench --device cuda`'s
// peak_device_bytes, measured on an NVIDIA H200 at 492cd7b
// (bench/results/gpu-h200-2026-12-04.md); the CUDA backend's scratch policy
// has not changed since. Without the scratch the plan was 6-83% short.
TEST(Plan, GpuPlanCountsTheCudaBackendsScratchAsAnH200Measured) {
  struct Run {
    const char* preset;
    const char* precision;
    int micro_batch;
    uint64_t measured;
  };
  for (const Run& r : {Run{"tiny", "fp32", 16, 355663528}, Run{"tiny", "bf16", 16, 325464360},
                       Run{"small", "fp32", 8, 1078189992}, Run{"small", "bf16", 8, 1085330856},
                       Run{"base", "bf16", 8, 3156071592}, Run{"base", "bf16", 32, 5318661800},
                       Run{"medium", "bf16", 32, 13556086952}}) {
    const std::string mb = std::to_string(r.micro_batch);
    const Config c = config_of(r.preset, {std::string("train.precision=") + r.precision, "train.micro_batch=" + mb,
                                          "train.global_batch=" + mb});
    const uint64_t layout = plan::memory_for(c, r.micro_batch, 1, 0).buffers();
    const uint64_t predicted = plan::gpu_buffer_bytes(c, r.micro_batch);  // what ctrl bench prints beside its peak
    EXPECT_NEAR(double(predicted) / double(r.measured), 1.0, 0.005)
        << r.preset << " " << r.precision << " B" << r.micro_batch << ": predicted " << predicted << ", measured "
        << r.measured << ", the layout alone " << layout;
  }
}

// On a GPU: what `ctrl bench` measures against what it prints as the plan's,
// in every precision (the seven runs above were fp32 and bf16; fp16 keeps a
// loss scaler and fp16 copies, and never ran when this was written).
TEST(Plan, GpuBenchsPeakDeviceMemoryIsWhatThePlanCounts) {
  if (!test_support::test_backend_is_gpu())
    GTEST_SKIP() << "a GPU run's peak device memory: needs CTRL_DEVICE=cuda and a GPU";
  for (const std::string precision : {"fp32", "bf16", "fp16"}) {
    std::string out;
    ASSERT_EQ(run(test_support::ctrl_binary() + " bench --device cuda --config tiny --steps 1 --warmup 0 --json" +
                      " --set train.precision=" + precision,
                  &out),
              0)
        << out;
    const auto j = nlohmann::json::parse(out);
    const double measured = j.at("peak_device_bytes").get<double>(),
                 planned = j.at("planned_peak_device_bytes").get<double>();
    const Config c = config_of("tiny", {"train.precision=" + precision});
    EXPECT_EQ(planned, double(plan::gpu_buffer_bytes(c, c.train.micro_batch))) << precision;
    EXPECT_NEAR(measured / planned, 1.0, 0.005) << precision << ": measured " << measured << ", planned " << planned;
  }
}

// `ctrl train` on a GPU holds the engine's buffers to the GPU's memory, not
// the host's: one sequence past what the device has room for is refused
// before the run directory is made, naming the GPU memory it needs.
TEST(Plan, AGpuRunIsHeldToTheGpusMemory) {
  if (!test_support::test_backend_is_gpu())
    GTEST_SKIP() << "a GPU run's memory check: needs CTRL_DEVICE=cuda and a GPU";
  const uint64_t room = make_ops("cuda")->device_room_bytes();
  ASSERT_GT(room, uint64_t(1) << 30);
  const Config c = config_of("medium", {"train.precision=bf16", "train.device=cuda"});
  const int64_t fits = plan::largest_micro_batch([&](int64_t b) { return plan::gpu_buffer_bytes(c, b) <= room; });
  ASSERT_GE(fits, 1);
  const std::string b = std::to_string(fits + 1), dir = test_support::fresh_dir("ctrl_plan", "gpu_room");
  std::string out;
  EXPECT_EQ(run(test_support::ctrl_binary() + " train --config medium --device cuda --set train.precision=bf16" +
                    " --set train.micro_batch=" + b + " --set train.global_batch=" + b + " --out " + dir + " --quiet",
                &out),
            1)
      << out;
  EXPECT_NE(out.find("of GPU memory at micro-batch " + b), std::string::npos) << out;
  EXPECT_NE(out.find("is free on cuda (cudaMemGetInfo"), std::string::npos) << out;
  EXPECT_NE(out.find("the largest micro-batch that fits is "), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

// CTRL_CUDA_ATTENTION=fused: the CUDA backend's fused kernels keep one fp32
// log-sum-exp per row and head instead of the softmax, and their only scratch
// is the backward's row dots instead of the chunk's copies and scores. A GPU
// plan counts what the run will have; a CPU plan, fp32 and heads the kernels
// are not built for keep the softmax.
TEST(Plan, GpuPlanCountsTheFusedAttentionWhereTheRunUsesIt) {
  const Config c = config_of("medium", {"train.precision=bf16", "train.micro_batch=8", "train.global_batch=8"});
  const uint64_t B = 8, T = uint64_t(c.model.n_ctx), D = uint64_t(c.model.d_model), H = uint64_t(c.model.n_head),
                 L = uint64_t(c.model.n_layer);
  ASSERT_EQ(c.model.recompute, "none");
  auto has_note = [](const plan::Plan& p, const std::string& text) {
    return std::any_of(p.notes.begin(), p.notes.end(),
                       [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  const plan::Plan unfused = plan::make_plan(gpu_request(c, "H100-80GB", 1));
  const uint64_t unfused_scratch = plan::gpu_scratch_bytes(c, 8), unfused_buffers = plan::gpu_buffer_bytes(c, 8);
  const uint64_t cpu_unfused = plan::memory_for(c, 8, 1, 0).buffers();
  test_support::ScopedEnv fused_env("CTRL_CUDA_ATTENTION", "fused");
  const plan::Plan fused = plan::make_plan(gpu_request(c, "H100-80GB", 1));

  // Each layer: the bf16 softmax B·H·T·T gives way to B·H·T fp32 (both 64-byte multiples here).
  const uint64_t softmax = B * H * T * T * 2, lse = B * H * T * 4;
  EXPECT_EQ(unfused.memory.activations - fused.memory.activations, L * (softmax - lse));
  // The attention chunk (all 8 sequences: their scores take 32 MiB) keeps q, k, v and their
  // gradients, the output gradient, fp32 scores and bf16 dS; the fused backward only its row dots.
  const uint64_t chunk = B * T * 3 * D * 2 * 2 + B * T * D * 2 + B * H * T * T * (4 + 2);
  EXPECT_EQ(unfused_scratch - plan::gpu_scratch_bytes(c, 8), chunk - B * T * H * 4);
  EXPECT_EQ(fused.memory.gpu_scratch, plan::gpu_scratch_bytes(c, 8));
  EXPECT_EQ(unfused_buffers - plan::gpu_buffer_bytes(c, 8), L * (softmax - lse) + chunk - B * T * H * 4);
  EXPECT_GT(fused.largest_micro_batch, unfused.largest_micro_batch);
  EXPECT_TRUE(has_note(fused, "CTRL_CUDA_ATTENTION=fused: each layer keeps")) << fused.notes.size();
  EXPECT_FALSE(has_note(unfused, "CTRL_CUDA_ATTENTION"));

  // The CPU keeps the softmax whatever the variable says, also for a config that names cuda.
  EXPECT_EQ(plan::memory_for(c, 8, 1, 0).buffers(), cpu_unfused);
  Config names_cuda = c;
  names_cuda.train.device = "cuda";
  const plan::Plan cpu = plan::make_plan(cpu_request(names_cuda, 64));
  EXPECT_EQ(cpu.memory.activations, plan::memory_for(c, cpu.micro_batch, 1, 0).activations);

  // fp32, and bf16 heads of 32 columns: the kernels do not apply, and the plan says why.
  for (const Config& other : {config_of("medium", {"train.precision=fp32"}),
                              config_of("medium", {"train.precision=bf16", "model.n_head=32"})}) {
    const plan::Plan p = plan::make_plan(gpu_request(other, "H100-80GB", 1));
    test_support::ScopedEnv unset("CTRL_CUDA_ATTENTION", nullptr);
    const plan::Plan without = plan::make_plan(gpu_request(other, "H100-80GB", 1));
    EXPECT_EQ(p.memory.total(), without.memory.total()) << other.train.precision << " H" << other.model.n_head;
    EXPECT_TRUE(has_note(p, "CTRL_CUDA_ATTENTION=fused does not apply")) << other.train.precision;
  }

  // Any other value is refused, as the backend refuses it.
  test_support::ScopedEnv bad("CTRL_CUDA_ATTENTION", "flash");
  try {
    plan::make_plan(gpu_request(c, "H100-80GB", 1));
    ADD_FAILURE() << "CTRL_CUDA_ATTENTION=flash was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "CTRL_CUDA_ATTENTION=flash: expected fused or unfused");
  }
}

TEST(Plan, CpuTotalPredictsThePeakMemoryOfARealRunWithin5Percent) {
  if (test_support::test_backend_is_gpu())
    GTEST_SKIP() << "a CPU run's peak host memory: a GPU run keeps its buffers on the GPU";
  // `small` at micro-batch 8: about 0.6-0.8 GiB, one timed step, in fp32 and
  // bf16 at the CPUs' count, and widened bf16 at 16 threads, which tiles the
  // products on a machine with fewer CPUs and adds each thread's runtime and
  // its copies of a tile's operands. Then distillation from a wider, deeper
  // teacher (one step of `ctrl train` on synthetic tokens), whose checkpoint
  // is read and loaded beside the student: its loading once took 1.36-1.40x
  // the plan at its peak (a whole tensor's staging and the file's mapped pages),
  // and its wider products (F 4096 against the student's) once set the widened
  // bf16 scratch 18% above a plan that counted the student's alone.
  std::string trained;
  const std::string dir =
      trained_teacher("plan_teacher", "small --set model.n_layer=8 --set model.d_ff=4096", &trained);
  ASSERT_FALSE(HasFailure());
  const std::string teacher = " --teacher " + dir + kTeacherCheckpoint;
  struct Case {
    const char* precision;
    std::string extra;
  };
  for (const Case& k : {Case{"fp32", ""}, Case{"bf16", ""}, Case{"bf16", " --threads 16 --set train.cpu_bf16=widened"},
                        Case{"fp32", teacher}, Case{"bf16", teacher}}) {
    const std::string precision = k.precision, what = precision + k.extra;
    std::string out;
    ASSERT_EQ(run(test_support::ctrl_binary() +
                      " bench --config small --steps 1 --warmup 0 --json --set train.precision=" + precision + k.extra,
                  &out),
              0)
        << out;
    const auto j = nlohmann::json::parse(out);
    const double rss = j.at("peak_rss_bytes").get<double>();
    Config c = config_of("small", {"train.precision=" + precision});
    if (j.contains("teacher")) c.train.teacher = j.at("teacher").get<std::string>();
    const std::optional<ModelConfig> t = teacher_of(c);
    ASSERT_EQ(t.has_value(), k.extra == teacher) << out;
    const ModelConfig* tm = t ? &*t : nullptr;
    ASSERT_EQ(j.at("micro_batch").get<int64_t>(), c.train.micro_batch);
    // bf16: the path the run took (auto chose it), whose fp32 copies the plan counts when widened.
    if (j.contains("bf16_products")) c.train.cpu_bf16 = j.at("bf16_products") == "widened" ? "widened" : "native";
    const int threads = j.at("threads").get<int>();
    if (k.extra.find("--threads") != std::string::npos) {
      ASSERT_EQ(threads, 16) << out;
    }
    const double predicted =
        double(plan::memory_for(c, c.train.micro_batch, 1, plan::kCpuRuntimeOverheadBytes, tm).total() +
               plan::cpu_widened_bytes(c, c.train.micro_batch, threads, tm) + plan::cpu_thread_bytes(threads));
    EXPECT_NEAR(rss / predicted, 1.0, 0.05) << what << ": peak RSS " << rss << " predicted " << predicted;
    // The bench prints the same figure beside its peak, and check_memory holds a run to it.
    EXPECT_EQ(double(plan::cpu_run_bytes(c, c.train.micro_batch, 1, threads, tm)), predicted) << what;
    EXPECT_EQ(j.at("planned_peak_rss_bytes").get<double>(), predicted) << what;
    EXPECT_EQ(j.at("planned_at_threads").get<int>(), threads) << what;
    std::printf("%s (%s, %d threads%s): peak RSS / predicted %.3f\n", precision.c_str(), c.train.cpu_bf16.c_str(),
                threads, tm ? ", with a teacher" : "", rss / predicted);
    // And the planner's CPU plan for that many threads reports that same total.
    plan::Request r = cpu_request(c, 24);
    if (tm) r.teacher = *tm;
    r.micro_batch = c.train.micro_batch;
    r.cpu_threads = 2, r.memory_threads = threads;
    EXPECT_EQ(double(plan::make_plan(r).memory.total()), predicted) << what;
    // bf16 also times steps in both precisions and advises fp32 exactly when
    // the shared rule says so.
    if (precision == "bf16") {
      EXPECT_GE(j.at("bf16_probe_layers").get<int64_t>(), 1) << out;
      const double bf16_step = j.at("bf16_probe_step_s").get<double>(),
                   fp32_step = j.at("fp32_probe_step_s").get<double>();
      EXPECT_GT(fp32_step, 0);
      EXPECT_EQ(j.contains("precision_advice"), bf16_step >= plan::kFp32WorthSwitching * fp32_step) << out;
    } else {
      EXPECT_FALSE(j.contains("fp32_probe_step_s"));
    }
  }

  // Resuming the teacher's run reads its optimizer state a piece at a time:
  // its peak is the fresh run's, where a whole state buffer staged on the
  // host once put it 96 MiB above (`small`). And within 5% of what the run
  // was checked against.
  std::string resumed;
  ASSERT_EQ(run(test_support::ctrl_binary() + " train --config small --out " + dir +
                    " --set train.steps=2 --set model.n_layer=8 --set model.d_ff=4096 --resume 2>&1",
                &resumed),
            0)
      << resumed;
  const double fresh_peak = test_support::peak_memory_mib(trained),
               resumed_peak = test_support::peak_memory_mib(resumed);
  ASSERT_GT(fresh_peak, 0) << trained;
  EXPECT_GT(resumed_peak, 0) << resumed;
  // The page cache's share of the mapped checkpoint moves by a few MiB, and by 17 beside another test
  // (ctest -j2); the whole staged state this guards against was 96.
  EXPECT_LE(resumed_peak, fresh_peak + 32) << resumed;
  const Config deeper = config_of("small", {"model.n_layer=8", "model.d_ff=4096"});
  EXPECT_LE(resumed_peak * (1 << 20),
            1.05 * double(plan::cpu_run_bytes(deeper, deeper.train.micro_batch, 1, most_cpu_threads(0), nullptr)));
  std::printf("resumed: peak %.0f MiB, fresh %.0f MiB\n", resumed_peak, fresh_peak);
}

// A teacher wider than its student (D 512, F 4096 against tiny's 256 and
// 1024) runs its forward products through the student's widened bf16
// scratch, which grows to the teacher's shapes: the plan once counted the
// student's alone and said 592 MiB for a run that peaked at 706.
TEST(Plan, AWiderTeachersProductsSetTheWidenedScratch) {
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "a CPU run's peak host memory";
  const std::string dir = test_support::fresh_dir("ctrl_test", "plan_wide_teacher");
  std::string out;
  ASSERT_EQ(run(test_support::ctrl_binary() + " train --config tiny --out " + dir +
                    " --set train.steps=1 --set model.n_layer=2 --set model.d_model=512 --set model.n_head=8"
                    " --set model.d_ff=4096 2>&1",
                &out),
            0)
      << out;
  // The CPU backend's scratch, whatever backend the suite runs (the checked one keeps other copies).
  ASSERT_EQ(run("CTRL_DEVICE=cpu " + test_support::ctrl_binary() +
                    " bench --config tiny --steps 1 --warmup 0 --json --threads 2" +
                    " --set train.micro_batch=32 --set train.global_batch=32 --set train.precision=bf16" +
                    " --set train.cpu_bf16=widened --teacher " + dir + "/checkpoints/step-00000001.ckpt",
                &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out);
  const double rss = j.at("peak_rss_bytes").get<double>(), planned = j.at("planned_peak_rss_bytes").get<double>();
  EXPECT_NEAR(rss / planned, 1.0, 0.05) << "peak RSS " << rss << " planned " << planned;
  std::printf("tiny bf16 widened, micro-batch 32, wide teacher: peak RSS / planned %.3f\n", rss / planned);
  std::filesystem::remove_all(dir);
}

// The memory a CPU run is planned and checked at is that of the most threads
// it may use: a pinned count, or the thread adapter's ceiling of
// kMaxThreadsPerCpu per CPU, which it reaches beside busy processes.
TEST(Plan, CpuMemoryIsCountedAtTheMostThreadsTheRunMayUse) {
  Config c = config_of("small", {"train.precision=bf16", "train.cpu_bf16=widened"});
  plan::Request r = cpu_request(c, 24);
  r.micro_batch = 8, r.cpu_threads = 2;
  const plan::Plan adapter = plan::make_plan(r);
  EXPECT_EQ(adapter.memory_threads, kMaxThreadsPerCpu * 2);
  EXPECT_EQ(adapter.memory.thread_runtime, plan::cpu_thread_bytes(kMaxThreadsPerCpu * 2));
  EXPECT_EQ(plan::cpu_thread_bytes(kMaxThreadsPerCpu * 2), (kMaxThreadsPerCpu * 2 - 2) * plan::kCpuBytesPerThread);
  EXPECT_EQ(plan::cpu_thread_bytes(1), 0u);
  EXPECT_EQ(plan::cpu_thread_bytes(2), 0u);
  r.config.train.threads = 2;  // pinned: no adapter, no threads past the overhead's
  const plan::Plan pinned = plan::make_plan(r);
  EXPECT_EQ(pinned.memory_threads, 2);
  EXPECT_EQ(pinned.memory.thread_runtime, 0u);
  // Widened bf16 keeps one tile's operands per thread, so its copies grow with
  // the count too, and the total by both.
  EXPECT_GT(adapter.memory.widened, pinned.memory.widened);
  EXPECT_EQ(adapter.memory.total() - pinned.memory.total(),
            adapter.memory.thread_runtime + adapter.memory.widened - pinned.memory.widened);
  // The readable plan names the extra threads.
  EXPECT_NE(plan::plan_text(adapter).find("runtime of threads 3-16"), std::string::npos) << plan::plan_text(adapter);
  EXPECT_EQ(plan::plan_text(pinned).find("runtime of threads"), std::string::npos);
}

// fp16 on a CPU runs (widened to fp32 for the products), so it is planned,
// with the widening buffers ctrl train allocates for it.
TEST(Plan, Fp16OnACpuIsPlannedWithItsWideningBuffers) {
  plan::Request r = cpu_request(config_of("tiny", {"train.precision=fp16"}), 24);
  r.micro_batch = 8;
  const plan::Plan p = plan::make_plan(r);
  EXPECT_TRUE(p.fits);
  EXPECT_GT(p.memory.widened, 0u);
}

// A micro-batch that does not divide the global batch: the plan runs the
// next multiple and says how to train it (ctrl train refuses the config).
TEST(Plan, AMicroBatchThatDoesNotDivideTheBatchSaysHowToTrainIt) {
  Config c = config_of("tiny", {"train.global_batch=16"});
  plan::Request r = cpu_request(c, 24);
  r.micro_batch = 3;
  const plan::Plan p = plan::make_plan(r);
  EXPECT_EQ(p.global_batch, 18);
  EXPECT_TRUE(std::any_of(p.notes.begin(), p.notes.end(), [](const std::string& n) {
    return n.find("ctrl train needs --set train.global_batch=18 to run them (it refuses 16)") != std::string::npos;
  })) << plan::plan_text(p);
  Config fixed = c;
  apply_override(fixed, "train.global_batch=18");
  apply_override(fixed, "train.micro_batch=3");
  EXPECT_NO_THROW(validate(fixed));
  // On the command line, --micro-batch replaces the preset's own (16), which
  // does not divide --set train.global_batch=8 and was refused before.
  std::string out;
  const std::string cmd = test_support::ctrl_binary() + " plan --config tiny --gpu T4 --tokens 1e6 ";
  EXPECT_EQ(run(cmd + "--micro-batch 8 --set train.global_batch=8 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("memory per rank at micro-batch 8"), std::string::npos) << out;
  EXPECT_EQ(run(cmd + "--micro-batch 3 --set train.global_batch=8 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("ctrl train needs --set train.global_batch=9"), std::string::npos) << out;
}

// A CPU rank of a job of 2 or more carries Open MPI's own memory
// (kMpiRankBytes, measured by MpiTrainerMemory.ZeroOneLowersRankZerosPeak);
// the plan, the trainer's memory check and the readable plan all count it.
TEST(Plan, CpuRanksOfAJobCarryOpenMpisMemory) {
  Config c = config_of("small");
  plan::Request r = cpu_request(c, 24);
  r.micro_batch = 8;
  const plan::Plan one = plan::make_plan(r);
  r.nodes = 2;
  const plan::Plan two = plan::make_plan(r);
  EXPECT_EQ(one.memory.communicator, 0u);
  EXPECT_EQ(two.memory.communicator, plan::kMpiRankBytes);
  EXPECT_EQ(two.memory.total() - one.memory.total(), plan::kMpiRankBytes);
  EXPECT_EQ(plan::cpu_run_bytes(c, 8, 1, 2, nullptr, 2) - plan::cpu_run_bytes(c, 8, 1, 2), plan::kMpiRankBytes);
  const uint64_t alone = plan::cpu_run_bytes(c, 8, 1, 2);
  EXPECT_NO_THROW(plan::check_memory(c, 8, 1, alone, 2));
  EXPECT_THROW(plan::check_memory(c, 8, 1, alone, 2, nullptr, 2), Error);
  EXPECT_NE(plan::plan_text(two).find("Open MPI (each rank)"), std::string::npos) << plan::plan_text(two);
  EXPECT_EQ(plan::plan_text(one).find("Open MPI"), std::string::npos);
}

// `ctrl bench --profile` counts the benchmark's timed steps: neither the
// warm-up steps (whose first calls carry one-off set-up) nor the bf16 probe
// that follows them on a CPU (two models, several steps each). A GPU runs
// bf16 natively and bench probes nothing there.
// bench takes train.threads as train does, refuses what cannot fit as train
// does, and runs a micro-batch larger than the config's global batch.
TEST(Plan, BenchTakesTheThreadsAndRefusesWhatCannotFit) {
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "CPU threads and host memory";
  std::string out;
  ASSERT_EQ(run(test_support::ctrl_binary() +
                    " bench --config tiny --steps 1 --warmup 0 --json --set train.threads=1 --set model.n_layer=1",
                &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j.at("threads").get<int>(), 1);
  EXPECT_EQ(j.at("planned_at_threads").get<int>(), 1);
  EXPECT_EQ(
      run(test_support::ctrl_binary() + " bench --config base --steps 1 --warmup 0 --set train.micro_batch=65536 2>&1",
          &out),
      1);
  EXPECT_NE(out.find("needs "), std::string::npos) << out;
  EXPECT_NE(out.find(" of memory at micro-batch 65536"), std::string::npos) << out;
  EXPECT_EQ(run(test_support::ctrl_binary() +
                    " bench --config tiny --steps 1 --warmup 0 --set model.n_layer=1 --set train.micro_batch=32 "
                    "--set train.global_batch=16 2>&1",
                &out),
            0)
      << out;
}

TEST(Plan, BenchProfileCountsOnlyTheBenchmarkSteps) {
  std::string out;
  ASSERT_EQ(run(test_support::ctrl_binary() + " bench --config tiny --steps 2 --warmup 1 --threads 1 --profile --json "
                                              "--set train.precision=bf16 --set train.micro_batch=2",
                &out),
            0)
      << out;
  // One JSON document (the table once followed it and broke parsers), with the profile inside.
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j.contains("bf16_probe_step_s"), !test_support::test_backend_is_gpu())
      << "the probe ran on a CPU, and only there\n"
      << out;
  std::map<std::string, long> calls;
  double shares = 0;
  for (const auto& row : j.at("profile"))
    calls[row.at("op")] = row.at("calls"), shares += row.at("share").get<double>();
  EXPECT_NEAR(shares, 1.0, 1e-9);
  for (const char* op : {"adamw_update", "lm_head_loss", "embedding_forward"})
    EXPECT_EQ(calls[op], 2) << op << ": one call per timed step, the warm-up step left out\n" << out;
  // The readable table says what it covers.
  ASSERT_EQ(run(test_support::ctrl_binary() + " bench --config tiny --steps 2 --warmup 1 --threads 1 --profile "
                                              "--set train.micro_batch=2",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("time per op over the 2 timed steps:"), std::string::npos) << out;
}

// bf16 on a CPU: the plan names the products' path its bf16 time was measured on,
// as auto chose it, and a pinned path is taken as given.
TEST(Plan, CpuBf16PlanNamesTheProductsPath) {
  // CTRL_DEVICE=cuda would give `ctrl plan --hardware cpu` the GPU's backend to time.
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "the CPU's bf16 products: a GPU's have no path to choose";
  const std::string base = test_support::ctrl_binary() + " plan --config tiny --tokens 1e6 --hardware cpu --precision bf16";
  std::string out;
  ASSERT_EQ(run(base + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("note: bf16 products "), std::string::npos) << out;
  if (!cpu::onednn_has_bf16_matmul()) {  // no oneDNN bf16 kernels for this CPU: nothing to choose
    for (const char* setting : {"auto", "native"}) {
      ASSERT_EQ(run(base + " --set train.cpu_bf16=" + setting + " 2>&1", &out), 0) << out;
      EXPECT_NE(out.find("note: bf16 products widened to fp32 (oneDNN has no bf16 products for this CPU)"),
                std::string::npos)
          << out;
    }
    return;
  }
  EXPECT_NE(out.find("auto measured oneDNN's bf16 kernels at"), std::string::npos) << out;
  ASSERT_EQ(run(base + " --set train.cpu_bf16=widened 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("note: bf16 products widened to fp32 (train.cpu_bf16)"), std::string::npos) << out;
}

// A bf16 plan on this CPU times whole training steps for its fp32 advice; the step of the whole model is
// also the plan's throughput (the default utilisation 0.75 was 1.4x too fast for tiny bf16 on a busy Zen 5,
// found by an audit), unless --mfu or a bench file gives one.
TEST(Plan, CpuBf16PlanTakesItsThroughputFromTheMeasuredStep) {
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "the CPU's bf16 steps";
  const std::string base =
      test_support::ctrl_binary() + " plan --config tiny --tokens 1e6 --hardware cpu --precision bf16";
  std::string out;
  ASSERT_EQ(run(base + " --json 2>/dev/null", &out), 0) << out;
  const auto measured = nlohmann::json::parse(out);
  EXPECT_EQ(measured["mfu_source"].get<std::string>(),
            "measured by a bf16 training step of this model at micro-batch 16 on this CPU")
      << out;
  EXPECT_GT(measured["mfu"].get<double>(), 0);
  EXPECT_LE(measured["mfu"].get<double>(), 1);
  ASSERT_EQ(run(base + " --mfu 0.5 --json 2>/dev/null", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["mfu_source"].get<std::string>(), "--mfu") << out;
  ASSERT_EQ(run(base + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("at MFU "), std::string::npos) << out;
  EXPECT_NE(out.find(" measured by a bf16 training step of this model at micro-batch 16 on this CPU"),
            std::string::npos)
      << out;
  // Nothing fits: no step to time (it ran one at micro-batch 0 and aborted on an internal check).
  ASSERT_EQ(run(base + " --memory-gb 0.05 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("fits: no"), std::string::npos) << out;
  EXPECT_EQ(out.find("timing bf16"), std::string::npos) << out;
}

// Beside busy processes the plan's own timing of the CPU reads low (an audit saw 893-1198 tokens/s for one
// config on a busy host): the plan says so. One busy loop per CPU leaves its threads about half their time.
TEST(Plan, ACpuPlanTimedBesideBusyProcessesSaysSo) {
  if (test_support::test_backend_is_gpu()) GTEST_SKIP() << "the CPU's own timing";
  const std::string plan = test_support::ctrl_binary() + " plan --config tiny --tokens 1e6 --hardware cpu";
  std::string out;
  // The loops write nowhere (they would hold the output pipe open) and end with the command, whatever it returns.
  ASSERT_EQ(run("bash -c 'loops=; for i in $(seq $(nproc)); do (while :; do :; done) >/dev/null 2>&1 & "
                "loops=\"$loops $!\"; done; sleep 0.3; " +
                    plan + "; status=$?; kill $loops; exit $status' 2>&1",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("note: other processes took CPU time while this plan timed the CPU (its threads ran "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("% of the time): the GEMM peak and the throughput read low"), std::string::npos) << out;
}

// The largest micro-batch is at most what --micro-batch and train.micro_batch take (2^24): with memory
// to spare the search once reported 2^25 - 1.
TEST(Plan, TheLargestMicroBatchIsOneTheFlagsTake) {
  const plan::Plan p = plan::make_plan(cpu_request(config_of("tiny"), 1e9));
  EXPECT_EQ(p.largest_micro_batch, int64_t(1) << 24);
}

// A bf16 plan beside a bench file of fp32 (which does not calibrate it) names the utilisation it measured,
// not the bench (its verdict said "calibrated from ctrl bench on …" beside a note that it was not).
TEST(Plan, AMeasuredUtilisationIsNamedAsSuchBesideABenchFileOfAnotherPrecision) {
  plan::Request r = cpu_request(config_of("tiny", {"train.precision=bf16"}), 24);
  plan::MachineProfile m;
  m.path = "b32.json", m.cpu = "a test CPU", m.precision = "fp32", m.config = "tiny";
  m.gemm_peak_gflops = 250, m.share_of_gemm_peak = m.hardware_share = 0.8, m.threads = 2;
  r.machine = m;
  r.mfu = 0.5;
  r.mfu_source = "measured by a bf16 training step of this model at micro-batch 16 on this CPU";
  const plan::Plan p = plan::make_plan(r);
  EXPECT_NE(p.verdict.find("at MFU 0.500 measured by a bf16 training step"), std::string::npos) << p.verdict;
  EXPECT_EQ(p.verdict.find("calibrated from ctrl bench"), std::string::npos) << p.verdict;
}

// A bench file whose GEMM peak read low (a busy host during its 1 s measurement) gives a utilisation
// above 1: the throughput is still the bench's, and a note says why the figure is not a fraction.
TEST(Plan, AUtilisationAboveOneFromABenchFileIsExplained) {
  plan::Request r = cpu_request(config_of("small"), 24);
  plan::MachineProfile m;
  m.path = "bench.json", m.cpu = "a test CPU", m.precision = "fp32", m.config = "small";
  m.gemm_peak_gflops = 250, m.share_of_gemm_peak = m.hardware_share = 1.014, m.threads = 2;
  r.machine = m;
  const plan::Plan p = plan::make_plan(r);
  EXPECT_DOUBLE_EQ(p.mfu, 1.014);
  bool noted = false;
  for (const std::string& note : p.notes) noted = noted || note.find("utilisation above 1") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Plan, FitsAndDoesNotFit) {
  // The two-V100 question: base in fp16 fits, with room for a real micro-batch.
  const plan::Plan base = plan::make_plan(gpu_request(config_of("base", {"train.precision=fp16"}), "V100-16GB", 2));
  EXPECT_TRUE(base.fits);
  EXPECT_GE(base.largest_micro_batch, 8);
  EXPECT_EQ(base.micro_batch * base.accumulation_steps * 2, 256);
  EXPECT_NE(base.verdict.find("fits: yes"), std::string::npos) << base.verdict;
  // The largest micro-batch is exactly the boundary, the CUDA backend's own scratch counted.
  const Config bc = config_of("base", {"train.precision=fp16"});
  auto gpu_total = [&](int64_t b) {
    return plan::memory_for(bc, b, 1, plan::kGpuRuntimeOverheadBytes).total() + plan::gpu_scratch_bytes(bc, b);
  };
  EXPECT_LE(gpu_total(base.largest_micro_batch), base.device_memory);
  EXPECT_GT(gpu_total(base.largest_micro_batch + 1), base.device_memory);
  // CTRL 1.6B with AdamW needs 16 bytes per parameter before activations: not on one V100-16GB.
  const plan::Plan big = plan::make_plan(gpu_request(config_of("ctrl", {"train.optimizer=adamw"}), "V100-16GB", 1));
  EXPECT_FALSE(big.fits);
  EXPECT_EQ(big.largest_micro_batch, 0);
  EXPECT_NE(big.verdict.find("fits: no"), std::string::npos) << big.verdict;
  // base needs about 1.9 GiB at micro-batch 1 on a CPU; ZeRO-1 over 4 machines brings it to about 1.4.
  plan::Request four = cpu_request(config_of("base"), 1.6);
  four.nodes = 4;
  const plan::Plan without = plan::make_plan(four);
  EXPECT_FALSE(without.fits);
  EXPECT_NE(without.verdict.find("it fits with --zero 1"), std::string::npos) << without.verdict;
  four.zero = 1;
  EXPECT_TRUE(plan::make_plan(four).fits);
  // A fixed micro-batch too large for the device does not fit, though smaller ones do.
  plan::Request r = gpu_request(config_of("base"), "T4", 1);
  r.micro_batch = 4096;
  const plan::Plan too_big = plan::make_plan(r);
  EXPECT_FALSE(too_big.fits);
  EXPECT_GT(too_big.largest_micro_batch, 0);
  EXPECT_LT(too_big.largest_micro_batch, 4096);
}

TEST(Plan, LargestMicroBatchGrowsWithMemory) {
  const Config c = config_of("base");
  int64_t previous = -1;
  for (double gib : {0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0}) {
    const plan::Plan p = plan::make_plan(cpu_request(c, gib));
    EXPECT_GE(p.largest_micro_batch, previous) << gib << " GiB";
    if (gib >= 4) {
      EXPECT_GT(p.largest_micro_batch, previous) << gib << " GiB";
    }
    previous = p.largest_micro_batch;
  }
  EXPECT_EQ(plan::make_plan(cpu_request(c, 0.5)).largest_micro_batch, 0);  // 110M params x 16 bytes > 0.5 GiB
  // GPUs ordered by memory, all in fp32.
  previous = -1;
  for (const char* gpu : {"GTX-1080-Ti", "T4", "RTX-4090", "V100-32GB", "A100-40GB", "A100-80GB", "H200"}) {
    const plan::Plan p = plan::make_plan(gpu_request(c, gpu, 1));
    EXPECT_GE(p.largest_micro_batch, previous) << gpu;
    previous = p.largest_micro_batch;
  }
  // Halving activation bytes (fp16) lets a larger micro-batch fit.
  EXPECT_GT(plan::make_plan(gpu_request(config_of("base", {"train.precision=fp16"}), "T4", 1)).largest_micro_batch,
            plan::make_plan(gpu_request(c, "T4", 1)).largest_micro_batch);
}

TEST(Plan, LowPrecisionHalvesActivationsAndAddsAWeightCopy) {
  const Config f32 = config_of("small"), f16 = config_of("small", {"train.precision=bf16"});
  const plan::Memory a = plan::memory_for(f32, 8, 1, 0), b = plan::memory_for(f16, 8, 1, 0);
  // The engine stores the matrix-product inputs, the softmax and the gradients
  // inside a layer in bf16 and keeps the residual stream, its gradient and the
  // logits chunk in fp32: activations and workspace shrink, but by less than half.
  EXPECT_LT(b.activations, a.activations);
  EXPECT_GT(b.activations * 2, a.activations);
  EXPECT_EQ(b.activations, make_activation_layout(f16.model, 8, DType::BF16).saved * 4);
  EXPECT_LT(b.workspace, a.workspace);
  EXPECT_GT(b.workspace * 2, a.workspace);
  EXPECT_EQ(b.weights_lowp * 2, a.weights);
  EXPECT_EQ(a.weights_lowp, 0u);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.optimizer, b.optimizer);
}

// The logits chunk is laid out with rows head_row_stride(V) apart, so that a
// GPU head can keep its products' leading dimensions aligned whatever V is.
TEST(Plan, TheHeadsLogitsChunkReservesPaddedRows) {
  EXPECT_EQ(head_row_stride(32000), 32000);
  EXPECT_EQ(head_row_stride(246534), 246544);
  EXPECT_EQ(head_row_stride(11), 16);
  const Config c = config_of("ctrl", {});
  const ActivationLayout a = make_activation_layout(c.model, 1, DType::F32);
  EXPECT_EQ(a.logits_rows, 256);
  EXPECT_GE(a.total - a.logits, size_t(a.logits_rows * head_row_stride(c.model.vocab_size)));
}

TEST(Plan, ZeroOneDividesTheOptimizerStateOverRanks) {
  const Config c = config_of("ctrl", {"train.optimizer=adamw", "train.precision=bf16"});
  plan::Request r = gpu_request(c, "A100-40GB", 8);
  const plan::Plan plain = plan::make_plan(r);
  r.zero = 1;
  const plan::Plan zero = plan::make_plan(r);
  const uint64_t total = make_param_layout(c.model).total, shard = (total + 7) / 8;
  EXPECT_EQ(plain.memory.optimizer, 2 * total * 4);  // AdamW: m and v
  EXPECT_EQ(zero.memory.optimizer, 2 * shard * 4);
  EXPECT_EQ(zero.memory.grad_shard, shard * 4);
  EXPECT_EQ(zero.memory.weights, 8 * shard * 4);  // padded to 8 equal shards
  // Per rank at the same micro-batch, ZeRO saves 7/8 of the state less the gradient shard and padding.
  EXPECT_EQ(plan::memory_for(c, 4, 1, 0).total() - plan::memory_for(c, 4, 8, 0).total(),
            2 * total * 4 - 2 * shard * 4 - shard * 4 - 2 * (8 * shard - total) * 4);
  EXPECT_GT(zero.largest_micro_batch, plain.largest_micro_batch);
  // Saving a checkpoint streams the shards to the writer: one piece of staging on top.
  EXPECT_EQ(zero.zero_checkpoint_peak, zero.memory.total() + kZeroCheckpointPieceFloats * 4);  // one piece staged
  EXPECT_EQ(plain.zero_checkpoint_peak, 0u);
  // The engine's sharded Optimizer holds exactly the planned shard.
  const Config small = config_of("small", {"model.n_layer=2"});
  auto ops = test_support::make_test_ops();
  const ParamLayout layout = make_param_layout(small.model);
  for (int ranks : {2, 3, 8}) {
    const plan::Memory m = plan::memory_for(small, 2, ranks, 0);
    const size_t s = (layout.total + size_t(ranks) - 1) / size_t(ranks);
    Optimizer optimizer(small.train, layout, *ops, s * size_t(ranks - 1), s);
    uint64_t bytes = 0;
    for (auto& [name, buffer] : optimizer.state()) bytes += buffer->size() * 4;
    EXPECT_EQ(m.optimizer, bytes) << ranks;
    EXPECT_EQ(m.grad_shard, s * 4) << ranks;
  }
  // One rank: ZeRO changes nothing.
  r.gpus_per_node = 1;
  const plan::Plan one_zero = plan::make_plan(r);
  r.zero = 0;
  EXPECT_EQ(one_zero.memory.total(), plan::make_plan(r).memory.total());
}

TEST(Plan, RingAllReduceTimeAndLinks) {
  const Config c = config_of("base", {"train.precision=fp16"});
  const plan::Plan two = plan::make_plan(gpu_request(c, "V100-16GB", 2));
  EXPECT_DOUBLE_EQ(two.comm_bytes, double(two.memory.grads));  // 2(N-1)/N = 1 for N = 2
  EXPECT_DOUBLE_EQ(two.comm_s, two.comm_bytes / 150e9);        // NVLink 300 GB/s, each way 150
  EXPECT_DOUBLE_EQ(two.step_s_no_overlap, two.compute_s + two.comm_s);
  EXPECT_DOUBLE_EQ(two.step_s_overlap, std::max(two.compute_s, two.comm_s));
  plan::Request r = gpu_request(c, "V100-16GB", 2);
  r.nodes = 2;
  r.network_gbps = 25;
  const plan::Plan four = plan::make_plan(r);
  EXPECT_EQ(four.ranks, 4);
  EXPECT_DOUBLE_EQ(four.comm_bytes, 1.5 * double(four.memory.grads));
  EXPECT_DOUBLE_EQ(four.comm_s, four.comm_bytes / (25e9 / 8));
  EXPECT_DOUBLE_EQ(four.tokens_per_s_no_overlap, double(four.global_batch * c.model.n_ctx) / four.step_s_no_overlap);
  // ZeRO-1 reduces after the whole backward: nothing overlaps.
  plan::Request sharded = r;
  sharded.zero = 1;
  const plan::Plan z = plan::make_plan(sharded);
  EXPECT_GT(z.comm_s, 0);
  EXPECT_DOUBLE_EQ(z.step_s_overlap, z.step_s_no_overlap);
  const plan::Plan one = plan::make_plan(gpu_request(c, "V100-16GB", 1));
  EXPECT_EQ(one.comm_s, 0);
  EXPECT_DOUBLE_EQ(one.tokens_per_s_no_overlap, one.tokens_per_s);
  // Time = tokens / throughput when nothing communicates; cost = hours x price x GPUs.
  plan::Request priced = gpu_request(c, "V100-16GB", 1);
  priced.price_per_hour = 2.5;
  const plan::Plan p = plan::make_plan(priced);
  EXPECT_NEAR(p.hours_no_overlap * 3600, 10e9 / p.tokens_per_s, 1e-6 * p.hours_no_overlap * 3600);
  // fp16 on tensor cores at the default MFU: what ctrl reached on an H200, with a note saying so.
  EXPECT_DOUBLE_EQ(p.mfu, 0.07);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 125e12 * 0.07 / train_flops_per_token(c.model));
  EXPECT_TRUE(std::any_of(p.notes.begin(), p.notes.end(), [](const std::string& n) {
    return n.find("default MFU 0.07 is what ctrl's CUDA backend reached on an H200") != std::string::npos;
  }));
  EXPECT_DOUBLE_EQ(p.cost, p.hours_no_overlap * 2.5);
}

TEST(Plan, MachineFileCalibratesTheUtilisation) {
  const Config c = config_of("small");
  const double tokens_per_s = 1234, peak = 400;
  const double achieved = tokens_per_s * train_flops_per_token(c.model) / 1e9;
  nlohmann::json j = {{"tokens_per_s", tokens_per_s}, {"achieved_gflops", achieved},  {"gemm_peak_gflops", peak},
                      {"share_of_gemm_peak", achieved / peak}, {"peak_rss_bytes", 1e9}, {"cpu", "Test CPU 9000"},
                      {"threads", 2},                          {"precision", "fp32"}};
  plan::Request r = cpu_request(c, 24);
  r.cpu_peak_gflops = 0;
  r.machine = plan::parse_machine(j.dump(), "bench.json");
  const plan::Plan p = plan::make_plan(r);
  EXPECT_NEAR(p.tokens_per_s, tokens_per_s, 1e-6);
  EXPECT_NE(p.mfu_source.find("calibrated from ctrl bench on Test CPU 9000"), std::string::npos);
  EXPECT_NE(p.verdict.find("calibrated from ctrl bench on Test CPU 9000"), std::string::npos) << p.verdict;
  // A run with recomputation: the executed FLOP/s calibrate, and the same config reproduces the throughput.
  const Config rc = config_of("small", {"model.recompute=layers"});
  nlohmann::json jr = j;
  jr["achieved_gflops"] = tokens_per_s * train_flops_per_token(rc.model) / 1e9;
  jr["share_of_gemm_peak"] = jr["achieved_gflops"].get<double>() / peak;
  jr["hardware_gflops"] = tokens_per_s * train_hardware_flops_per_token(rc.model) / 1e9;
  plan::Request rr = r;
  rr.config = rc;
  rr.machine = plan::parse_machine(jr.dump(), "bench.json");
  EXPECT_NEAR(plan::make_plan(rr).tokens_per_s, tokens_per_s, 1e-6);
  // Memory is counted at the most threads a run there may use: the adapter's 8 per CPU of the bench's
  // machine, never 8 per thread that the bench ran (16 adapted or pinned threads on 2 CPUs: 16, not 128).
  nlohmann::json adapted = j;
  adapted["threads"] = 16;
  adapted["usable_cpus"] = 2;
  plan::Request ra = r;
  ra.memory_threads = 0;
  ra.machine = plan::parse_machine(adapted.dump(), "bench.json");
  EXPECT_EQ(plan::make_plan(ra).memory_threads, kMaxThreadsPerCpu * 2);
  adapted.erase("usable_cpus");  // a file from before the field: the threads it ran at
  ra.machine = plan::parse_machine(adapted.dump(), "bench.json");
  EXPECT_EQ(plan::make_plan(ra).memory_threads, 16);
  // A measurement in another precision does not calibrate.
  r.config = config_of("small", {"train.precision=bf16"});
  r.cpu_peak_gflops = 800;
  EXPECT_EQ(plan::make_plan(r).mfu_source, "default");
  j.erase("share_of_gemm_peak");
  EXPECT_THROW(plan::parse_machine(j.dump(), "bench.json"), Error);
  EXPECT_THROW(plan::parse_machine("{not json", "bench.json"), Error);
}

// A GPU run of ctrl bench (--device cuda --json) calibrates a --gpu plan: the
// executed FLOP/s against the datasheet peak become the utilisation, so the
// plan reproduces the measured throughput on that GPU.
TEST(Plan, GpuBenchFileCalibratesTheGpuUtilisation) {
  const Config c = config_of("base", {"train.precision=bf16"});
  const double tokens_per_s = 150000, achieved = tokens_per_s * train_flops_per_token(c.model) / 1e9;
  nlohmann::json j = {{"tokens_per_s", tokens_per_s}, {"achieved_gflops", achieved}, {"gemm_peak_gflops", 700000.0},
                      {"share_of_gemm_peak", achieved / 700000.0}, {"peak_rss_bytes", 1e9}, {"cpu", "Host CPU"},
                      {"threads", 0}, {"precision", "bf16"}, {"device", "cuda"}, {"gpu", "NVIDIA H200"}};
  plan::Request r = gpu_request(c, "H200", 1);
  r.machine = plan::parse_machine(j.dump(), "gpu-bench.json");
  EXPECT_EQ(r.machine->gpu, "NVIDIA H200");
  const plan::Plan p = plan::make_plan(r);
  EXPECT_NEAR(p.mfu, achieved / 989500.0, 1e-12);
  EXPECT_NEAR(p.tokens_per_s, tokens_per_s, 1e-6 * tokens_per_s);
  EXPECT_NE(p.mfu_source.find("calibrated from ctrl bench on NVIDIA H200"), std::string::npos) << p.mfu_source;
  EXPECT_NE(p.verdict.find("calibrated from ctrl bench on NVIDIA H200"), std::string::npos) << p.verdict;
  // Planned for another GPU, the utilisation carries over with a note saying so.
  plan::Request other = r;
  other.gpu = "A100-80GB";
  const plan::Plan a = plan::make_plan(other);
  EXPECT_NEAR(a.mfu, p.mfu, 1e-12);
  EXPECT_TRUE(std::any_of(a.notes.begin(), a.notes.end(), [](const std::string& n) {
    return n.find("measured on NVIDIA H200, this plan is for A100-80GB") != std::string::npos;
  }));
  // In another precision it does not calibrate.
  r.config = config_of("base", {"train.precision=fp16"});
  EXPECT_EQ(plan::make_plan(r).mfu_source, "default");
  // A file from a GPU the table lacks cannot give a utilisation (its peak is
  // unknown), and one that claims more than its GPU's peak is not a measurement.
  r.config = c;
  nlohmann::json unknown = j;
  unknown["gpu"] = "NVIDIA L40S";
  r.machine = plan::parse_machine(unknown.dump(), "l40s.json");
  EXPECT_NE(test_support::error_of([&] { plan::make_plan(r); }).find("a GPU the datasheet table does not know"),
            std::string::npos);
  nlohmann::json over = j;
  over["gemm_peak_gflops"] = 3e6, over["share_of_gemm_peak"] = 1.0;
  r.machine = plan::parse_machine(over.dump(), "over.json");
  EXPECT_NE(test_support::error_of([&] { plan::make_plan(r); }).find("expected a share in (0, 1]"), std::string::npos);
}

TEST(Plan, InputsThatCannotApplyAreNoted) {
  auto has_note = [](const plan::Plan& p, const std::string& text) {
    return std::any_of(p.notes.begin(), p.notes.end(),
                       [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  // --network-gbps on one node: nothing crosses a network.
  plan::Request one_node = gpu_request(config_of("base"), "H100", 8);
  one_node.network_gbps = 1, one_node.network_gbps_given = true;
  EXPECT_TRUE(has_note(plan::make_plan(one_node), "with one node it is not used"));
  one_node.nodes = 2;
  EXPECT_FALSE(has_note(plan::make_plan(one_node), "with one node it is not used"));
  // One GPU per node: no NVLink in the label.
  plan::Request spread = gpu_request(config_of("base"), "H100", 1);
  spread.nodes = 4;
  EXPECT_EQ(plan::make_plan(spread).hardware, "4 x H100 (4 nodes, 1 GPU each)");
  // A calibration measured on another model carries over with a note; on the same model, silently.
  const Config small = config_of("small");
  const double achieved = 1000 * train_flops_per_token(small.model) / 1e9;
  nlohmann::json j = {{"tokens_per_s", 1000},
                      {"achieved_gflops", achieved},
                      {"gemm_peak_gflops", 400},
                      {"share_of_gemm_peak", achieved / 400},
                      {"peak_rss_bytes", 1e9},
                      {"cpu", "Test CPU"},
                      {"threads", 2},
                      {"precision", "fp32"},
                      {"config", "small"},
                      {"parameters", make_param_layout(small.model).count()}};
  plan::Request r = cpu_request(config_of("tiny"), 24);
  r.machine = plan::parse_machine(j.dump(), "bench.json");
  const plan::Plan other = plan::make_plan(r);
  EXPECT_TRUE(has_note(other, "bench.json measured small (23.0 M parameters), this plan is tiny")) << other.notes[0];
  EXPECT_FALSE(has_note(other, "memory is this machine's"));  // cpu_request gave the memory
  r.cpu_memory_bytes = 0;
  EXPECT_TRUE(has_note(plan::make_plan(r), "memory is this machine's"));
  r.config = small;
  EXPECT_FALSE(has_note(plan::make_plan(r), "measured small"));
  j["teacher"] = "teacher.ckpt";  // measured distilling; this plan has no teacher
  r.machine = plan::parse_machine(j.dump(), "bench.json");
  EXPECT_TRUE(has_note(plan::make_plan(r), "bench.json was measured with a teacher, this plan has none"));
  j.erase("teacher");
  j["device"] = "tpu";
  EXPECT_NE(test_support::error_of([&] {
              plan::parse_machine(j.dump(), "bench.json");
            }).find("bench.json: key 'device': expected cpu or cuda, got 'tpu'"),
            std::string::npos);
  // Extreme but valid inputs still print whole figures and units.
  plan::Request slow = gpu_request(config_of("base"), "H100", 1, 1e18);
  slow.mfu = 1e-300;
  const plan::Plan crawl = plan::make_plan(slow);
  EXPECT_NE(crawl.verdict.find("1e+18 tokens in "), std::string::npos) << crawl.verdict;
  EXPECT_NE(crawl.verdict.find(" years at MFU 1e-300 (--mfu)"), std::string::npos) << crawl.verdict;
}

TEST(Plan, GpusAreFoundByTableNameOrByTheDriversName) {
  const std::vector<std::pair<std::string, std::string>> names = {{"h200", "H200"},
                                                                  {"NVIDIA H200", "H200"},
                                                                  {"NVIDIA H100 80GB HBM3", "H100"},
                                                                  {"NVIDIA H100 PCIe", "H100-PCIe"},
                                                                  {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
                                                                  {"NVIDIA A100-PCIE-40GB", "A100-40GB-PCIe"},
                                                                  {"NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"},
                                                                  {"Tesla V100-SXM2-32GB", "V100-32GB"},
                                                                  {"Tesla V100-PCIE-16GB", "V100-16GB-PCIe"},
                                                                  {"Tesla P100-PCIE-16GB", "P100"},
                                                                  {"Tesla P100-SXM2-16GB", "P100-SXM2"},
                                                                  {"Tesla T4", "T4"},
                                                                  {"Tesla K80", "K80"},
                                                                  {"NVIDIA GeForce RTX 4090", "RTX-4090"},
                                                                  {"NVIDIA GeForce GTX 1080 Ti", "GTX-1080-Ti"}};
  for (const auto& [driver, table] : names) EXPECT_EQ(plan::find_gpu(driver).name, table) << driver;
  // Another chip that shares a word with one in the table is not that one (an H100 NVL has 94 GB and
  // another clock, a GH200 is not an H200), and a name that fits two entries must say which.
  for (const char* other : {"NVIDIA B200", "NVIDIA H100 NVL", "NVIDIA GH200 480GB", "K80x", "NVIDIA H200 NVL"})
    EXPECT_NE(test_support::error_of([&] { plan::find_gpu(other); }).find("unknown GPU"), std::string::npos) << other;
  EXPECT_NE(test_support::error_of([&] { plan::find_gpu("A100"); }).find("could be A100-40GB or A100-80GB"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] { plan::find_gpu("NVIDIA A100 48GB"); }).find("unknown GPU"), std::string::npos);
}

TEST(Plan, GpusCtrlCannotRunOnArePlannedForComparisonOnly) {
  // The CUDA backend needs sm_75: a V100 plan says so first, and its JSON says ctrl_runs false.
  const plan::Plan v100 = plan::make_plan(gpu_request(config_of("base", {"train.precision=fp16"}), "V100-16GB", 2));
  EXPECT_FALSE(v100.ctrl_runs);
  EXPECT_EQ(v100.verdict.rfind("ctrl cannot train on V100-16GB: it is sm_70", 0), 0u) << v100.verdict;
  const plan::Plan t4 = plan::make_plan(gpu_request(config_of("base", {"train.precision=fp16"}), "T4", 2));
  EXPECT_TRUE(t4.ctrl_runs);
  EXPECT_EQ(t4.verdict.rfind("fits: yes", 0), 0u) << t4.verdict;
  for (const auto& g : plan::gpu_table())
    EXPECT_EQ(plan::make_plan(gpu_request(config_of("tiny"), g.name, 1)).ctrl_runs,
              g.compute_capability >= kCudaMinComputeCapability)
        << g.name;
}

TEST(Plan, UnsupportedPrecisionsAreRefused) {
  EXPECT_THROW(plan::make_plan(gpu_request(config_of("base", {"train.precision=bf16"}), "V100-16GB", 2)), Error);
  EXPECT_THROW(plan::make_plan(gpu_request(config_of("base", {"train.precision=bf16"}), "T4", 1)), Error);
  EXPECT_THROW(plan::make_plan(gpu_request(config_of("base", {"train.precision=fp16"}), "K80", 1)), Error);
  EXPECT_NO_THROW(plan::make_plan(gpu_request(config_of("base", {"train.precision=bf16"}), "A100-40GB", 1)));
  EXPECT_THROW(plan::find_gpu("V200"), Error);
  EXPECT_EQ(plan::find_gpu("v100-16gb").name, "V100-16GB");
}

TEST(Plan, CommandLineJsonIsParseableAndMatchesTheLibrary) {
  std::string out;
  ASSERT_EQ(
      run(test_support::ctrl_binary() + " plan --config base --tokens 10e9 --gpu T4 --gpus 2 --precision fp16 --json"
                                        " --price-per-hour 3",
          &out),
      0)
      << out;
  const auto j = nlohmann::json::parse(out);
  const plan::Plan p = plan::make_plan(gpu_request(config_of("base", {"train.precision=fp16"}), "T4", 2));
  EXPECT_EQ(j.at("parameters").get<uint64_t>(), p.parameters);
  EXPECT_EQ(j.at("largest_micro_batch").get<int64_t>(), p.largest_micro_batch);
  EXPECT_EQ(j.at("memory_bytes").at("total").get<uint64_t>(), p.memory.total());
  EXPECT_TRUE(j.at("fits").get<bool>());
  EXPECT_EQ(j.at("mfu_source").get<std::string>(), "default");
  EXPECT_NEAR(j.at("cost").get<double>(), p.hours_no_overlap * 3 * 2, 1e-6);
  EXPECT_TRUE(j.at("ctrl_runs").get<bool>());
  // Throughput counts each step's all-reduce; the compute alone is its own field.
  EXPECT_DOUBLE_EQ(j.at("compute_tokens_per_s").get<double>(), p.tokens_per_s);
  EXPECT_NEAR(j.at("tokens_per_s").get<double>(), 256.0 * 256 / (p.compute_s + p.comm_s), 1e-6);
  EXPECT_LT(j.at("tokens_per_s").get<double>(), p.tokens_per_s);
  // The readable form ends with the verdict line.
  ASSERT_EQ(
      run(test_support::ctrl_binary() + " plan --config base --tokens 10e9 --gpu T4 --gpus 2 --precision fp16", &out),
      0);
  EXPECT_NE(out.find("\nfits: yes, largest micro-batch " + std::to_string(p.largest_micro_batch)), std::string::npos)
      << out;
}

TEST(Plan, BadFlagsGiveOneLineErrors) {
  const std::string base = test_support::ctrl_binary() + " plan --config base ";
  const std::string bad_json = testing::TempDir() + "plan_bad_bench.json";
  std::ofstream(bad_json) << "{\"tokens_per_s\": 1}";
  // A complete bench file of a CPU run, and the same as a GPU run.
  const std::string cpu_bench = testing::TempDir() + "plan_cpu_bench.json",
                    gpu_bench = testing::TempDir() + "plan_gpu_bench.json";
  const std::string bench_fields =
      "\"tokens_per_s\": 1, \"achieved_gflops\": 1, \"gemm_peak_gflops\": 10, \"share_of_gemm_peak\": 0.1, "
      "\"peak_rss_bytes\": 1, \"threads\": 2, \"cpu\": \"X\", \"precision\": \"fp32\"";
  std::ofstream(cpu_bench) << "{" << bench_fields << "}";
  std::ofstream(gpu_bench) << "{" << bench_fields << ", \"device\": \"cuda\", \"gpu\": \"NVIDIA H200\"}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--tokens 1e9 --gpu V200", "unknown GPU"},
      {"--tokens 1e9 --gpu V100-16GB --precision bf16", "no bf16"},
      {"--gpu T4", "missing --tokens"},
      {"--tokens lots --gpu T4", "--tokens lots: expected a number in (0, 1e+18]"},
      {"--tokens -5 --gpu T4", "--tokens -5: expected a number in (0, 1e+18]"},
      {"--tokens 1e9 --gpu T4 --zero 2", "--zero 2: expected an integer in [0, 1]"},
      {"--tokens 1e9 --gpu T4 --gpus 0", "--gpus 0: expected an integer in [1, 65536]"},
      {"--tokens 1e9 --gpu H100 --gpus 65536 --nodes 65536", "= 4294967296 ranks: expected at most 1048576"},
      {"--tokens 1e9 --gpu H100 --gpus 65536 --nodes 32768", "= 2147483648 ranks: expected at most 1048576"},
      {"--tokens nan --gpu T4", "--tokens nan: expected a number"},
      {"--tokens 1e9 --gpu T4 stray", "unexpected argument 'stray'"},
      {"--tokens 1e9", "exactly one of"},
      {"--tokens 1e9 --gpu T4 --hardware cpu", "exactly one of"},
      {"--tokens 1e9 --hardware tpu", "expected cpu"},
      {"--tokens 1e9 --machine /nonexistent/bench.json", "no such file"},
      {"--tokens 1e9 --machine " + bad_json, "expected a number"},
      {"--tokens 1e9 --gpu T4 --machine " + cpu_bench, "cannot go with --gpu"},
      {"--tokens 1e9 --machine " + gpu_bench, "plan it with --gpu NAME"},
      {"--tokens 1e9 --gpu T4 --set model.n_head=7", "divisible"},
      {"--tokens 1e9 --gpu T4 --frobnicate", "unknown flag --frobnicate"},
  };
  for (const auto& [flags, expected] : cases) {
    std::string err;
    EXPECT_EQ(run(base + flags + " 2>&1 >/dev/null", &err), 1) << flags;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << flags << ": " << err;
    EXPECT_NE(err.find(expected), std::string::npos) << flags << ": " << err;
  }
}

// Whole-step times: the advice follows what was measured on the CPU, whatever
// its path. The widened figures are this Zen 3's (no oneDNN bf16 kernels),
// where the products' peaks matched and only steps showed fp32's lead.
TEST(Plan, Bf16AdviceFollowsTheMeasuredStepsNotTheProducts) {
  auto times = [](double bf16, double fp32, int64_t layers, int64_t of) {
    plan::Bf16StepTimes t;
    t.measured = true, t.bf16_step_s = bf16, t.fp32_step_s = fp32, t.layers = layers, t.of_layers = of;
    return t;
  };
  const std::string widened = plan::bf16_slower_advice(times(1.575, 1.370, 1, 6), "widened");
  EXPECT_NE(widened.find("measured 1.575 s on this CPU against fp32's 1.370 s"), std::string::npos) << widened;
  EXPECT_NE(widened.find("(this model cut to 1 of its 6 layers; products widened to fp32's, plus the conversions)"),
            std::string::npos)
      << widened;
  EXPECT_NE(widened.find("--set train.precision=fp32 runs 1.15x faster"), std::string::npos) << widened;
  const std::string emulated = plan::bf16_slower_advice(times(3.5, 1.0, 4, 4), "emulated", 3 * 3600);
  EXPECT_NE(emulated.find("(this model; emulated: no AVX512-BF16 or AMX)"), std::string::npos) << emulated;
  EXPECT_NE(emulated.find("take about 51m"), std::string::npos) << emulated;
  EXPECT_NE(emulated.find("instead of 3h"), std::string::npos) << emulated;
  EXPECT_NE(emulated.find("(3.50x sooner; --set train.precision=fp32)"), std::string::npos) << emulated;
  EXPECT_NE(plan::bf16_slower_advice(times(1.8, 1.0, 1, 12), "native").find("native bf16 products, yet slower"),
            std::string::npos);
  EXPECT_EQ(plan::bf16_slower_advice(times(0.6, 1.0, 1, 12), "native"), "");   // Zen 5: bf16 the faster
  EXPECT_EQ(plan::bf16_slower_advice(times(1.09, 1.0, 1, 6), "widened"), "");  // under kFp32WorthSwitching
  EXPECT_NE(plan::bf16_slower_advice(times(1.11, 1.0, 1, 6), "widened"), "");
  plan::Bf16StepTimes skipped = times(2, 1, 1, 6);
  skipped.measured = false;
  EXPECT_EQ(plan::bf16_slower_advice(skipped, "widened"), "") << "no advice without a measurement";
}

// The probe runs real steps of the model in both precisions on the caller's
// backend, cut to the layers that fit the memory it may take, and leaves
// the backend's bf16 path as it found it: on a CPU the widened path chosen
// here, on a GPU native (it has no other).
TEST(Plan, Bf16ProbeTimesBothPrecisionsOnWhatFits) {
  const Config c = config_of("tiny", {"train.precision=bf16", "train.micro_batch=2"});
  auto ops = make_ops("cpu", 1);
  const std::string path = ops->gpu() >= 0 ? "native" : "widened";
  const bool was_widened = cpu::bf16_widened();  // process-wide: restored for the tests after this one
  ops->choose_bf16_products("widened", 0);
  const plan::Bf16StepTimes whole = probe_bf16_steps(c, *ops, 0);
  ASSERT_TRUE(whole.measured) << whole.skipped;
  EXPECT_EQ(whole.layers, 4);
  EXPECT_EQ(whole.of_layers, 4);
  EXPECT_GT(whole.bf16_step_s, 0);
  EXPECT_GT(whole.fp32_step_s, 0);
  EXPECT_EQ(ops->bf16_path(), path);
  // Room for both copies at 2 layers, not 3: cut to 2.
  auto both = [&](int64_t layers, const ModelConfig* teacher = nullptr) {
    Config b = c, f = c;
    b.model.n_layer = f.model.n_layer = layers;
    f.train.precision = "fp32";
    return plan::memory_estimate(b, 2, 1, 0, teacher).buffers() + plan::memory_estimate(f, 2, 1, 0, teacher).buffers();
  };
  const plan::Bf16StepTimes cut = probe_bf16_steps(c, *ops, 0, (both(2) + both(3)) / 2);
  ASSERT_TRUE(cut.measured) << cut.skipped;
  EXPECT_EQ(cut.layers, 2);
  EXPECT_NE(plan::bf16_slower_advice({true, "", 2, 4, 2.0, 1.0}, "widened").find("cut to 2 of its 4 layers"),
            std::string::npos);
  const plan::Bf16StepTimes none = probe_bf16_steps(c, *ops, 0, both(1) - 1);
  EXPECT_FALSE(none.measured);
  EXPECT_NE(none.skipped.find("cut to 1 layer need"), std::string::npos) << none.skipped;
  // A distilling run's probe carries the teacher (its forward runs in each precision): its room counts
  // two teachers beside the two cut students.
  Config distilling = c;
  std::string trained;
  distilling.train.teacher =
      trained_teacher("probe_teacher", "tiny --set model.n_layer=1", &trained) + kTeacherCheckpoint;
  ASSERT_FALSE(HasFailure());
  const std::optional<ModelConfig> t = teacher_of(distilling);
  ASSERT_TRUE(t.has_value());
  auto with_teachers = [&](int64_t layers) { return both(layers, &*t); };
  EXPECT_GT(with_teachers(1), both(1));
  const plan::Bf16StepTimes short_of_teachers = probe_bf16_steps(distilling, *ops, 0, with_teachers(1) - 1);
  EXPECT_FALSE(short_of_teachers.measured);
  EXPECT_NE(short_of_teachers.skipped.find("cut to 1 layer, each with its teacher, need"), std::string::npos)
      << short_of_teachers.skipped;
  const plan::Bf16StepTimes taught = probe_bf16_steps(distilling, *ops, 0, with_teachers(1));
  ASSERT_TRUE(taught.measured) << taught.skipped;
  EXPECT_EQ(taught.layers, 1);
  cpu::set_bf16_widened(was_widened);
}
