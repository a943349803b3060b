// ctrl plan: does a model fit, at what batch, how long does training take and
// what does it cost, from the engine's own layout tables (plan/plan.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/sysinfo.h"
#include "model/layout.h"
#include "ops/ops.h"
#include "plan/plan.h"
#include "train/checkpoint.h"
#include "train/synthetic_steps.h"

namespace ctrl::cli {
namespace {

// A million ranks: past any machine, and the products stay in range.
constexpr int64_t kMaxRanks = int64_t(1) << 20;

const char* kUsage =
    "usage: ctrl plan --config FILE|PRESET --tokens N [--set section.key=value]... [--precision fp32|bf16|fp16]\n"
    "                 (--hardware cpu | --machine BENCH.json | --gpu NAME [--gpus N] [--nodes M]"
    " [--machine BENCH.json])\n"
    "                 [--micro-batch B] [--zero 0|1] [--network-gbps G] [--mfu U] [--memory-gb G]\n"
    "                 [--price-per-hour P] [--teacher CKPT] [--json]\n\n"
    "Says whether a model trains on the given hardware before anyone rents it: parameters, memory per\n"
    "rank (fp32 weights, low-precision copy, gradients, optimizer state, activations, workspace,\n"
    "runtime overhead), whether it fits, the largest micro-batch, gradient accumulation, FLOPs,\n"
    "tokens/s, all-reduce time per step, days to train --tokens (e.g. 10e9) and the cost.\n"
    "  --hardware cpu      this machine (memory from /proc/meminfo, GEMM peak measured now, 0.5 s)\n"
    "  --machine FILE      a CPU measured by `ctrl bench --json`: calibrates the utilisation; with --gpu,\n"
    "                      a GPU run (`ctrl bench --device cuda --json`) calibrates the GPU's utilisation\n"
    "  --gpu NAME          from the built-in datasheet table (T4, RTX-3090, RTX-4090, A100-40GB, A100-80GB,\n"
    "                      H100, H100-PCIe, H200, ...: docs/planning.md) or as nvidia-smi names it; GPUs\n"
    "                      older than sm_75 (K80, P100, V100) are planned for comparison: ctrl cannot run there;\n"
    "                      --gpus per node (default 1), --nodes (default 1)\n"
    "  --micro-batch B     plan with B (default: the largest that fits, dividing the per-rank batch)\n"
    "  --zero 1            shard the optimizer state over the data-parallel ranks (ZeRO stage 1)\n"
    "  --network-gbps G    bandwidth between nodes in Gb/s (default 100)\n"
    "  --mfu U             model-FLOPs utilisation instead of the default or calibrated one\n"
    "  --memory-gb G       CPU memory instead of this machine's\n"
    "  --price-per-hour P  per GPU (or per machine for CPUs); adds the cost\n"
    "  --teacher CKPT      distillation (ctrl train --teacher): counts the teacher's forward-only model in\n"
    "                      memory and its forward pass in the FLOPs of every step (also train.teacher)\n"
    "With CTRL_CUDA_ATTENTION=fused in the environment, as for the run, a GPU plan counts the fused\n"
    "attention's memory where its kernels apply (bf16, heads of 64 or 80 columns).\n";

int run(const std::vector<std::string>& argv) {
  Args args("plan", kUsage);
  for (const char* f : {"config", "tokens", "precision", "hardware", "machine", "gpu", "gpus", "nodes",
                        "micro-batch", "zero", "network-gbps", "mfu", "memory-gb", "price-per-hour", "teacher"})
    args.flag(f);
  args.repeated("set");
  args.boolean("json");
  if (!args.parse(argv)) return 0;

  plan::Request r;
  r.config = load_config(args.require("config"));
  for (const auto& s : args.all("set")) apply_override(r.config, s);
  if (args.has("precision")) apply_override(r.config, "train.precision=" + args.get("precision"));
  if (args.has("teacher")) r.config.train.teacher = args.get("teacher");
  // With --micro-batch B the config's own micro-batch (a preset's 16 against
  // --set train.global_batch=8) is not what the plan runs: validate with the
  // largest that divides both. A B that does not divide the batch is planned,
  // with a note on the global batch train needs.
  if (args.has("micro-batch"))
    r.config.train.micro_batch =
        std::gcd(args.get_int("micro-batch", 0, 1, 1 << 24), std::max<int64_t>(1, r.config.train.global_batch));
  validate(r.config);
  r.teacher = teacher_of(r.config);
  r.tokens = args.get_double("tokens", 0, 0, 1e18, true);
  if (!args.has("tokens")) fail("ctrl plan: missing --tokens (how many tokens to train on, e.g. 10e9)");

  const int kinds = int(args.has("gpu")) + int(args.has("hardware") || (args.has("machine") && !args.has("gpu")));
  if (kinds != 1)
    fail("ctrl plan: give exactly one of --hardware cpu, --machine BENCH.json or --gpu NAME [--machine BENCH.json]");
  if (args.has("hardware") && args.get("hardware") != "cpu")
    fail("ctrl plan: --hardware " + args.get("hardware") + ": expected cpu (GPUs: --gpu NAME)");
  r.gpu = args.get("gpu");
  r.gpus_per_node = int(args.get_int("gpus", 1, 1, 1 << 16));
  r.nodes = int(args.get_int("nodes", 1, 1, 1 << 20));
  if (int64_t(r.gpus_per_node) * r.nodes > kMaxRanks)
    fail("ctrl plan: --gpus " + std::to_string(r.gpus_per_node) + " x --nodes " + std::to_string(r.nodes) + " = " +
         std::to_string(int64_t(r.gpus_per_node) * r.nodes) + " ranks: expected at most " + std::to_string(kMaxRanks));
  r.micro_batch = args.get_int("micro-batch", 0, 1, 1 << 24);
  r.zero = int(args.get_int("zero", 0, 0, 1));
  r.network_gbps = args.get_double("network-gbps", 100, 0, 1e9, true);
  r.network_gbps_given = args.has("network-gbps");
  r.mfu = args.get_double("mfu", 0, 0, 1, true);
  r.price_per_hour = args.get_double("price-per-hour", 0, 0, 1e12);
  if (args.has("memory-gb")) {
    if (r.gpu.size()) fail("ctrl plan: --memory-gb is for CPUs; a GPU's memory comes from the table");
    const double g = args.get_double("memory-gb", 0, 0, 1e9, true);
    r.cpu_memory_bytes = uint64_t(g * double(1ull << 30));
  }
  if (args.has("machine")) r.machine = plan::load_machine(args.get("machine"));
  std::unique_ptr<Ops> cpu;
  Ops::Bf16Choice bf16_choice;  // bf16 on this CPU: the products' path the plan's peak was measured on
  double measured_share = 1;    // of the CPU time this process's threads could have had while it timed the CPU
  if (r.gpu.empty()) {
    cpu = make_ops("cpu", int(r.config.train.threads));  // the run's thread count: the peak it will see
    const double cpu_before = process_cpu_seconds();
    const auto wall_before = std::chrono::steady_clock::now();
    r.cpu_name = cpu_model();
    r.cpu_threads = cpu->threads();
    if (!r.machine) r.memory_threads = most_cpu_threads(r.config.train.threads);  // a run on this machine
    const bool calibrated = r.machine && r.machine->precision == r.config.train.precision;
    // auto's measurement of the chosen path is the plan's bf16 peak; a pinned path is measured.
    if (r.config.train.precision == "bf16") {
      bf16_choice = cpu->choose_bf16_products(r.config.train.cpu_bf16, 0.5);
      r.config.train.cpu_bf16 = bf16_choice.widened ? "widened" : "native";  // the memory of the path taken
    }
    const double chosen = bf16_choice.widened ? bf16_choice.widened_gflops : bf16_choice.native_gflops;
    // fp16 runs its products widened to fp32 (precision_note says so below): fp32's peak.
    if (!calibrated)
      r.cpu_peak_gflops = chosen > 0 ? chosen : cpu->measure_peak_gflops(r.config.train.precision == "bf16", 0.5);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
    if (wall > 0.2)
      measured_share = (process_cpu_seconds() - cpu_before) / (wall * std::min(cpu->threads(), usable_cpus()));
  }
  plan::Plan p = plan::make_plan(r);
  if (r.gpu.empty()) {  // bf16 on a CPU: emulated, or native and still slower than fp32
    std::string advice;
    if (r.config.train.precision == "bf16" && p.hours_no_overlap > 0 && p.micro_batch > 0) {
      Config probed = r.config;  // at most the config's micro-batch: seconds, not the minutes of a large one
      probed.train.micro_batch = std::min(p.micro_batch, r.config.train.micro_batch);
      // Three steps in each precision (one untimed) at the planned speed of one rank, and building both models.
      const double seconds =
          1.0 + 6.0 * double(probed.train.micro_batch * r.config.model.n_ctx) / (p.tokens_per_s / p.ranks);
      std::fprintf(stderr, "timing bf16 and fp32 training steps of %s on this CPU (about %.0f s)...\n",
                   r.config.preset.c_str(), seconds);
      const plan::Bf16StepTimes times = probe_bf16_steps(probed, *cpu, 0.5);
      // A step of the whole model measured here knows what the default utilisation cannot (this model on
      // this CPU, as loaded as it is now): the plan takes the step's throughput, unless a bench file or --mfu
      // gave one. A step of a cut model or with a teacher stays advice only.
      if (times.measured && times.layers == times.of_layers && !r.teacher && p.mfu_source == "default") {
        const double step_tokens_per_s = double(probed.train.micro_batch * r.config.model.n_ctx) / times.bf16_step_s;
        r.mfu = std::min(1.0, p.mfu * step_tokens_per_s / (p.tokens_per_s / p.ranks));
        r.mfu_source = "measured by a bf16 training step of this model at micro-batch " +
                       std::to_string(probed.train.micro_batch) + " on this CPU";
        p = plan::make_plan(r);
      }
      if (!times.measured) p.notes.push_back(plan::bf16_step_times_text(times));
      advice = plan::bf16_slower_advice(times, cpu->bf16_path(), p.hours_no_overlap * 3600);
    }
    const std::string note = cpu->precision_note(activation_dtype(r.config.train.precision));
    if (!note.empty()) p.notes.push_back(note);
    if (r.config.train.precision == "bf16") p.notes.push_back("bf16 products " + bf16_choice.describe());
    if (!advice.empty()) p.notes.push_back(advice);
    // Beside another busy process the products ran slower than this CPU runs them: the plan reads low. Quiet,
    // the products keep every thread busy; beside one busy loop per CPU its threads ran about half the time.
    constexpr double kQuietCpuShare = 0.8;
    if (measured_share < kQuietCpuShare && p.mfu_source.rfind("calibrated", 0) != 0)
      p.notes.push_back("other processes took CPU time while this plan timed the CPU (its threads ran " +
                        std::to_string(int(100 * measured_share + 0.5)) +
                        "% of the time): the GEMM peak and the throughput read low; plan on a quiet machine, or "
                        "calibrate with --machine from ctrl bench --json");
  }
  std::printf("%s", args.has("json") ? (plan::plan_json(p) + "\n").c_str() : plan::plan_text(p).c_str());
  return 0;
}

CommandRegistration registration({"plan", "does a model fit, at what batch, how long and at what cost (before renting)",
                                   run});

}  // namespace
}  // namespace ctrl::cli
