#include "plan/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/progress.h"
#include "core/sysinfo.h"
#include "model/layout.h"

namespace ctrl::plan {

int optimizer_state_copies(const std::string& optimizer) {
  if (optimizer == "adamw") return 2;    // first and second moments (train/optimizer.cpp: m_, v_)
  if (optimizer == "adagrad") return 1;  // the accumulator (v_)
  fail("plan: train.optimizer must be adamw or adagrad, got '" + optimizer + "'");
}

int activation_bytes_per_element(const std::string& precision) {
  if (precision == "fp32") return 4;
  if (precision == "bf16" || precision == "fp16") return 2;
  fail("plan: train.precision must be fp32, bf16 or fp16, got '" + precision + "'");
}

namespace {
// The bytes of one rank from the layout totals: p parameter elements (padding
// included), `saved` and `scratch` activation units of 4 bytes.
Memory memory_from(const Config& config, uint64_t p, uint64_t saved, uint64_t scratch, uint64_t tokens, int zero_ranks,
                   uint64_t overhead) {
  const uint64_t low_bytes = uint64_t(activation_bytes_per_element(config.train.precision));
  // ZeRO-1 (train/trainer.cpp): shards of ceil(total / N), buffers padded to N shards.
  const uint64_t shard = (p + uint64_t(zero_ranks) - 1) / uint64_t(zero_ranks);
  const uint64_t padded = zero_ranks > 1 ? shard * uint64_t(zero_ranks) : p;
  Memory m;
  m.weights = padded * 4;
  m.weights_lowp = low_bytes == 4 ? 0 : (p * low_bytes + 63) / 64 * 64;  // the engine's 16-bit copy (Buffer16)
  m.grads = padded * 4;
  m.optimizer = uint64_t(optimizer_state_copies(config.train.optimizer)) * shard * 4;
  m.grad_shard = zero_ranks > 1 ? shard * 4 : 0;
  // The layout counts 4-byte units; its 16-bit slots already take half of one each.
  m.activations = saved * 4;
  m.workspace = scratch * 4;
  m.batch = 2 * ((tokens * 4 + 63) / 64 * 64);  // Model's tokens_ and targets_
  m.overhead = overhead;
  return m;
}

// Layout totals: parameter elements, saved and scratch activation units.
struct Totals {
  uint64_t params, saved, scratch, tokens;
};
Totals layout_totals(const Config& config, int64_t micro_batch) {
  const ParamLayout params = make_param_layout(config.model);
  const AttentionSavedBytes attention_saved =
      on_cuda(config) ? cuda_attention_saved(cuda_attention_fusion_requested()) : AttentionSavedBytes();
  const ActivationLayout acts =
      make_activation_layout(config.model, micro_batch, activation_dtype(config.train.precision), 0, attention_saved);
  return {uint64_t(params.total), uint64_t(acts.saved), uint64_t(acts.scratch), uint64_t(acts.B * acts.T)};
}
}  // namespace

ModelConfig teacher_forward_config(const ModelConfig& teacher) {
  ModelConfig t = teacher;
  t.recompute = "layers";
  return t;
}

namespace {
// The teacher's buffers: what Model(teacher_forward_config(t), ops, B, low, false) allocates.
uint64_t teacher_bytes(const Config& student, const ModelConfig& teacher, int64_t micro_batch) {
  Config t = student;
  t.model = teacher_forward_config(teacher);
  const Totals x = layout_totals(t, micro_batch);
  const Memory m = memory_from(t, x.params, x.saved, x.scratch, x.tokens, 1, 0);
  return m.weights + m.weights_lowp + m.activations + m.workspace + m.batch;
}
}  // namespace

Memory memory_for(const Config& config, int64_t micro_batch, int zero_ranks, uint64_t overhead,
                  const ModelConfig* teacher) {
  CTRL_ASSERT(micro_batch >= 1 && zero_ranks >= 1);
  const Totals t = layout_totals(config, micro_batch);
  Memory m = memory_from(config, t.params, t.saved, t.scratch, t.tokens, zero_ranks, overhead);
  if (teacher) m.teacher = teacher_bytes(config, *teacher, micro_batch);
  return m;
}

uint64_t engine_buffer_bytes(const Config& config, int64_t micro_batch) {
  return memory_for(config, micro_batch, 1, 0).buffers();
}

// Vendors' datasheet figures, dense (without 2:4 sparsity), boost clocks:
// K80 (per GK210, half the board), T4, P100, V100, A100, H100 and H200
// datasheets (SXM and PCIe cards); the Ampere GA102 and Ada AD102
// whitepapers for RTX 3090 / 4090 (fp16/bf16 tensor with fp32 accumulate);
// GTX 1080 Ti from NVIDIA's spec page (3584 cores × 1582 MHz × 2, fp16 at
// 1/64 rate on GP102). Link bandwidth is the published total of both
// directions per GPU (NVLink aggregate, or PCIe x16). 0 marks arithmetic the
// chip does not have. Memory is nvidia-smi's total, below the datasheet's
// "GB" (H200: 143,771 MiB in bench/results/gpu-h200-2026-12-04.md); where
// drivers report two figures (A100 40 GB: 40,536 and 40,960 MiB), the lower.
const std::vector<GpuSpec>& gpu_table() {
  static const std::vector<GpuSpec> table = {
      {"K80", 37, 12, 11441, 4.37, 0, 0, 0, 240, "PCIe 3.0 x16", 32, false,
       "one GK210 of the dual-GPU board (as clouds and Colab expose it); Kepler: no fp16/bf16 arithmetic"},
      {"T4", 75, 16, 15360, 8.1, 0, 65, 0, 320, "PCIe 3.0 x16", 32, true, "Turing: fp16 tensor cores, no bf16 or tf32"},
      {"P100", 60, 16, 16280, 9.3, 0, 18.7, 0, 732, "PCIe 3.0 x16", 32, false,
       "PCIe card; fp16 at twice fp32, no tensor cores, no bf16"},
      {"P100-SXM2", 60, 16, 16280, 10.6, 0, 21.2, 0, 732, "NVLink 1", 160, false,
       "fp16 at twice fp32, no tensor cores, no bf16"},
      {"V100-16GB", 70, 16, 16160, 15.7, 0, 125, 0, 900, "NVLink 2", 300, true, "SXM2; Volta: no bf16 or tf32"},
      {"V100-32GB", 70, 32, 32480, 15.7, 0, 125, 0, 900, "NVLink 2", 300, true, "SXM2; Volta: no bf16 or tf32"},
      {"V100-16GB-PCIe", 70, 16, 16160, 14, 0, 112, 0, 900, "PCIe 3.0 x16", 32, true, "Volta: no bf16 or tf32"},
      {"V100-32GB-PCIe", 70, 32, 32480, 14, 0, 112, 0, 900, "PCIe 3.0 x16", 32, true, "Volta: no bf16 or tf32"},
      {"GTX-1080-Ti", 61, 11, 11264, 11.34, 0, 0.177, 0, 484, "PCIe 3.0 x16", 32, false,
       "Pascal GP102: fp16 arithmetic at 1/64 of fp32, no bf16; train it in fp32"},
      {"RTX-3090", 86, 24, 24576, 35.6, 35.6, 71, 71, 936, "PCIe 4.0 x16", 64, true,
       "GeForce: tensor fp16/bf16 with fp32 accumulate at half the fp16-accumulate rate (142)"},
      {"RTX-4090", 89, 24, 24564, 82.6, 82.6, 165.2, 165.2, 1008, "PCIe 4.0 x16", 64, true,
       "GeForce: tensor fp16/bf16 with fp32 accumulate (330 with fp16 accumulate); no NVLink"},
      {"A100-40GB", 80, 40, 40536, 19.5, 156, 312, 312, 1555, "NVLink 3", 600, true, "SXM4"},
      {"A100-80GB", 80, 80, 81920, 19.5, 156, 312, 312, 2039, "NVLink 3", 600, true, "SXM4"},
      {"A100-40GB-PCIe", 80, 40, 40536, 19.5, 156, 312, 312, 1555, "PCIe 4.0 x16", 64, true,
       "PCIe card (an NVLink bridge joins two at 600 GB/s)"},
      {"A100-80GB-PCIe", 80, 80, 81920, 19.5, 156, 312, 312, 1935, "PCIe 4.0 x16", 64, true,
       "PCIe card (an NVLink bridge joins two at 600 GB/s)"},
      {"H100", 90, 80, 81559, 67, 494.5, 989.5, 989.5, 3350, "NVLink 4", 900, true, "SXM5 80 GB"},
      {"H100-PCIe", 90, 80, 81559, 51, 378, 756, 756, 2000, "PCIe 5.0 x16", 128, true,
       "PCIe card (an NVLink bridge joins two at 600 GB/s)"},
      {"H200", 90, 141, 143771, 67, 494.5, 989.5, 989.5, 4800, "NVLink 4", 900, true, "SXM 141 GB"},
  };
  return table;
}

static std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

namespace {
// A GPU's name split into what tells chips apart: the chip's own words
// ("a100", "rtx 4090"), the memory ("80gb") and the form factor, without the
// vendor's words and memory types that name no other chip.
struct GpuNameParts {
  std::vector<std::string> chip;
  std::string memory;  // "80gb", or empty
  std::string form;    // "pcie", "sxm", or empty
};

GpuNameParts gpu_name_parts(const std::string& name) {
  GpuNameParts parts;
  std::string word;
  auto take = [&] {
    if (word.empty()) return;
    const bool gb = word.size() > 2 && word.compare(word.size() - 2, 2, "gb") == 0 &&
                    std::all_of(word.begin(), word.end() - 2, [](char c) { return std::isdigit(uint8_t(c)); });
    if (gb)
      parts.memory = word;
    else if (word == "pcie")
      parts.form = "pcie";
    else if (word.rfind("sxm", 0) == 0)
      parts.form = "sxm";
    else if (word != "nvidia" && word != "tesla" && word != "geforce" && word.rfind("hbm", 0) != 0)
      parts.chip.push_back(word);
    word.clear();
  };
  for (char c : lower(name) + " ") {
    if (c == ' ' || c == '-' || c == '_')
      take();
    else
      word += c;
  }
  return parts;
}

// The table's entries that a name can mean: the same chip words; the same
// memory where the name gives one; a PCIe card for "PCIe", an NVLink one for
// "SXM", and for neither the entry that names no form factor.
std::vector<const GpuSpec*> gpus_named(const std::string& name) {
  const GpuNameParts want = gpu_name_parts(name);
  std::vector<const GpuSpec*> found;
  for (const auto& g : gpu_table()) {
    const GpuNameParts entry = gpu_name_parts(g.name);
    if (entry.chip != want.chip) continue;
    if (!want.memory.empty() && want.memory != std::to_string(g.nominal_gb) + "gb") continue;
    const bool pcie_card = g.link.rfind("PCIe", 0) == 0;
    if (want.form == "pcie" ? !pcie_card : want.form == "sxm" ? pcie_card : !entry.form.empty()) continue;
    found.push_back(&g);
  }
  return found;
}

// The one entry a driver's device name means (a bench file's "gpu"), or null.
const GpuSpec* gpu_named_in(const std::string& device_name) {
  const auto found = gpus_named(device_name);
  return found.size() == 1 ? found[0] : nullptr;
}
}  // namespace

const GpuSpec& find_gpu(const std::string& name) {
  const auto found = gpus_named(name);
  if (found.size() == 1) return *found[0];
  std::string listed;
  for (const GpuSpec* g : found) listed += (listed.empty() ? "" : " or ") + g->name;
  if (!found.empty()) fail("ctrl plan: --gpu " + name + " could be " + listed + ": name one");
  for (const auto& g : gpu_table()) listed += (listed.empty() ? "" : ", ") + g.name;
  fail("ctrl plan: --gpu " + name + ": unknown GPU (known: " + listed + ")");
}

double gpu_peak_tflops(const GpuSpec& g, const std::string& precision) {
  const double t = precision == "fp32" ? g.fp32_tflops
                   : precision == "fp16" ? g.fp16_tflops
                   : precision == "bf16" ? g.bf16_tflops
                                         : -1;
  if (t < 0) fail("ctrl plan: precision must be fp32, bf16 or fp16, got '" + precision + "'");
  if (t == 0) fail("ctrl plan: " + g.name + " has no " + precision + " arithmetic (" + g.note + ")");
  return t;
}

MachineProfile parse_machine(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    fail(where + ": not valid JSON (expected the output of `ctrl bench --json`)");
  }
  if (!j.is_object()) fail(where + ": expected a JSON object from `ctrl bench --json`");
  auto number = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number())
      fail(where + ": key '" + key + "': expected a number (the output of `ctrl bench --json`)");
    return j[key].get<double>();
  };
  auto text_of = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_string())
      fail(where + ": key '" + key + "': expected a string (the output of `ctrl bench --json`)");
    return j[key].get<std::string>();
  };
  MachineProfile m;
  m.path = where;
  m.tokens_per_s = number("tokens_per_s");
  m.achieved_gflops = number("achieved_gflops");
  m.gemm_peak_gflops = number("gemm_peak_gflops");
  m.share_of_gemm_peak = number("share_of_gemm_peak");
  m.peak_rss_bytes = uint64_t(number("peak_rss_bytes"));
  m.threads = int64_t(number("threads"));
  if (j.contains("usable_cpus")) m.usable_cpus = int64_t(number("usable_cpus"));
  m.cpu = text_of("cpu");
  m.precision = text_of("precision");
  if (j.contains("device")) m.device = text_of("device");  // files from before the field: CPU runs
  if (m.device != "cpu" && m.device != "cuda")
    fail(where + ": key 'device': expected cpu or cuda, got '" + m.device + "'");
  if (j.contains("config") && j["config"].is_string()) m.config = j["config"].get<std::string>();
  if (j.contains("parameters")) m.parameters = uint64_t(number("parameters"));
  if (j.contains("teacher")) m.teacher = text_of("teacher");
  if (m.device == "cuda") m.gpu = j.contains("gpu") ? text_of("gpu") : "an unnamed GPU";
  if (!(m.gemm_peak_gflops > 0) || !(m.share_of_gemm_peak > 0) || m.share_of_gemm_peak > 1.5)
    fail(where + ": gemm_peak_gflops must be positive and share_of_gemm_peak in (0, 1.5]");
  m.hardware_share = j.contains("hardware_gflops") ? number("hardware_gflops") / m.gemm_peak_gflops
                                                    : m.share_of_gemm_peak;
  return m;
}

