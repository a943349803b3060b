// The training loop: micro-batches with gradient accumulation up to the
// global batch, global-norm clipping, the optimizer and its schedule,
// held-out evaluation per control code, checkpoints that resume bit for bit,
// and metrics (one JSON line per logged step plus a drawn loss curve).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/config.h"
#include "model/model.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/grad_sync.h"
#include "train/run_dir.h"

namespace ctrl {

struct TrainerOptions {
  std::string run_dir;
  bool resume = false;
  bool quiet = false;  // no terminal progress (tests)
  // Data parallelism: each of comm->size() ranks takes global_batch / size
  // sequences of every step; gradients are summed across ranks. Null: one
  // process. Only rank 0 writes checkpoints, metrics and the loss curve.
  Communicator* comm = nullptr;
  int zero = 0;  // 1: ZeRO-1, optimizer state sharded across ranks
  // The config's train.distill_alpha / distill_temperature were given for
  // this start (flags, --set, a TOML file): a --resume that keeps the run's
  // teacher goes on with each one given instead of the run's own.
  bool distill_alpha_given = false, distill_temperature_given = false;
  // Called on every rank before each optimizer step (numbered from 1), with
  // the rank: ctrl train's fault injection for tests (CTRL_TEST_FAULT) goes here.
  std::function<void(int64_t step, int rank)> before_step = nullptr;
};

class Trainer {
 public:
  Trainer(const Config& config, const TrainerOptions& options);
  ~Trainer();
  // Trains until config.train.steps optimizer steps are done, or until
  // SIGINT, SIGTERM or SIGHUP, or the run directory's stop file
  // (RunDir::stop_path): then it stops after the current step, writes a
  // checkpoint and returns with stopped_early() (and for a signal
  // stopped_by()) set on every rank. A failed write of metrics.jsonl stops
  // it the same way and throws ctrl::Error.
  void run();
  // Whether run() stopped before train.steps, and the signal that stopped it (or 0).
  bool stopped_early() const { return stopped_early_; }
  int stopped_by() const { return stopped_by_; }
  // Whether loss.svg shows the run's last logged step (none is drawn before a step is logged, nor where it
  // cannot be written).
  bool loss_curve_current() const { return loss_curve_current_; }
  // Mean training loss of every step this object ran, in order.
  const std::vector<double>& step_losses() const { return step_losses_; }
  Model& model() { return *model_; }
  const TrainState& state() const { return state_; }
  // The communicator the gradients go through (NCCL over options.comm for a GPU backend).
  const Communicator& communicator() const { return *comm_; }

 private:
  // Construction, in this order; each refuses what cannot work before anything is written.
  void open_batches();  // the corpus's (or synthetic) sequences, and its tokenizer and codes into contents_
  std::unique_ptr<Checkpoint> checkpoint_to_resume();
  void open_data(const Checkpoint* checkpoint);  // checks the corpus against a resumed checkpoint
  void build_engine(const Checkpoint* teacher);
  void choose_bf16_products(const Checkpoint* checkpoint);
  void share_initial_state(const Checkpoint* checkpoint);

  void print_start();
  void train_step();
  void accumulate_gradients(float grad_scale);
  bool update_loss_scale(bool finite);
  void evaluate();
  void save();
  void save_or_stop();
  void draw_loss_curve();
  void stop_early(const StopRequest& stop);
  void log_step(double loss, double lr, double norm, double step_seconds, double kl);
  bool writer() const { return comm_->rank() == 0; }
  // A resume of a run already at or past train.steps: it trains and writes nothing.
  bool resumed_past_the_end() const { return options_.resume && state_.step >= config_.train.steps; }

  Config config_;
  TrainerOptions options_;
  std::unique_ptr<Communicator> own_comm_;
  Communicator* comm_ = nullptr;
  // The backend: declared before every buffer it allocated, so it outlives them.
  std::unique_ptr<Ops> ops_;
  Ops::Bf16Choice bf16_choice_;     // bf16 on a CPU: the products' path and what chose it
  DeviceArray<double> scalars_;     // per step: Σ loss, Σ KL, Σ g² (read by the host once per step)
  DeviceArray<float> grad_factor_;  // unscale × clip factor, applied by the optimizer update
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> teacher_;  // distillation (train.teacher): forward only, no gradients
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<Optimizer> optimizer_;
  // NCCL over the host communicator, for a GPU backend. Declared after the
  // buffers its collectives use and after the backend whose stream it follows,
  // so that it finishes (or, past the timeout, aborts) what is in flight before
  // any of them goes.
  std::unique_ptr<Communicator> device_comm_;
  std::shared_ptr<const Dataset> dataset_;
  std::unique_ptr<Batches> batches_;
  CheckpointContents contents_;
  TrainState state_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<double> step_losses_;
  std::unique_ptr<RunDir> run_dir_;  // rank 0 only
  int stopped_by_ = 0;
  bool loss_curve_current_ = false, loss_curve_warned_ = false;
  bool stopped_early_ = false;
  double window_seconds_ = 0, window_tokens_ = 0;
  int64_t window_steps_ = 0;
};

}  // namespace ctrl
