// The planner: before anyone rents hardware, says whether a model fits, the
// largest micro-batch that fits, how long training takes and what it costs.
// Every byte count comes from the engine's layout tables (model/layout.h), the
// same code Model and Optimizer allocate with, so plan and engine cannot drift.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace ctrl {
// ZeRO-1 checkpoints stream each rank's optimizer shard to the writer in
// pieces of this many floats (train/shard_stream.h); the planner counts one
// piece of staging on top of the training memory.
constexpr size_t kZeroCheckpointPieceFloats = size_t(1) << 22;
}  // namespace ctrl

namespace ctrl::plan {

// Bytes one data-parallel rank holds. weights..workspace are the engine's flat
// buffers; overhead is the runtime around them (CUDA context, libraries).
struct Memory {
  uint64_t weights = 0;       // fp32 master parameters (layout.total, padding included)
  uint64_t weights_lowp = 0;  // bf16/fp16 copy of the parameters for the products (0 for fp32)
  uint64_t grads = 0;         // fp32 gradients (layout.total)
  uint64_t optimizer = 0;     // AdamW m and v, or the Adagrad accumulator; one rank's shard with ZeRO-1
  uint64_t grad_shard = 0;    // ZeRO-1 only: the reduce-scatter target, one shard of fp32 gradients
  uint64_t activations = 0;   // saved from forward to backward, for one micro-batch
  uint64_t workspace = 0;     // backward scratch and the fused head's logits chunk
  uint64_t batch = 0;         // the micro-batch's token ids and targets in backend memory (int32)
  // Distillation (train.teacher): the teacher's forward-only model — its fp32
  // parameters, 16-bit copy, activations (recompute "layers": one layer's at a
  // time) and token buffers; no gradients or optimizer state.
  uint64_t teacher = 0;
  uint64_t widened = 0;       // CPU only: fp32 copies of 16-bit operands for fp32 products, or native bf16's
                              // bf16 copy of an fp32 output gradient (cpu_widened_bytes)
  uint64_t gpu_scratch = 0;   // GPU only: the CUDA backend's own scratch (gpu_scratch_bytes)
  uint64_t overhead = 0;      // runtime, not the engine's buffers
  uint64_t thread_runtime = 0;  // CPU only: the runtime of threads past the overhead's (cpu_thread_bytes)
  uint64_t communicator = 0;    // CPU ranks of a job of 2 or more: what Open MPI keeps (kMpiRankBytes)
  uint64_t buffers() const {
    return weights + weights_lowp + grads + optimizer + grad_shard + activations + workspace + batch + teacher +
           widened + gpu_scratch;
  }
  uint64_t total() const { return buffers() + overhead + thread_runtime + communicator; }
};

// Optimizer state in fp32 copies of the parameter buffer: AdamW 2 (m, v), Adagrad 1.
int optimizer_state_copies(const std::string& optimizer);

// Bytes per element of activations and scratch: 4 for fp32, 2 for bf16/fp16.
int activation_bytes_per_element(const std::string& precision);

// Memory of one rank for micro-batch B: the engine's buffers from the layout
// tables (element counts × dtype size), plus `overhead` bytes. zero_ranks > 1
// is ZeRO-1 as train/trainer.cpp does it: equal shards of ceil(total / N)
// elements, parameter and gradient buffers padded to N shards, optimizer
// state for one shard and one gradient shard for the reduce-scatter.
// With a teacher (its model config, as its checkpoint holds it), Memory::teacher counts its
// forward-only model (teacher_forward_config) at the student's micro-batch and precision.
Memory memory_for(const Config& config, int64_t micro_batch, int zero_ranks, uint64_t overhead,
                  const ModelConfig* teacher = nullptr);

// The form in which the trainer builds a teacher: forward only, so recompute
// "layers" (only each layer's input is kept; the values are the same bits).
ModelConfig teacher_forward_config(const ModelConfig& teacher);

// Exactly what Model(config.model, ops, B) and Optimizer(config.train, ...)
// allocate for an fp32 run: memory_for(config, B, 1, 0).buffers().
uint64_t engine_buffer_bytes(const Config& config, int64_t micro_batch);

// Runtime memory of a CPU process around the engine's buffers (shared
// libraries, heap, OpenMP and oneDNN threads and JIT code, the ops'
// per-thread scratch, oneDNN's scratchpads), measured with `ctrl bench` at
// 20-38 MiB over tiny and small, fp32 and bf16, micro-batches 1-32, at
// kCpuOverheadThreads threads; see the README, "Planning a run".
// Model::init_weights' host staging comes before the step's scratch and is
// bounded by it (kInitStagingFloats, model/layout.h).
constexpr uint64_t kCpuRuntimeOverheadBytes = 40ull << 20;
constexpr int kCpuOverheadThreads = 2;
// Each thread past those: its stack, oneDNN's packing buffers and state, the
// allocator's arena. With 16 tiled threads on 2 CPUs (Zen 4, `ctrl bench
// --threads 16` against 2) each further thread took 1.9-2.9 MiB on tiny,
// 2.9-5.8 on small, 4.4-5.6 on base and 3.9-7.0 on medium, fp32 and native bf16
// (bench/thread_memory.sh; results in
// bench/results/thread-memory-zen4-2026-12-05.md).
constexpr uint64_t kCpuBytesPerThread = 5ull << 20;
// kCpuBytesPerThread for each of `threads` past kCpuOverheadThreads.
uint64_t cpu_thread_bytes(int threads);
// What each rank of an MPI job of 2 or more processes holds beyond the same
// run in one process: Open MPI's runtime and shared-memory transport (7-9
// MiB), and the temporary of an all-reduce, half of its 32 MiB piece
// (dist/mpi_communicator.cpp). Measured with Open MPI 4.1.4 from Debian, 2
// and 4 ranks on one host: 15-22 MiB on `small` and `base`
// (bench/results/mpi-memory-zen4-2026-12-06.md).
constexpr uint64_t kMpiRankBytes = 24ull << 20;
// CUDA context, cuBLAS/cuDNN handles and kernels, allocator slack per GPU.
constexpr uint64_t kGpuRuntimeOverheadBytes = 1ull << 30;

// One GPU model from its vendor's datasheet (dense figures, no sparsity).
struct GpuSpec {
  std::string name;
  int compute_capability;  // major x 10 + minor: 75 is sm_75
  int nominal_gb;          // the memory the product is sold with ("80GB")
  double memory_mib;       // device memory as nvidia-smi reports its total
  double fp32_tflops;      // CUDA cores
  double tf32_tflops;      // tensor cores; 0: unsupported
  double fp16_tflops;      // tensor cores where present, fp32 accumulate; 0: unsupported
  double bf16_tflops;      // 0: unsupported
  double memory_gbs;       // memory bandwidth, GB/s
  std::string link;        // "NVLink 4", "PCIe 3.0 x16", ...
  double link_gbs;         // GPU-to-GPU bandwidth per GPU as published (both directions together), GB/s
  bool tensor_cores;       // whether fp16/bf16 products run on tensor cores
  std::string note;
};
const std::vector<GpuSpec>& gpu_table();
// The entry by its table name or by a driver's device name as nvidia-smi
// prints it ("NVIDIA A100-SXM4-80GB" is A100-80GB, "NVIDIA H100 PCIe"
// H100-PCIe), case-insensitive. The chip's words must match exactly (no
// "H100 NVL" for an H100), and so must the memory and the form factor where
// the name gives them; ctrl::Error naming the candidates for a name that fits
// several ("A100") and listing the known names for one that fits none.
const GpuSpec& find_gpu(const std::string& name);
// Peak TFLOP/s of a GPU for a precision (fp32 uses CUDA cores, not TF32);
// ctrl::Error saying why when the GPU has no such arithmetic.
double gpu_peak_tflops(const GpuSpec& gpu, const std::string& precision);

// A machine measured by `ctrl bench --json`: a CPU (calibrates --hardware-less
// CPU plans), or a GPU run (--device cuda; calibrates --gpu plans).
struct MachineProfile {
  std::string path, cpu, precision;
  std::string device = "cpu", gpu;  // the backend it ran on, and the GPU's name for cuda
  const std::string& measured_on() const { return device == "cuda" ? gpu : cpu; }
  double tokens_per_s = 0, achieved_gflops = 0, gemm_peak_gflops = 0, share_of_gemm_peak = 0;
  // Executed FLOP/s over the GEMM peak: hardware_gflops / gemm_peak_gflops when
  // the file has it (recomputation), else share_of_gemm_peak.
  double hardware_share = 0;
  uint64_t peak_rss_bytes = 0;
  int64_t threads = 0;      // the threads the bench ran at (pinned, or where the adapter left them)
  int64_t usable_cpus = 0;  // the CPUs it could use; 0 in files from before the field
  std::string config;       // the model it ran ("small", a TOML path); may be empty
  uint64_t parameters = 0;  // that model's parameters; 0 when the file lacks them
  std::string teacher;      // the distillation teacher it ran with, or empty
};
// Reads and checks the file; one-line ctrl::Error naming the file and key otherwise.
MachineProfile load_machine(const std::string& path);
MachineProfile parse_machine(const std::string& json_text, const std::string& where);

// This machine's memory (MemTotal from /proc/meminfo), in bytes.
uint64_t host_memory_bytes();

// Memory this process can still take, in bytes: MemAvailable from
// /proc/meminfo, lowered to the room left under every cgroup memory limit
// above it (v2 memory.max, or v1 memory.limit_in_bytes, less the usage that
// is not reclaimable page cache). 0 if /proc/meminfo cannot be read.
uint64_t available_memory_bytes();

// memory_for without building a layout per layer: the layouts of 1 and 2
// layers, extrapolated (every layer past the first adds the same bytes; the
// tests check this against memory_for). Cheap for n_layer = 1000000, where the
// layout tables themselves would take gigabytes.
Memory memory_estimate(const Config& config, int64_t micro_batch, int zero_ranks, uint64_t overhead,
                       const ModelConfig* teacher = nullptr);

// The CPU engine's fp32 copies of 16-bit operands, for products that run in
// fp32 there: fp16 always (no fp16 products on a CPU), bf16 unless
// train.cpu_bf16 is native ("auto" counts as widened: the larger). The linear
// layers share three whole-tensor slots (x or a 16-bit dx, W, a 16-bit
// output or dy: ops/cpu/linear.cpp); fp16's head widens h and the embedding
// into the first two; widened bf16 products keep two blocks per thread (the
// head's vocabulary blocks, attention's per-head operands, a tile's operands
// when the products are tiled: ops/cpu/gemm.cpp), counted at `threads`, the
// most the run may use (most_cpu_threads).
// bf16 products (native, or emulated by oneDNN) instead keep one bf16 copy of
// an fp32 output gradient, N x max(D, E): 2 bytes each.
// Not in the activation layout: the backend allocates them on first use.
// A distillation teacher's forward products use the same slots, so a wider
// teacher sets their size.
uint64_t cpu_widened_bytes(const Config& config, int64_t micro_batch, int threads,
                           const ModelConfig* teacher = nullptr);

// The CUDA backend's own scratch for a GPU plan (model/layout.h's
// cuda_scratch_bytes at the plan's precision), which the backend allocates on
// first use, outside the activation layout. Checked against an H200's
// measured peaks in tests/test_plan.cpp.
uint64_t gpu_scratch_bytes(const Config& config, int64_t micro_batch, const ModelConfig* teacher = nullptr);

// What a GPU run's peak device memory (`peak_device_bytes`, the backend's own
// allocations) should come to: the engine's buffers and gpu_scratch_bytes,
// without the runtime around them (the CUDA context, the libraries' memory).
// `ctrl bench --device cuda` prints it beside the peak it measured.
uint64_t gpu_buffer_bytes(const Config& config, int64_t micro_batch, int zero_ranks = 1,
                          const ModelConfig* teacher = nullptr);

// A CPU run's memory as the planner counts it: memory_estimate's total with
// kCpuRuntimeOverheadBytes, plus cpu_widened_bytes and cpu_thread_bytes at
// `threads`, and kMpiRankBytes when the job has 2 or more `ranks`. What
// check_memory holds a run to, and what `ctrl bench` prints beside the peak
// it measured.
uint64_t cpu_run_bytes(const Config& config, int64_t micro_batch, int zero_ranks, int threads,
                       const ModelConfig* teacher = nullptr, int ranks = 1);

// The largest micro-batch b >= 1 for which `fits` holds, where `fits` is true
// up to some size and false past it; 0 when not even 1 fits. Doubles, then
// bisects (from 2^24 on it stops doubling). make_plan's and check_memory's
// "largest micro-batch that fits".
int64_t largest_micro_batch(const std::function<bool(int64_t)>& fits);

// Whether a config trains on the CUDA backend (train.device cuda or cuda:N).
bool on_cuda(const Config& config);

// Refuses, before anything is allocated, a run that cannot fit, with a
// one-line ctrl::Error naming the figure, the room and the largest
// micro-batch that fits (or that not even one sequence does).
// - On a CPU: the engine's buffers at `micro_batch` with cpu_widened_bytes and
//   cpu_thread_bytes at `threads` (the most the run may use), plus
//   kCpuRuntimeOverheadBytes (and on a rank of a job of 2 or more `ranks`,
//   kMpiRankBytes), times the `ranks_on_host` ranks that share this host's
//   memory, against `available` bytes of host memory (available_memory_bytes).
// - On a GPU (on_cuda): gpu_buffer_bytes against `available` bytes of device
//   memory (Ops::device_room_bytes: the CUDA context and the libraries'
//   handles are already outside it). Host memory is not what a GPU run fills.
void check_memory(const Config& config, int64_t micro_batch, int zero_ranks, uint64_t available, int threads,
                  const ModelConfig* teacher = nullptr, int ranks = 1, int ranks_on_host = 1);

struct Request {
  Config config;
  double tokens = 0;           // tokens to train on
  std::string gpu;             // empty: CPU
  int gpus_per_node = 1;       // GPUs per node (CPU: one process per node)
  int nodes = 1;
  double network_gbps = 100;   // between nodes, Gb/s
  bool network_gbps_given = false;  // --network-gbps was passed (a note when it cannot apply)
  int zero = 0;                // 0 or 1 (ZeRO stage 1: optimizer state sharded over ranks)
  int64_t micro_batch = 0;     // 0: the largest that fits, at most global_batch / ranks
  double mfu = 0;              // 0: calibrated from `machine` or the default for the device
  std::string mfu_source;      // where a given mfu came from; empty: "--mfu"
  double price_per_hour = 0;   // per GPU, or per machine for CPUs; 0: no cost
  // CPU only: memory (0: this machine's) and the GEMM peak of the precision, GFLOP/s
  // (ignored when `machine` calibrates).
  uint64_t cpu_memory_bytes = 0;
  double cpu_peak_gflops = 0;
  std::string cpu_name;
  int cpu_threads = 0;
  // CPU: the most threads the run may use, which its memory is counted at;
  // 0: train.threads when pinned, else the adapter's kMaxThreadsPerCpu x cpu_threads.
  int memory_threads = 0;
  std::optional<MachineProfile> machine;
  std::optional<ModelConfig> teacher;  // distillation: the teacher's model (ctrl plan --teacher CKPT)
};

struct Plan {
  Request request;
  std::string hardware;        // e.g. "2 x V100-16GB (1 node, NVLink)"
  int ranks = 1;
  uint64_t parameters = 0;     // unique parameters (shared ones once), no padding
  uint64_t device_memory = 0;  // per rank
  int64_t micro_batch = 0;     // the one planned with (0 when nothing fits)
  Memory memory;               // per rank at micro_batch (at 1 when nothing fits)
  int memory_threads = 0;      // CPU: the thread count the memory is counted at
  bool fits = false;
  // False for a GPU the CUDA backend cannot run on (older than sm_75), with the reason.
  bool ctrl_runs = true;
  std::string unsupported;
  // ZeRO-1: the peak while saving a checkpoint, when every rank all-gathers the
  // whole optimizer state (train/trainer.cpp save()); 0 without ZeRO.
  uint64_t zero_checkpoint_peak = 0;
  int64_t largest_micro_batch = 0;  // 0: not even one sequence fits
  int64_t accumulation_steps = 0, global_batch = 0;  // global_batch as run: accum × micro × ranks
  double flops_per_token = 0, total_flops = 0;  // the model's (train_flops_per_token), the MFU basis
  double hardware_flops_per_token = 0;           // executed, with recomputation (train_hardware_flops_per_token)
                                                 // and the teacher's forward
  double teacher_flops_per_token = 0;            // distillation: the teacher's forward (forward_flops_per_token)
  double peak_tflops = 0;      // per device, this precision
  double mfu = 0;
  std::string mfu_source;      // "default", "calibrated from ctrl bench on <cpu>", "--mfu"
  double tokens_per_s = 0;     // all ranks, compute only: ranks x peak x mfu / hardware FLOPs per token
  double tokens_per_s_no_overlap = 0;  // with each step's all-reduce after its compute
  double compute_s = 0, comm_s = 0;  // per optimizer step
  double comm_bytes = 0;       // all-reduce traffic each rank sends per step
  double comm_gbs = 0;         // bandwidth of the ring's slowest link, GB/s
  std::string comm_link;
  double step_s_no_overlap = 0, step_s_overlap = 0;
  double hours_no_overlap = 0, hours_overlap = 0;
  double cost = 0;             // at no overlap; 0 without a price
  std::vector<std::string> notes;
  std::string verdict;         // one line
};

// bf16 against fp32 on a CPU as whole training steps (train/synthetic_steps.h,
// probe_bf16_steps): a model cut to `layers` of its `of_layers` layers, its
// fastest step in each precision. Products alone mislead: bf16 is emulated
// and slow without AVX512-BF16, can be slower where native (a Xeon with
// AVX512-BF16 but no AMX: 142 GFLOP/s against fp32's 254), and where it runs
// widened to fp32 products those match fp32's speed while the step pays for
// the conversions (Zen 3: steps 0.78-0.90x of fp32's).
struct Bf16StepTimes {
  bool measured = false;
  std::string skipped;  // why not measured
  int64_t layers = 0, of_layers = 0;
  double bf16_step_s = 0, fp32_step_s = 0;
};
// What the probe found, the one wording `ctrl train`, `ctrl bench` and
// `ctrl plan` share: "a bf16 training step measured 0.642 s on this CPU
// against fp32's 0.526 s (this model" + detail + ")", naming the cut when
// there is one; when not measured, "bf16 against fp32 not measured: " and why.
std::string bf16_step_times_text(const Bf16StepTimes& times, const std::string& detail = "");
// One line for `ctrl train`, `ctrl bench` and `ctrl plan` when fp32 steps
// are at least kFp32WorthSwitching times faster, naming both figures, what
// they were measured on and the flag; "" otherwise, and when not measured.
// `bf16_seconds` > 0 adds the planned time in both precisions.
constexpr double kFp32WorthSwitching = 1.1;
// bf16_path is Ops::bf16_path(): native, emulated or widened.
std::string bf16_slower_advice(const Bf16StepTimes& times, const std::string& bf16_path, double bf16_seconds = 0);

// Validates the request (one-line ctrl::Error on nonsense) and plans.
Plan make_plan(const Request& request);
std::string plan_json(const Plan& plan);   // pretty JSON, stable key order
std::string plan_text(const Plan& plan);   // readable table ending in the verdict line

}  // namespace ctrl::plan