MachineProfile load_machine(const std::string& path) {
  if (!file_exists(path)) fail(path + ": no such file (expected the output of `ctrl bench --json`)");
  return parse_machine(read_file(path), path);
}

uint64_t host_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    f.ignore(1 << 20, '\n');
  }
  fail("/proc/meminfo: no MemTotal line (pass --memory-gb)");
}

namespace {

// "max" or a byte count; UINT64_MAX when there is no limit or no file.
uint64_t read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return UINT64_MAX;
  try {
    return std::stoull(v);
  } catch (...) {
    return UINT64_MAX;
  }
}

uint64_t read_stat(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  uint64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

// Room under a cgroup's limit: limit - (usage - page cache, which the kernel reclaims first).
uint64_t cgroup_room(uint64_t limit, uint64_t usage, uint64_t cache) {
  if (limit == UINT64_MAX) return UINT64_MAX;
  const uint64_t used = usage > cache ? usage - cache : 0;
  return limit > used ? limit - used : 0;
}

}  // namespace

uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0, available = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") available = kb * 1024;
    f.ignore(1 << 20, '\n');
  }
  if (available == 0) return 0;
  // cgroup v2: this process's group ("0::/path" in /proc/self/cgroup) and every one above it.
  std::ifstream cg("/proc/self/cgroup");
  std::string line, v2_path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
  if (!v2_path.empty()) {
    for (std::string p = v2_path;; p = p.substr(0, p.rfind('/'))) {
      const std::string dir = "/sys/fs/cgroup" + (p == "/" ? std::string() : p);
      available = std::min(available, cgroup_room(read_limit(dir + "/memory.max"), read_limit(dir + "/memory.current"),
                                                   read_stat(dir + "/memory.stat", "file")));
      if (p.empty() || p == "/") break;
    }
  }
  // cgroup v1 (the memory controller's root as the container sees it).
  const std::string v1 = "/sys/fs/cgroup/memory/";
  available = std::min(available, cgroup_room(read_limit(v1 + "memory.limit_in_bytes"),
                                              read_limit(v1 + "memory.usage_in_bytes"),
                                              read_stat(v1 + "memory.stat", "total_cache")));
  return available;
}

