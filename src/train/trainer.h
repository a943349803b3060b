// The training loop: micro-batches with gradient accumulation up to the
// global batch, global-norm clipping, the optimizer and its schedule,
// held-out evaluation per control code, checkpoints that resume bit for bit,
// and metrics (one JSON line per logged step plus a drawn loss curve).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/config.h"
#include "model/model.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"

namespace ctrl {

struct CodeLoss {
  std::string code;
  double loss = 0;     // mean nats per token
  int64_t tokens = 0;
  double perplexity() const;
};

// The summed loss and the target count of n windows (tokens and targets
// [n, T], host arrays) in micro-batches of `batch` sequences; the loss
// accumulates on the backend and is read once. Held-out evaluation and the
// code-by-code matrix (eval/control.h) both go through it, so the same windows
// give the same bits.
LossSum evaluate_windows(Model& model, const int32_t* tokens, const int32_t* targets, int64_t n, int64_t T,
                         int64_t batch);

// Loss and perplexity per control code over each code's held-out windows
// (at most max_sequences per code), in micro-batches of `batch` sequences.
// With a communicator of several ranks, rank r evaluates every size-th window
// and the sums are all-reduced, so every rank returns the same figures.
std::vector<CodeLoss> evaluate_held_out(Model& model, const Batches& batches, int64_t batch, int64_t max_sequences,
                                        Communicator* comm = nullptr);

struct TrainerOptions {
  std::string run_dir;
  bool resume = false;
  bool quiet = false;  // no terminal progress (tests)
  // Data parallelism: each of comm->size() ranks takes global_batch / size
  // sequences of every step; gradients are summed across ranks. Null: one
  // process. Only rank 0 writes checkpoints, metrics and the loss curve.
  Communicator* comm = nullptr;
  int zero = 0;  // 1: ZeRO-1, optimizer state sharded across ranks
};

class Trainer {
 public:
  Trainer(const Config& config, const TrainerOptions& options);
  ~Trainer();
  // Trains until config.train.steps optimizer steps are done, or until
  // SIGINT, SIGTERM or SIGHUP: then it stops after the current step, writes
  // a checkpoint and returns with stopped_by() set (on every rank). A failed
  // write of metrics.jsonl stops it the same way and throws ctrl::Error.
  void run();
  // The signal that stopped run() early, or 0.
  int stopped_by() const { return stopped_by_; }
  // Mean training loss of every step this object ran, in order.
  const std::vector<double>& step_losses() const { return step_losses_; }
  Model& model() { return *model_; }
  const TrainState& state() const { return state_; }

 private:
  void train_step();
  void evaluate();
  void save();
  void stop_early(const StopRequest& stop);
  void log_step(double loss, double lr, double norm, double step_seconds, double kl);
  void reduce_gradients();
  void start_reduce(size_t offset, size_t n);
  void share_initial_state(const Checkpoint* checkpoint);
  bool writer() const { return comm_->rank() == 0; }

  Config config_;
  TrainerOptions options_;
  std::unique_ptr<Communicator> own_comm_;
  Communicator* comm_ = nullptr;
  // The backend: declared before every buffer it allocated, so it outlives them.
  std::unique_ptr<Ops> ops_;
  // Gradient buckets: one per transformer layer (reduced while backward
  // continues), then the rest (embedding, final LayerNorm, head bias).
  std::vector<std::pair<size_t, size_t>> layer_ranges_;
  std::vector<int> pending_;
  DeviceArray<float> grad_shard_;  // ZeRO-1: this rank's share of the summed gradients
  bool grads_lent_ = false;         // the communicator holds model grads (begin_host_access)
  DeviceArray<double> scalars_;     // per step: Σ loss, Σ g², Σ KL (read by the host once per step)
  DeviceArray<float> grad_factor_;  // unscale × clip factor, applied by the optimizer update
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> teacher_;  // distillation (train.teacher): forward only, no gradients
  std::unique_ptr<Optimizer> optimizer_;
  std::shared_ptr<const Dataset> dataset_;
  std::unique_ptr<Batches> batches_;
  CheckpointContents contents_;
  TrainState state_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<double> step_losses_;
  std::unique_ptr<RunDir> run_dir_;  // rank 0 only
  int stopped_by_ = 0;
  double window_seconds_ = 0, window_tokens_ = 0;
  int64_t window_steps_ = 0;
};

}  // namespace ctrl
