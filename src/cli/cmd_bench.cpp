// ctrl bench: training-step throughput on synthetic tokens, with the figures
// that make results from different machines comparable.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "core/sysinfo.h"
#include "model/model.h"
#include "ops/profiled_ops.h"
#include "plan/plan.h"
#include "train/checkpoint.h"
#include "train/synthetic_steps.h"

namespace ctrl::cli {
namespace {

const char* kUsage =
    "usage: ctrl bench --config FILE|PRESET [--steps N] [--warmup N] [--threads N] [--set key=value]... [--json]\n"
    "                  [--profile] [--device cpu|checked|cuda[:N]] [--teacher CKPT]\n\n"
    "Times full training steps (forward, backward, clipping, optimizer) of one micro-batch of\n"
    "synthetic tokens, after --warmup untimed steps (default 2; --steps default 10), and prints\n"
    "it/s, tokens/s, achieved FLOP/s and its share of this machine's measured GEMM peak (of the\n"
    "precision, --set train.precision=bf16 for mixed precision),\n"
    "peak memory (and on a GPU its peak device memory), and the CPU and thread count.\n"
    "--threads N (train.threads) pins the CPU threads; 0 (the default) lets them adapt as in ctrl train.\n"
    "A run that cannot fit in memory is refused before it starts, as ctrl train refuses it.\n"
    "--profile adds the time spent in each op over the timed steps (a table, or \"profile\" in --json).\n"
    "--teacher CKPT (train.teacher) times distillation steps, as ctrl train --teacher runs them: the\n"
    "teacher's forward counts in the executed FLOP/s and its memory in the planned figures.\n"
    "bf16 on a CPU also times training steps of the model in bf16 and in fp32 (cut to the layers that\n"
    "fit in a quarter of the memory available) and advises fp32 where its steps are at least 1.1x faster.\n";

int run(const std::vector<std::string>& argv) {
  Args args("bench", kUsage);
  args.flag("config");
  args.flag("steps");
  args.flag("warmup");
  args.flag("threads");
  args.flag("device");
  args.flag("teacher");
  args.repeated("set");
  args.boolean("json");
  args.boolean("profile");
  if (!args.parse(argv)) return 0;
  Config config = load_config(args.require("config"));
  for (const auto& s : args.all("set")) apply_override(config, s);
  if (args.has("device")) apply_override(config, "train.device=" + args.get("device"));
  if (args.has("teacher")) config.train.teacher = args.get("teacher");
  if (args.has("threads")) config.train.threads = args.get_int("threads", 0, 0, 1 << 16);
  // A step here is one micro-batch: the global batch plays no part, so one that a
  // larger micro-batch does not divide is not worth an error.
  if (config.train.global_batch % config.train.micro_batch != 0) config.train.global_batch = config.train.micro_batch;
  validate(config);
  const int64_t steps = args.get_int("steps", 10, 1, 1 << 30), warmup = args.get_int("warmup", 2, 0, 1 << 30);
  const auto& m = config.model;
  const int64_t B = config.train.micro_batch, T = m.n_ctx;
  auto ops = make_ops(config.train.device, int(config.train.threads));
  {  // as ctrl train does: a run that cannot fit is refused with the figure, before anything is allocated
    const std::optional<ModelConfig> teacher = teacher_of(config);
    plan::check_memory(config, B, 1, plan::on_cuda(config) ? ops->device_room_bytes() : plan::available_memory_bytes(),
                       most_cpu_threads(config.train.threads), teacher ? &*teacher : nullptr);
  }
  if (args.has("profile")) ops = make_profiled_ops(std::move(ops));
  const bool bf16 = config.train.precision == "bf16", cpu_bf16 = bf16 && ops->gpu() < 0;
  // bf16 on a CPU: the products' path as `ctrl train` would choose it.
  const Ops::Bf16Choice bf16_choice =
      cpu_bf16 ? ops->choose_bf16_products(config.train.cpu_bf16, 0.2) : Ops::Bf16Choice{};
  // auto's measurement (2048² operands, and each thread's tile copies when
  // tiled) is over before the model exists: the peak is training's, as in ctrl train.
  if (cpu_bf16) reset_peak_rss();
  SyntheticSteps synthetic(config, *ops);
  const Model& model = synthetic.model();
  const Model* teacher = synthetic.teacher();
  const ModelConfig* teacher_config = teacher ? &teacher->config() : nullptr;
  double seconds = 0, loss = 0;
  int64_t thread_changes = 0;
  int most_threads = ops->threads();  // the CPU run's per-thread memory grows with it
  int timed_threads = ops->threads();  // what the last timed step ran at (adaptation may follow it)
  for (int64_t s = 0; s < warmup + steps; ++s) {
    if (s == warmup) profile_clear(*ops);  // the profile covers the timed steps only
    const auto start = std::chrono::steady_clock::now();
    timed_threads = ops->threads();
    loss = synthetic.step();
    const std::string adapted = ops->between_steps();  // as the trainer does, inside the timing
    if (!adapted.empty()) {
      ++thread_changes;
      std::fprintf(stderr, "note: after step %lld: %s\n", static_cast<long long>(s + 1), adapted.c_str());
      most_threads = std::max(most_threads, ops->threads());
    }
    if (s >= warmup) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Training's peak and profile, read before the GEMM peak and the bf16 probe below run their own.
  const uint64_t peak_rss = peak_rss_bytes(), peak_device = ops->peak_device_bytes();
  const std::vector<OpTime> profile = args.has("profile") ? profile_times(*ops) : std::vector<OpTime>{};
  const double tokens_per_s = double(steps * B * T) / seconds;
  // Model FLOPs (the MFU basis) and what the hardware ran, recomputation included.
  const double flops = train_flops_per_token(m) * tokens_per_s;
  const double teacher_flops_per_token = teacher ? forward_flops_per_token(*teacher_config) : 0.0;
  const double hardware_flops_per_token = train_hardware_flops_per_token(m) + teacher_flops_per_token;
  const double hardware_flops = hardware_flops_per_token * tokens_per_s;
  // The machine's GEMM peak: at the run's threads, or at its CPUs when the run
  // had more threads than those (oversubscribed, the measurement fell below what
  // the CPUs do, and the steps' share rose past 100%).
  double peak = 0;
  if (ops->gpu() < 0 && ops->threads() > usable_cpus()) {
    auto at_cpus = make_ops(config.train.device, usable_cpus());
    if (cpu_bf16) at_cpus->choose_bf16_products(ops->bf16_path(), 0);
    peak = at_cpus->measure_peak_gflops(bf16, 1.0) * 1e9;
  } else {
    peak = ops->measure_peak_gflops(bf16, 1.0) * 1e9;
  }
  nlohmann::ordered_json j;
  j["config"] = config.preset;
  j["parameters"] = model.layout().count();
  j["micro_batch"] = B;
  j["context"] = T;
  j["steps"] = steps;
  j["it_per_s"] = double(steps) / seconds;
  j["tokens_per_s"] = tokens_per_s;
  j["model_flops_per_token"] = train_flops_per_token(m);
  j["hardware_flops_per_token"] = hardware_flops_per_token;
  if (teacher) {
    j["teacher"] = config.train.teacher;
    j["teacher_parameters"] = teacher->layout().count();
    j["teacher_flops_per_token"] = teacher_flops_per_token;
  }
  j["achieved_gflops"] = flops / 1e9;
  j["hardware_gflops"] = hardware_flops / 1e9;
  j["activation_bytes"] = model.activation_layout().bytes();
  j["parameter_bytes"] = model.layout().total * sizeof(float);
  j["gemm_peak_gflops"] = peak / 1e9;
  j["share_of_gemm_peak"] = flops / peak;
  j["peak_rss_bytes"] = peak_rss;
  if (peak_device > 0) j["peak_device_bytes"] = peak_device;
  // A CPU run: what the planner counts for it, at the path its bf16 products
  // took and the most threads it ran.
  uint64_t planned_rss = 0;
  if (ops->gpu() < 0) {
    Config taken = config;
    if (cpu_bf16) taken.train.cpu_bf16 = ops->bf16_path();
    planned_rss = plan::cpu_run_bytes(taken, B, 1, most_threads, teacher_config);
    j["planned_peak_rss_bytes"] = planned_rss;
    j["planned_at_threads"] = most_threads;
  }
  // A GPU run: the plan's buffers and the backend's scratch, which its peak device memory measures.
  const uint64_t planned_device = peak_device > 0 ? plan::gpu_buffer_bytes(config, B, 1, teacher_config) : 0;
  if (planned_device > 0) j["planned_peak_device_bytes"] = planned_device;
  j["final_loss"] = loss;
  j["cpu"] = cpu_model();
  j["device"] = ops->name();
  if (!ops->gpu_name().empty()) j["gpu"] = ops->gpu_name();
  j["threads"] = timed_threads;
  j["usable_cpus"] = usable_cpus();      // what a plan from this file counts the run's most threads from
  j["thread_changes"] = thread_changes;  // the CPU backend's adaptation to a shared machine
  j["openmp_wait"] = openmp_wait_setting();
  j["precision"] = config.train.precision;
  const std::string note = ops->precision_note(activation_dtype(config.train.precision));
  if (!note.empty()) j["precision_note"] = note;
  std::string advice;  // bf16 on a CPU can be slower than fp32, native or emulated: measured, as ctrl train does
  plan::Bf16StepTimes times;
  if (cpu_bf16) {
    j["bf16_products"] = ops->bf16_path();
    if (bf16_choice.native_gflops > 0) {
      j["bf16_native_gflops"] = bf16_choice.native_gflops;
      j["bf16_widened_gflops"] = bf16_choice.widened_gflops;
    }
    times = probe_bf16_steps(config, *ops, 1.0);
    if (times.measured) {
      j["bf16_probe_layers"] = times.layers;
      j["bf16_probe_step_s"] = times.bf16_step_s;
      j["fp32_probe_step_s"] = times.fp32_step_s;
    } else {
      j["bf16_probe_skipped"] = times.skipped;
    }
    advice = plan::bf16_slower_advice(times, ops->bf16_path());
    if (!advice.empty()) j["precision_advice"] = advice;
  }
  if (args.has("profile")) {  // the timed steps' ops, slowest first
    nlohmann::ordered_json ops_json = nlohmann::ordered_json::array();
    for (const OpTime& r : profile)
      ops_json.push_back({{"op", r.op}, {"calls", r.calls}, {"seconds", r.seconds}, {"share", r.share}});
    j["profile"] = ops_json;
  }
  if (args.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    const std::string where =
        ops->gpu_name().empty()
            ? std::to_string(timed_threads) + " threads on " + cpu_model() +
                  (ops->name() == std::string("cpu") ? "" : " (" + std::string(ops->name()) + " backend)")
            : ops->gpu_name() + " (" + ops->name() + ")";
    std::printf("%s: %.2fM parameters, micro-batch %lld x %lld tokens, %s, %s\n", config.preset.c_str(),
                double(model.layout().count()) / 1e6, static_cast<long long>(B), static_cast<long long>(T),
                config.train.precision.c_str(), where.c_str());
    std::printf("  %.3f it/s, %.0f tokens/s\n", double(steps) / seconds, tokens_per_s);
    std::printf("  %.1f GFLOP/s achieved = %.0f%% of the measured %s GEMM peak (%.1f GFLOP/s)\n", flops / 1e9,
                100.0 * flops / peak, bf16 ? "bf16" : "fp32", peak / 1e9);
    std::printf("  %.1f MFLOP per token (model), %.1f with recomputation%s (hardware: %.1f GFLOP/s)\n",
                train_flops_per_token(m) / 1e6, hardware_flops_per_token / 1e6,
                teacher ? " and the teacher's forward" : "", hardware_flops / 1e9);
    if (teacher)
      std::printf("  teacher %s: %.2fM parameters, forward %.1f MFLOP per token\n", config.train.teacher.c_str(),
                  double(teacher->layout().count()) / 1e6, teacher_flops_per_token / 1e6);
    std::printf("  activations %.1f MiB, parameters %.1f MiB\n", double(model.activation_layout().bytes()) / (1 << 20),
                double(model.layout().total * sizeof(float)) / (1 << 20));
    std::printf("  peak memory %.0f MiB", double(peak_rss) / (1 << 20));
    if (planned_rss > 0)
      std::printf(" (the plan counts %.0f MiB at %d threads)", double(planned_rss) / (1 << 20), most_threads);
    std::printf("\n");
    if (peak_device > 0)
      std::printf("  peak device memory %.0f MiB (the plan counts %.0f MiB of buffers)\n",
                  double(peak_device) / (1 << 20), double(planned_device) / (1 << 20));
    if (cpu_bf16) std::printf("  bf16 products: %s\n", bf16_choice.describe().c_str());
    if (cpu_bf16 && advice.empty())  // the advice names both figures itself
      std::printf("  %s\n", plan::bf16_step_times_text(times).c_str());
    if (!note.empty()) std::printf("  note: %s\n", note.c_str());
    if (!advice.empty()) std::printf("  advice: %s\n", advice.c_str());
  }
  if (args.has("profile") && !args.has("json"))
    std::printf("\ntime per op over the %lld timed steps:\n%s", static_cast<long long>(steps),
                profile_report(profile).c_str());
  return 0;
}

CommandRegistration registration({"bench", "time training steps on synthetic tokens (throughput, FLOP/s, memory)",
                                  run});

}  // namespace
}  // namespace ctrl::cli