Memory memory_estimate(const Config& config, int64_t micro_batch, int zero_ranks, uint64_t overhead,
                       const ModelConfig* teacher) {
  CTRL_ASSERT(micro_batch >= 1 && zero_ranks >= 1);
  const int64_t L = config.model.n_layer;
  // A teacher is counted from its layout (a model that trained on this machine is small enough).
  if (L <= 64) return memory_for(config, micro_batch, zero_ranks, overhead, teacher);
  Config one = config, two = config;
  one.model.n_layer = 1;
  two.model.n_layer = 2;
  const Totals a = layout_totals(one, micro_batch), b = layout_totals(two, micro_batch);
  const uint64_t more = uint64_t(L - 1);
  auto grow = [&](uint64_t x1, uint64_t x2) { return x1 + more * (x2 - x1); };
  Memory m = memory_from(config, grow(a.params, b.params), grow(a.saved, b.saved), grow(a.scratch, b.scratch), a.tokens,
                         zero_ranks, overhead);
  if (teacher) m.teacher = teacher_bytes(config, *teacher, micro_batch);
  return m;
}

// Model::init_weights' host staging, before the first step, stays well inside
// the runtime overhead, which the step's own scratch fills.
static_assert(kInitStagingFloats * sizeof(float) <= kCpuRuntimeOverheadBytes / 8);

namespace {
// A CPU bf16 run pinned to oneDNN's bf16 kernels: its products take bf16
// operands, and only an fp32 output gradient needs a (bf16) copy.
bool native_bf16_products(const TrainConfig& t) { return t.precision == "bf16" && t.cpu_bf16 == "native"; }
}  // namespace

uint64_t cpu_widened_bytes(const Config& config, int64_t micro_batch, int threads, const ModelConfig* teacher) {
  const TrainConfig& t = config.train;
  const uint64_t N = uint64_t(micro_batch) * uint64_t(config.model.n_ctx), T = uint64_t(config.model.n_ctx),
                 V = uint64_t(config.model.vocab_size);
  // Each scratch slot grows to the largest product that uses it: a teacher's
  // forward (distillation) runs through the same slots, so a wider teacher's
  // products set them.
  std::vector<const ModelConfig*> models = {&config.model};
  if (teacher) models.push_back(teacher);
  uint64_t inputs = 0, weights = 0, outputs = 0, widest_inner = N, head_width = 0;
  for (const ModelConfig* m : models) {
    const uint64_t D = uint64_t(m->d_model), F = uint64_t(m->d_ff), E = uint64_t(embedding_width(*m));
    // The linear layers: qkv D→3D, attention output D→D, FFN D→F and F→D, a factorized head's D→E.
    inputs = std::max(inputs, N * std::max(D, F));
    weights = std::max({weights, 3 * D * D, F * D, E * D});
    outputs = std::max(outputs, N * std::max({3 * D, F, E}));
    widest_inner = std::max({widest_inner, F, 3 * D, E});
    head_width = std::max(head_width, E);
  }
  // bf16 products (ops/cpu/linear.cpp, CpuOps::bf16_scratch): an fp32 output
  // gradient (the residual stream's into the attention output and FFN out
  // projections, D wide; a factorized head's into its D→E projection, E wide)
  // rounded to bf16 once for both backward products. Only the student has
  // gradients.
  if (native_bf16_products(t)) return 2 * N * std::max<uint64_t>(config.model.d_model, embedding_width(config.model));
  const bool fp16 = t.precision == "fp16", bf16 = t.precision == "bf16";
  if (!fp16 && !bf16) return 0;
  uint64_t per_thread = 0;
  if (fp16) {  // the head's h and embedding, whole
    inputs = std::max(inputs, N * head_width), weights = std::max(weights, V * head_width);
  } else {
    // The head's row chunk against a vocabulary block (ops/cpu/lm_head.cpp),
    // a head's T×T, or a tiled product's operands, whose inner dimension is
    // at most max(F, 3D, E) (forward, input gradient) or N (weight gradient).
    const uint64_t rows = std::min<uint64_t>(N, uint64_t(kHeadChunkRows)),
                   block = std::min<uint64_t>(V, uint64_t(cpu_head_vocab_block()));
    const uint64_t tile = uint64_t(cpu_tile_operand_rows()) * widest_inner;
    per_thread =
        std::max(std::max(rows * std::max(head_width, block), T * T) + std::max(block * head_width, T * T), tile);
  }
  return 4 * (inputs + weights + outputs + uint64_t(std::max(threads, 1)) * per_thread);
}

uint64_t cpu_thread_bytes(int threads) {
  return kCpuBytesPerThread * uint64_t(std::max(0, threads - kCpuOverheadThreads));
}

uint64_t cpu_run_bytes(const Config& config, int64_t micro_batch, int zero_ranks, int threads,
                       const ModelConfig* teacher, int ranks) {
  return memory_estimate(config, micro_batch, zero_ranks, kCpuRuntimeOverheadBytes, teacher).total() +
         cpu_widened_bytes(config, micro_batch, threads, teacher) + cpu_thread_bytes(threads) +
         (ranks > 1 ? kMpiRankBytes : 0);
}

uint64_t gpu_scratch_bytes(const Config& config, int64_t micro_batch, const ModelConfig* teacher) {
  return cuda_scratch_bytes(config.model, micro_batch, activation_dtype(config.train.precision), teacher,
                            cuda_attention_fusion_requested());
}

uint64_t gpu_buffer_bytes(const Config& config, int64_t micro_batch, int zero_ranks, const ModelConfig* teacher) {
  Config on_gpu = config;  // counted as the CUDA backend keeps it, whatever the config names
  on_gpu.train.device = "cuda";
  return memory_estimate(on_gpu, micro_batch, zero_ranks, 0, teacher).buffers() +
         gpu_scratch_bytes(on_gpu, micro_batch, teacher);
}

int64_t largest_micro_batch(const std::function<bool(int64_t)>& fits) {
  if (!fits(1)) return 0;
  constexpr int64_t kMost = int64_t(1) << 24;  // the most --micro-batch and train.micro_batch take
  int64_t lo = 1, hi = 2;                      // lo fits; hi does not, or is past kMost
  while (hi <= kMost && fits(hi)) lo = hi, hi *= 2;
  hi = std::min(hi, kMost + 1);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

bool on_cuda(const Config& config) { return config.train.device.rfind("cuda", 0) == 0; }

void check_memory(const Config& config, int64_t micro_batch, int zero_ranks, uint64_t available, int threads,
                  const ModelConfig* teacher, int ranks, int ranks_on_host) {
  if (available == 0) return;  // unknown: nothing to check against
  CTRL_ASSERT(ranks_on_host >= 1);
  const bool cpu = !on_cuda(config);
  const uint64_t sharing = cpu ? uint64_t(ranks_on_host) : 1;  // processes whose memory this host holds
  auto need = [&](int64_t b) {
    return cpu ? cpu_run_bytes(config, b, zero_ranks, threads, teacher, ranks)
               : gpu_buffer_bytes(config, b, zero_ranks, teacher);
  };
  auto fits = [&](int64_t b) { return need(b) * sharing <= available; };
  if (fits(micro_batch)) return;
  auto gib = [](uint64_t x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(x) / double(1ull << 30));
    return std::string(buf);
  };
  std::string fit;
  if (!fits(1)) {
    fit = "not even micro-batch 1 fits (" + gib(need(1)) + (sharing > 1 ? " per rank" : "") +
          "); choose a smaller model" + (sharing > 1 ? " or fewer ranks per host" : "");
  } else {
    // ... and, since train.global_batch must be a multiple of micro-batch x ranks, the largest such that fits.
    const int64_t lo = largest_micro_batch(fits), per_rank = std::max<int64_t>(1, config.train.global_batch / ranks);
    int64_t runs = std::min(lo, per_rank);
    while (per_rank % runs != 0) --runs;
    fit = "the largest micro-batch that fits is " + std::to_string(lo) +
          (runs == lo ? std::string()
                      : ", and the largest that divides train.global_batch / ranks (" + std::to_string(per_rank) +
                            ") is " + std::to_string(runs)) +
          " (--set train.micro_batch=" + std::to_string(runs) + ")";
  }
  const uint64_t bytes = need(micro_batch);
  fail("config " + config.preset + ": needs " + gib(bytes) + (cpu ? " of memory" : " of GPU memory") +
       " at micro-batch " + std::to_string(micro_batch) +
       (teacher ? " (model, gradients, optimizer state, activations, the teacher)"
                : " (model, gradients, optimizer state, activations)") +
       (sharing > 1
            ? " on each of the " + std::to_string(sharing) + " ranks on this host, " + gib(bytes * sharing) + " in all,"
            : "") +
       " but only " + gib(available) +
       (cpu ? " is available (MemAvailable and cgroup limit); "
            : " is free on " + config.train.device + " (cudaMemGetInfo, with what ctrl already holds); ") +
       fit);
}

namespace {

constexpr double kGiB = double(1ull << 30);

// Default model-FLOPs utilisation, from ctrl's own measured runs. GPUs: what
// the CUDA backend reached on an H200 on 2026-12-04 at micro-batch 32
// (bench/results/gpu-h200-2026-12-04.md), rounded down: bf16 0.18 (`base`;
// `medium` 0.22), fp16 on tensor cores 0.07 (`base`: its attention and head
// multiply in fp32), fp32 on CUDA cores 0.50 (`base` 0.52). fp16 without
// tensor cores (P100, GTX 1080 Ti) was never measured: assumed 0.45.
double default_mfu(bool gpu, bool tensor_cores, const std::string& precision) {
  if (gpu) {
    if (precision == "bf16") return 0.18;
    if (precision == "fp16") return tensor_cores ? 0.07 : 0.45;
    return 0.50;
  }
  // CPU: share of this CPU's measured GEMM peak that ctrl reached over a whole
  // training step on tiny, small and base in fp32 and bf16 (0.80-0.90, README,
  // "Planning a run"), rounded down.
  return 0.75;
}

std::string fmt(const char* f, double x) {
  std::string out(size_t(std::snprintf(nullptr, 0, f, x)), '\0');
  std::snprintf(out.data(), out.size() + 1, f, x);
  return out;
}

std::string gib(uint64_t bytes) { return fmt("%.2f GiB", double(bytes) / kGiB); }

std::string duration(double hours) {
  if (hours < 48) return fmt("%.1f hours", hours);
  if (hours < 2 * 8766) return fmt("%.1f days", hours / 24);
  return fmt("%.3g years", hours / 8766);
}

std::string tokens_text(double t) {
  if (t >= 1e12) return fmt("%.3g", t);
  if (t >= 1e9) return fmt("%.3gB", t / 1e9);
  if (t >= 1e6) return fmt("%.3gM", t / 1e6);
  return fmt("%.3g", t);
}

}  // namespace

Plan make_plan(const Request& r) {
  validate(r.config);
  if (!(r.tokens > 0) || !std::isfinite(r.tokens)) fail("ctrl plan: --tokens must be a positive number, e.g. 10e9");
  if (r.gpus_per_node < 1 || r.nodes < 1) fail("ctrl plan: --gpus and --nodes must be at least 1");
  if (r.zero != 0 && r.zero != 1) fail("ctrl plan: --zero must be 0 or 1 (ZeRO stage 1)");
  if (r.micro_batch < 0) fail("ctrl plan: --micro-batch must be at least 1");
  if (r.mfu < 0 || r.mfu > 1) fail("ctrl plan: --mfu must be in (0, 1]");
  if (!(r.network_gbps > 0)) fail("ctrl plan: --network-gbps must be positive");
  if (r.price_per_hour < 0) fail("ctrl plan: --price-per-hour must not be negative");
  const bool gpu = !r.gpu.empty();
  if (r.machine && gpu != (r.machine->device == "cuda"))
    fail("ctrl plan: --machine " + r.machine->path + " was measured on " +
         (gpu ? "a CPU; it cannot go with --gpu" : r.machine->gpu + "; plan it with --gpu NAME"));
  if (!gpu && r.gpus_per_node != 1) fail("ctrl plan: --gpus needs --gpu NAME (CPU plans run one process per node)");

  Plan p;
  p.request = r;
  // The layout counts the backend's attention (on_cuda): the plan's device, whatever the config names.
  p.request.config.train.device = gpu ? "cuda" : "cpu";
  const Config& c = p.request.config;
  const std::string& precision = c.train.precision;
  p.ranks = r.gpus_per_node * r.nodes;
  p.parameters = make_param_layout(c.model).count();
  p.flops_per_token = train_flops_per_token(c.model);
  p.hardware_flops_per_token = train_hardware_flops_per_token(c.model);
  if (r.teacher) {  // the teacher's forward runs in every step, on the same tokens
    p.teacher_flops_per_token = forward_flops_per_token(*r.teacher);
    p.hardware_flops_per_token += p.teacher_flops_per_token;
  }
  p.total_flops = p.flops_per_token * r.tokens;

  // The device: memory per rank, peak FLOP/s, utilisation, links.
  uint64_t overhead = 0;
  const int cpu_threads = r.machine ? int(r.machine->threads) : r.cpu_threads;  // CPU plans
  // The most threads a run there may use: the adapter's ceiling over the CPUs the bench file's
  // machine had, or (a file from before usable_cpus) the threads it ran at.
  const int most_threads = r.machine && r.machine->usable_cpus == 0
                               ? std::max(1, cpu_threads)
                               : kMaxThreadsPerCpu * std::max(1, r.machine ? int(r.machine->usable_cpus) : cpu_threads);
  double intra_gbs = 0;  // per direction, GB/s
  std::string intra_link;
  // A ctrl bench file calibrates the utilisation when it was measured in this precision.
  const bool calibrated = r.machine && r.machine->precision == precision;
  auto other_model_note = [&] {
    if (r.machine->parameters == 0 || r.machine->parameters == p.parameters) return;
    p.notes.push_back(r.machine->path + " measured " + (r.machine->config.empty() ? "a model" : r.machine->config) +
                      fmt(" (%.1f M parameters), this plan is ", double(r.machine->parameters) / 1e6) + c.preset +
                      fmt(" (%.1f M): its utilisation is assumed to carry over, though it differs between models ",
                          double(p.parameters) / 1e6) +
                      "(bench this model for a calibration of its own)");
  };
  if (calibrated && r.machine->teacher.empty() != !r.teacher)
    p.notes.push_back(r.machine->path +
                      (r.machine->teacher.empty() ? " was measured without a teacher, this plan has one"
                                                  : " was measured with a teacher, this plan has none") +
                      ": the utilisation of the teacher's products and the student's differ, so it may not carry "
                      "over (bench what you plan: with --teacher, or without)");
  if (r.network_gbps_given && r.nodes == 1)
    p.notes.push_back("--network-gbps is the bandwidth between nodes; with one node it is not used");
  if (r.machine && !calibrated)
    p.notes.push_back(r.machine->path + " was measured in " + r.machine->precision + ", this plan is " + precision +
                      ": not calibrated");
  if (gpu) {
    const GpuSpec& g = find_gpu(r.gpu);
    p.peak_tflops = gpu_peak_tflops(g, precision);
    p.device_memory = uint64_t(g.memory_mib * double(1ull << 20));
    overhead = kGpuRuntimeOverheadBytes;
    p.mfu = default_mfu(true, g.tensor_cores, precision);
    p.mfu_source = "default";
    if (!calibrated && r.mfu <= 0)
      p.notes.push_back(fmt("default MFU %.2f", p.mfu) +
                        (precision == "fp16" && !g.tensor_cores
                             ? " is an assumption: ctrl's fp16 never ran on a GPU without tensor cores"
                             : " is what ctrl's CUDA backend reached on an H200 (2026-12-04; bf16 0.18-0.22, fp16 "
                               "0.07, fp32 0.52)") +
                        "; calibrate with --machine and a `ctrl bench --device cuda --json` file");
    if (calibrated) {
      // The measured GPU's executed FLOP/s against its own datasheet peak; a
      // GPU the table does not know is taken to be the planned one.
      const GpuSpec* measured = gpu_named_in(r.machine->gpu);
      const double measured_peak = measured ? gpu_peak_tflops(*measured, precision) : p.peak_tflops;
      if (!measured)  // its FLOP/s against the planned GPU's peak would say it runs as fast as that one
        fail(r.machine->path + ": measured on " + r.machine->gpu +
             ", a GPU the datasheet table does not know, so its utilisation cannot be computed; plan with --mfu U "
             "(its executed " +
             fmt("%.1f", r.machine->hardware_share * r.machine->gemm_peak_gflops / 1000) +
             " TFLOP/s over that GPU's dense " + precision + " peak)");
      p.mfu = r.machine->hardware_share * r.machine->gemm_peak_gflops / (measured_peak * 1000);
      if (!(p.mfu > 0 && p.mfu <= 1))
        fail(r.machine->path + ": " + fmt("%.1f", r.machine->hardware_share * r.machine->gemm_peak_gflops / 1000) +
             " TFLOP/s executed is " + fmt("%.2f", p.mfu) + " of " + measured->name + "'s " +
             fmt("%.0f", measured_peak) + " TFLOP/s " + precision +
             " peak; expected a share in (0, 1]: not a run of this GPU in this precision");
      p.mfu_source = "calibrated from ctrl bench on " + r.machine->measured_on() + " (" + r.machine->path + ")";
      if (measured->name != g.name)
        p.notes.push_back(r.machine->path + " was measured on " + r.machine->gpu + ", this plan is for " + g.name +
                          ": its utilisation is assumed to carry over");
      other_model_note();
    }
    intra_gbs = g.link_gbs / 2;
    intra_link = g.link;
    p.hardware = std::to_string(p.ranks) + " x " + g.name + " (" + std::to_string(r.nodes) +
                 (r.nodes == 1 ? " node" : " nodes") +
                 (r.gpus_per_node > 1 ? ", " + g.link + ")"
                  : r.nodes > 1       ? ", 1 GPU each)"
                                      : ")");
    if (g.compute_capability < cuda_min_compute_capability()) {
      p.ctrl_runs = false;
      p.unsupported = "ctrl cannot train on " + g.name + ": it is sm_" + std::to_string(g.compute_capability) +
                      " and ctrl's CUDA backend needs sm_" + std::to_string(cuda_min_compute_capability()) +
                      " (T4, Turing) or newer; the figures are this hardware's, for comparison";
    }
    if (cuda_attention_fusion_requested()) {
      const int64_t D = c.model.d_model, H = c.model.n_head;
      p.notes.push_back(
          cuda_attention_fuses(c.model, activation_dtype(precision))
              ? "CTRL_CUDA_ATTENTION=fused: each layer keeps one fp32 log-sum-exp per row and head instead of the "
                "softmax"
              : "CTRL_CUDA_ATTENTION=fused does not apply (the fused kernels take bf16 and heads of 64 or 80 "
                "columns; this plan is " +
                    precision + " with heads of " + std::to_string(D / H) + "): attention keeps the softmax");
    }
    if (g.name == "GTX-1080-Ti" && precision == "fp16")
      p.notes.push_back("GTX 1080 Ti runs fp16 arithmetic at 1/64 of fp32: plan it in fp32");
  } else {
    p.device_memory = r.cpu_memory_bytes ? r.cpu_memory_bytes : host_memory_bytes();
    if (r.machine && !r.cpu_memory_bytes)
      p.notes.push_back("memory is this machine's (" + gib(p.device_memory) + "), not that of the machine " +
                        r.machine->path + " measured; --memory-gb G plans another");
    overhead = kCpuRuntimeOverheadBytes;
    p.mfu = default_mfu(false, false, precision);
    p.mfu_source = "default";
    double peak_gflops = r.cpu_peak_gflops;
    std::string name = r.cpu_name.empty() ? "CPU" : r.cpu_name;
    if (r.machine) {
      name = r.machine->cpu;
      if (calibrated) {
        peak_gflops = r.machine->gemm_peak_gflops;
        p.mfu = r.machine->hardware_share;
        p.mfu_source = "calibrated from ctrl bench on " + r.machine->measured_on() + " (" +
                       std::to_string(r.machine->threads) + (r.machine->threads == 1 ? " thread, " : " threads, ") +
                       r.machine->path + ")";
        other_model_note();
      }
    }
    if (!(peak_gflops > 0)) fail("ctrl plan: no GEMM peak for this CPU (internal: cpu_peak_gflops not set)");
    p.peak_tflops = peak_gflops / 1000;
    p.hardware = std::to_string(r.nodes) + " x " + name +
                 (cpu_threads > 0 ? " (" + std::to_string(cpu_threads) + (cpu_threads == 1 ? " thread, " : " threads, ")
                                  : " (") +
                 gib(p.device_memory) + (r.nodes == 1 ? ")" : " each)");
  }
  if (r.mfu > 0) {
    p.mfu = r.mfu;
    p.mfu_source = r.mfu_source.empty() ? "--mfu" : r.mfu_source;
  }
  if (p.mfu > 1)  // a bench whose GEMM peak read low (a busy host during its 1 s measurement)
    p.notes.push_back(
        fmt("utilisation above 1: the bench's run reached %.3f of the GEMM peak it measured, so that "
            "peak read low; the throughput is the bench's own",
            p.mfu));

  // Memory: the largest micro-batch that fits (memory grows with B), then the
  // micro-batch to plan with.
  const int zero_ranks = r.zero == 1 ? p.ranks : 1;
  const ModelConfig* teacher = r.teacher ? &*r.teacher : nullptr;
  if (!gpu)
    p.memory_threads = r.memory_threads > 0  ? r.memory_threads
                       : c.train.threads > 0 ? int(c.train.threads)
                                             : most_threads;
  auto memory_at = [&](int64_t b, int zero) {
    Memory m = memory_estimate(c, b, zero, overhead, teacher);
    if (!gpu)
      m.widened = cpu_widened_bytes(c, b, p.memory_threads, teacher),
      m.thread_runtime = cpu_thread_bytes(p.memory_threads), m.communicator = p.ranks > 1 ? kMpiRankBytes : 0;
    if (gpu) m.gpu_scratch = gpu_scratch_bytes(c, b, teacher);
    return m;
  };
  auto fits = [&](int64_t b) { return memory_at(b, zero_ranks).total() <= p.device_memory; };
  p.largest_micro_batch = largest_micro_batch(fits);
  const int64_t per_rank = std::max<int64_t>(1, (c.train.global_batch + p.ranks - 1) / p.ranks);
  if (c.train.global_batch % p.ranks != 0)
    p.notes.push_back("global batch " + std::to_string(c.train.global_batch) + " is not a multiple of " +
                      std::to_string(p.ranks) + " ranks: each rank takes " + std::to_string(per_rank));
  if (r.micro_batch > 0) {
    p.micro_batch = r.micro_batch;
    p.fits = fits(r.micro_batch);
  } else if (p.largest_micro_batch > 0) {
    // The largest divisor of the per-rank batch that fits, so the global batch comes out exact.
    for (int64_t b = std::min(per_rank, p.largest_micro_batch); b >= 1; --b)
      if (per_rank % b == 0) {
        p.micro_batch = b;
        break;
      }
    p.fits = true;
  }
  p.memory = memory_at(std::max<int64_t>(1, p.micro_batch), zero_ranks);
  if (r.zero == 1) {
    // Each rank streams its shard to the writer a piece at a time: one piece of staging.
    p.zero_checkpoint_peak = p.memory.total() + kZeroCheckpointPieceFloats * sizeof(float);
    if (p.zero_checkpoint_peak > p.device_memory)
      p.notes.push_back("ZeRO-1: saving a checkpoint stages one piece of the optimizer state (16 MiB), a peak of " +
                        gib(p.zero_checkpoint_peak) + " per rank: MORE than the device has");
  }
  const int64_t mb = std::max<int64_t>(1, p.micro_batch);
  p.accumulation_steps = (per_rank + mb - 1) / mb;
  p.global_batch = p.accumulation_steps * mb * p.ranks;
  if (p.global_batch != c.train.global_batch)
    p.notes.push_back("train.global_batch " + std::to_string(c.train.global_batch) +
                      " is not a multiple of micro-batch x ranks; this plans " + std::to_string(p.global_batch) +
                      " sequences, and ctrl train needs --set train.global_batch=" + std::to_string(p.global_batch) +
                      " to run them (it refuses " + std::to_string(c.train.global_batch) + ")");

  // Time: compute at peak × MFU on every rank; a ring all-reduce of the fp32
  // gradients once per optimizer step, limited by its slowest link.
  const double tokens_per_step = double(p.global_batch) * double(c.model.n_ctx);
  // The utilisation applies to the FLOPs the hardware executes, which
  // recomputation raises above the model's (they are equal without it).
  p.tokens_per_s = double(p.ranks) * p.peak_tflops * 1e12 * p.mfu / p.hardware_flops_per_token;
  p.compute_s = tokens_per_step / p.tokens_per_s;
  if (p.ranks > 1) {
    const double grad_bytes = double(p.memory.grads);
    p.comm_bytes = 2.0 * double(p.ranks - 1) / double(p.ranks) * grad_bytes;
    const double net_gbs = r.network_gbps / 8;
    if (r.nodes > 1 && (!gpu || net_gbs < intra_gbs)) {
      p.comm_gbs = net_gbs;
      p.comm_link = fmt("%g Gb/s network between nodes", r.network_gbps);
    } else {
      p.comm_gbs = intra_gbs;
      p.comm_link = intra_link + fmt(" (%g GB/s each way)", intra_gbs);
    }
    p.comm_s = p.comm_bytes / (p.comm_gbs * 1e9);
  }
  p.step_s_no_overlap = p.compute_s + p.comm_s;
  p.tokens_per_s_no_overlap = tokens_per_step / p.step_s_no_overlap;
  // ZeRO-1's reduce-scatter waits for the whole backward (docs/distributed.md): no overlap to plan for.
  p.step_s_overlap = r.zero == 1 ? p.step_s_no_overlap : std::max(p.compute_s, p.comm_s);
  const double steps = r.tokens / tokens_per_step;
  p.hours_no_overlap = steps * p.step_s_no_overlap / 3600;
  p.hours_overlap = steps * p.step_s_overlap / 3600;
  const double billed = gpu ? double(p.ranks) : double(r.nodes);
  p.cost = p.hours_no_overlap * r.price_per_hour * billed;

  // The verdict line.
  std::string v = p.ctrl_runs ? "" : p.unsupported + ". ";
  if (p.fits) {
    v += "fits: yes, largest micro-batch " + std::to_string(p.largest_micro_batch) +
         " (plan: " + std::to_string(p.micro_batch) + " x " + std::to_string(p.accumulation_steps) +
         " accumulation x " + std::to_string(p.ranks) + (p.ranks == 1 ? " rank" : " ranks") + "); ";
  } else if (p.largest_micro_batch > 0) {
    v += "fits: no at micro-batch " + std::to_string(p.micro_batch) + " (" + gib(p.memory.total()) + " of " +
         gib(p.device_memory) + "), largest micro-batch " + std::to_string(p.largest_micro_batch) + "; if it did: ";
  } else {
    v += "fits: no, even micro-batch 1 needs " + gib(p.memory.total()) + " per device of " + gib(p.device_memory) +
         (r.zero == 0 && p.ranks > 1 && memory_at(1, p.ranks).total() <= p.device_memory ? " (it fits with --zero 1)"
                                                                                         : "") +
         "; if it did: ";
  }
  v += tokens_text(r.tokens) + " tokens in " + duration(p.hours_no_overlap);
  if (p.ranks > 1 && duration(p.hours_overlap) != duration(p.hours_no_overlap))
    v += " (" + duration(p.hours_overlap) + " with full overlap)";
  if (p.mfu_source == "default")
    v += fmt(" at default MFU %.2f (not calibrated)", p.mfu);
  else if (p.mfu_source == "--mfu")
    v += fmt(" at MFU %.3g (--mfu)", p.mfu);
  else if (p.mfu_source.rfind("calibrated", 0) != 0)  // measured by the plan itself
    v += fmt(" at MFU %.3f ", p.mfu) + p.mfu_source;
  else
    v += fmt(" at MFU %.3f ", p.mfu) + "calibrated from ctrl bench on " + r.machine->measured_on();
  if (r.price_per_hour > 0) v += fmt(", cost %.0f", p.cost);
  if (p.zero_checkpoint_peak > p.device_memory)
    v += "; warning: saving a checkpoint peaks at " + gib(p.zero_checkpoint_peak) +
         " per rank (the engine's ZeRO-1 gathers the whole optimizer state)";
  p.verdict = v;
  return p;
}

std::string plan_json(const Plan& p) {
  const Config& c = p.request.config;
  nlohmann::ordered_json j;
  j["config"] = c.preset;
  j["model"] = {{"n_layer", c.model.n_layer}, {"d_model", c.model.d_model},     {"n_head", c.model.n_head},
                {"d_ff", c.model.d_ff},       {"n_ctx", c.model.n_ctx},         {"vocab_size", c.model.vocab_size},
                {"sharing", c.model.sharing}, {"embedding_dim", c.model.embedding_dim},
                {"recompute", c.model.recompute}};
  j["precision"] = c.train.precision;
  j["optimizer"] = c.train.optimizer;
  j["hardware"] = p.hardware;
  j["ranks"] = p.ranks;
  j["zero"] = p.request.zero;
  j["parameters"] = p.parameters;
  const Memory& m = p.memory;
  j["memory_bytes"] = {{"weights_fp32", m.weights},      {"weights_lowp", m.weights_lowp},
                       {"gradients", m.grads},           {"optimizer_state", m.optimizer},
                       {"activations", m.activations},   {"zero_gradient_shard", m.grad_shard},
                       {"workspace", m.workspace},       {"teacher", m.teacher},
                       {"cpu_widened", m.widened},       {"gpu_scratch", m.gpu_scratch},
                       {"runtime_overhead", m.overhead}, {"cpu_threads_past_overhead", m.thread_runtime},
                       {"mpi_rank", m.communicator},     {"total", m.total()},
                       {"device", p.device_memory}};
  j["ctrl_runs"] = p.ctrl_runs;
  j["fits"] = p.fits;
  j["zero_checkpoint_peak_bytes"] = p.zero_checkpoint_peak;
  j["micro_batch"] = p.micro_batch;
  j["largest_micro_batch"] = p.largest_micro_batch;
  j["accumulation_steps"] = p.micro_batch > 0 ? p.accumulation_steps : 0;  // as the text's "none"
  j["global_batch"] = p.global_batch;
  j["tokens"] = p.request.tokens;
  j["flops_per_token"] = p.flops_per_token;
  j["hardware_flops_per_token"] = p.hardware_flops_per_token;
  j["teacher_flops_per_token"] = p.teacher_flops_per_token;
  j["total_flops"] = p.total_flops;
  j["peak_tflops_per_device"] = p.peak_tflops;
  j["mfu"] = p.mfu;
  j["mfu_source"] = p.mfu_source;
  j["tokens_per_s"] = p.tokens_per_s_no_overlap;
  j["compute_tokens_per_s"] = p.tokens_per_s;
  j["step_seconds"] = {{"compute", p.compute_s},
                       {"communication", p.comm_s},
                       {"no_overlap", p.step_s_no_overlap},
                       {"full_overlap", p.step_s_overlap}};
  j["communication"] = {{"bytes_per_rank_per_step", p.comm_bytes},
                        {"link", p.comm_link},
                        {"gb_per_s", p.comm_gbs},
                        {"share_no_overlap", p.step_s_no_overlap > 0 ? p.comm_s / p.step_s_no_overlap : 0.0},
                        {"share_full_overlap",
                         p.step_s_overlap > 0 ? std::max(0.0, p.comm_s - p.compute_s) / p.step_s_overlap : 0.0}};
  j["hours"] = {{"no_overlap", p.hours_no_overlap}, {"full_overlap", p.hours_overlap}};
  j["price_per_hour"] = p.request.price_per_hour;
  j["cost"] = p.cost;
  j["notes"] = p.notes;
  j["verdict"] = p.verdict;
  return j.dump(2);
}

std::string plan_text(const Plan& p) {
  const Config& c = p.request.config;
  const Memory& m = p.memory;
  std::ostringstream o;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "  %-26s", k.c_str());
    o << buf << v << "\n";
  };
  o << "model " << c.preset << ": L " << c.model.n_layer << ", D " << c.model.d_model << ", H " << c.model.n_head
    << ", F " << c.model.d_ff << ", T " << c.model.n_ctx << ", V " << c.model.vocab_size << "; "
    << c.train.precision << ", " << c.train.optimizer << (p.request.zero ? ", ZeRO-1" : "") << "\n";
  row("parameters", fmt("%.1f M", double(p.parameters) / 1e6) + " (" + std::to_string(p.parameters) + ")");
  row("hardware", p.hardware);
  o << "memory per rank at micro-batch " << std::max<int64_t>(1, p.micro_batch) << ":\n";
  row("weights (fp32 master)", gib(m.weights));
  if (m.weights_lowp) row("weights (" + c.train.precision + " copy)", gib(m.weights_lowp));
  row("gradients (fp32)", gib(m.grads));
  row("optimizer state", gib(m.optimizer) + (p.request.zero ? fmt(" (1/%.0f, ZeRO-1)", double(p.ranks)) : ""));
  if (m.grad_shard) row("gradient shard (ZeRO-1)", gib(m.grad_shard));
  row("activations", gib(m.activations));
  row("workspace", gib(m.workspace));
  if (m.teacher) row("teacher (forward only)", gib(m.teacher));
  if (m.widened)
    row(native_bf16_products(c.train) ? "bf16 copies for products" : "fp32 copies for products", gib(m.widened));
  if (m.gpu_scratch) row("backend scratch (GPU)", gib(m.gpu_scratch));
  row("runtime overhead", gib(m.overhead));
  if (m.thread_runtime)
    row("runtime of threads " + std::to_string(kCpuOverheadThreads + 1) + "-" + std::to_string(p.memory_threads),
        gib(m.thread_runtime));
  if (m.communicator) row("Open MPI (each rank)", gib(m.communicator));
  row("total", gib(m.total()) + " of " + gib(p.device_memory));
  row("largest micro-batch", std::to_string(p.largest_micro_batch));
  if (p.micro_batch > 0)
    row("batch", std::to_string(p.micro_batch) + " x " + std::to_string(p.accumulation_steps) + " accumulation x " +
                     std::to_string(p.ranks) + (p.ranks == 1 ? " rank = " : " ranks = ") +
                     std::to_string(p.global_batch) + " sequences of " + std::to_string(c.model.n_ctx));
  else
    row("batch", "none: not even one sequence fits");
  row("FLOPs per token", fmt("%.3e", p.flops_per_token));
  if (p.hardware_flops_per_token != p.flops_per_token)
    row("executed FLOPs per token", fmt("%.3e", p.hardware_flops_per_token) + " (" +
                                        (c.model.recompute != "none" ? "recompute " + c.model.recompute : "") +
                                        (c.model.recompute != "none" && p.teacher_flops_per_token > 0 ? ", " : "") +
                                        (p.teacher_flops_per_token > 0
                                             ? fmt("the teacher's forward %.3e", p.teacher_flops_per_token)
                                             : "") +
                                        ")");
  row("total FLOPs", fmt("%.3e", p.total_flops) + " for " + tokens_text(p.request.tokens) + " tokens");
  row("peak per device", fmt("%.3g TFLOP/s ", p.peak_tflops) + c.train.precision);
  row("utilisation", fmt("MFU %.3f, ", p.mfu) + p.mfu_source);
  row("throughput",
      fmt("%.0f tokens/s", p.tokens_per_s_no_overlap) +
          (p.comm_s > 0 ? fmt(" (computing %.0f tokens/s, all-reduce not overlapped)", p.tokens_per_s) : ""));
  row("step", fmt("compute %.3f s", p.compute_s) + fmt(", all-reduce %.3f s", p.comm_s));
  if (p.ranks > 1) {
    row("all-reduce", (p.comm_bytes >= 1e9 ? fmt("%.2f GB", p.comm_bytes / 1e9) : fmt("%.0f MB", p.comm_bytes / 1e6)) +
                         " per rank per step over " + p.comm_link);
    row("communication share", fmt("%.1f%% without overlap, ", 100 * p.comm_s / p.step_s_no_overlap) +
                                   fmt("%.1f%% with full overlap",
                                       100 * std::max(0.0, p.comm_s - p.compute_s) / p.step_s_overlap));
  }
  row("time", duration(p.hours_no_overlap) + " without overlap, " + duration(p.hours_overlap) + " with full overlap");
  if (p.request.price_per_hour > 0)
    row("cost", fmt("%.0f", p.cost) + fmt(" (%.1f hours", p.hours_no_overlap) +
                    fmt(" x %g per hour x ", p.request.price_per_hour) +
                    std::to_string(p.request.gpu.empty() ? p.request.nodes : p.ranks) +
                    (p.request.gpu.empty() ? " machines)" : " GPUs)"));
  for (const auto& n : p.notes) o << "note: " << n << "\n";
  o << p.verdict << "\n";
  return o.str();
}

std::string bf16_step_times_text(const Bf16StepTimes& times, const std::string& detail) {
  if (!times.measured) return "bf16 against fp32 not measured: " + times.skipped;
  const std::string on = times.layers == times.of_layers ? "this model"
                                                         : "this model cut to " + std::to_string(times.layers) +
                                                               " of its " + std::to_string(times.of_layers) + " layers";
  return fmt("a bf16 training step measured %.3f s on this CPU", times.bf16_step_s) +
         fmt(" against fp32's %.3f s (", times.fp32_step_s) + on + detail + ")";
}

std::string bf16_slower_advice(const Bf16StepTimes& times, const std::string& bf16_path, double bf16_seconds) {
  if (!times.measured || !(times.bf16_step_s >= kFp32WorthSwitching * times.fp32_step_s)) return "";
  const double factor = times.bf16_step_s / times.fp32_step_s;
  const char* how = bf16_path == "widened"    ? "products widened to fp32's, plus the conversions"
                    : bf16_path == "emulated" ? "emulated: no AVX512-BF16 or AMX"
                                              : "native bf16 products, yet slower";
  const std::string line = bf16_step_times_text(times, std::string("; ") + how);
  if (bf16_seconds > 0)
    return line + ": in fp32 this run would take about " + Progress::format_duration(bf16_seconds / factor) +
           " instead of " + Progress::format_duration(bf16_seconds) + " (" + fmt("%.2fx", factor) +
           " sooner; --set train.precision=fp32)";
  return line + ": --set train.precision=fp32 runs " + fmt("%.2fx", factor) +
         " faster (bf16 keeps the smaller activations)";
}

}  // namespace ctrl::plan
