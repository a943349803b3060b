#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/file_io.h"
#include "core/plot.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/sysinfo.h"
#include "plan/plan.h"
#include "train/loss_scaler.h"
#include "train/run_dir.h"
#include "train/shard_stream.h"
#include "train/synthetic_steps.h"

namespace ctrl {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kDropoutStream = 0xD50F;

// The settings of one section ("model.", "train.") in which `now` differs from
// `before` ("model.n_layer 4 in the checkpoint, 2 now; ..."), or "" when none does.
std::string config_differences(const Config& before, const Config& now, const std::string& section) {
  const nlohmann::json a = nlohmann::json::parse(config_to_json(before)),
                       b = nlohmann::json::parse(config_to_json(now));
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  std::string out;
  for (auto it = a.begin(); it != a.end(); ++it)
    if (it.key().rfind(section, 0) == 0 && b.value(it.key(), nlohmann::json()) != it.value())
      out += (out.empty() ? "" : "; ") + it.key() + " " + text(it.value()) + " in the checkpoint, " +
             text(b.value(it.key(), nlohmann::json())) + " now";
  return out;
}

// loss.svg from metrics.jsonl: the training loss and each held-out code's; false when no step is logged yet.
bool write_loss_curve(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  Series train{"train", {}, {}};
  std::map<std::string, Series> held_out;
  while (std::getline(in, line)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (...) {
      continue;
    }
    const double step = j.value("step", 0.0);
    if (j.contains("loss")) train.x.push_back(step), train.y.push_back(j["loss"].get<double>());
    if (j.contains("eval"))
      for (auto it = j["eval"].begin(); it != j["eval"].end(); ++it) {
        Series& s = held_out[it.key()];
        s.name = "held-out " + it.key();
        s.x.push_back(step);
        s.y.push_back(it.value().at("loss").get<double>());
      }
  }
  std::vector<Series> all = {train};
  for (auto& [k, s] : held_out) all.push_back(s);
  if (train.x.empty()) return false;
  write_line_chart(run_dir + "/loss.svg", "Training loss", "step", "loss (nats/token)", all);
  return true;
}

// The same tokenizer and the same control codes, or the teacher's logits do not mean the student's tokens.
void check_teacher_shares_codes(const CheckpointContents& teacher, const CheckpointContents& student,
                                const std::string& path) {
  const std::string where = "ctrl train --teacher " + path + ": ";
  if (teacher.tokenizer != student.tokenizer)
    fail(where + (teacher.tokenizer.empty() || student.tokenizer.empty()
                      ? "one of teacher and student was trained without a tokenizer"
                      : "the teacher's tokenizer differs from the corpus's") +
         "; student and teacher must share the tokenizer");
  // In name order: the two corpora may list the same codes in another order (the order of --source).
  auto names = [](const std::vector<CodeInfo>& codes) {
    std::vector<std::string> each;
    for (const auto& c : codes) each.push_back(c.name + "=" + std::to_string(c.token_id));
    std::sort(each.begin(), each.end());
    std::string s;
    for (const auto& e : each) s += (s.empty() ? "" : ", ") + e;
    return s;
  };
  if (names(teacher.codes) != names(student.codes))
    fail(where + "the teacher's control codes (" + names(teacher.codes) + ") differ from the student's (" +
         names(student.codes) + "); student and teacher must share the control codes");
}

// What a resumed run keeps from its own config.json when the command leaves
// it out: the corpus, and the teacher with its weighting. Without them a
// `--resume` that forgot --data would go on with synthetic tokens and write
// checkpoints of a model that knows no control codes. Rank 0 reads the file;
// every rank takes the same settings. Notes say what was carried over.
// The settings a run directory's config.json records (its last start's), or
// none: no file, or one that cannot be read (`error` says why).
std::optional<Config> run_config(const std::string& run_dir, std::string* error = nullptr) {
  const std::string path = run_dir + "/config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  try {
    return config_from_json(read_file(path), path);
  } catch (const Error& e) {
    if (error) *error = e.what();
    return std::nullopt;
  }
}

void inherit_run_settings(const std::string& run_dir, Config& config, const TrainerOptions& given, Communicator& comm) {
  const bool distill_given = given.distill_alpha_given || given.distill_temperature_given;
  std::string kept;
  if (comm.rank() == 0) {
    const std::string path = run_dir + "/config.json";
    std::string unreadable;
    const std::optional<Config> start = run_config(run_dir, &unreadable);
    if (!unreadable.empty())
      std::fprintf(stderr, "ctrl: warning: --resume cannot read %s (%s): nothing is carried over from it\n",
                   path.c_str(), unreadable.c_str());
    nlohmann::json j = nlohmann::json::object();
    if (start && config.train.data.empty() && !start->train.data.empty()) {
      j["data"] = start->train.data;
      std::fprintf(stderr, "note: --resume continues on the run's corpus %s (train.data in %s)\n",
                   start->train.data.c_str(), path.c_str());
    }
    if (start && config.train.teacher.empty() && !start->train.teacher.empty()) {
      j["teacher"] = start->train.teacher;
      j["alpha"] = given.distill_alpha_given ? config.train.distill_alpha : start->train.distill_alpha;
      j["temperature"] =
          given.distill_temperature_given ? config.train.distill_temperature : start->train.distill_temperature;
      std::fprintf(stderr, "note: --resume keeps the run's teacher %s (train.teacher in %s)%s\n",
                   start->train.teacher.c_str(), path.c_str(),
                   distill_given ? ", with the distillation settings given now" : "");
    }
    if (distill_given && config.train.teacher.empty() && !j.contains("teacher"))
      j["error"] = "ctrl train --resume: train.distill_alpha or train.distill_temperature was given, but " +
                   (start ? path + " names no teacher" : "there is no readable " + path + " to take a teacher from") +
                   "; pass --teacher CKPT to distill";
    kept = j.dump();
  }
  uint64_t size = kept.size();
  comm.broadcast(&size, sizeof size, 0);
  kept.resize(size_t(size));
  comm.broadcast(kept.data(), kept.size(), 0);
  const nlohmann::json j = nlohmann::json::parse(kept);
  if (j.contains("error")) fail(j["error"].get<std::string>());  // on every rank alike
  if (j.contains("data")) config.train.data = j["data"].get<std::string>();
  if (j.contains("teacher")) {
    config.train.teacher = j["teacher"].get<std::string>();
    config.train.distill_alpha = j["alpha"].get<double>();
    config.train.distill_temperature = j["temperature"].get<double>();
  }
}

}  // namespace

Trainer::Trainer(const Config& config, const TrainerOptions& options) : config_(config), options_(options) {
  validate(config_);
  comm_ = options_.comm;
  if (!comm_) {
    own_comm_ = make_single_communicator();
    comm_ = own_comm_.get();
  }
  // Nothing is created for a resume of a run that is not there (a mistyped --out).
  if (options_.resume && comm_->rank() == 0 && !std::filesystem::is_directory(options_.run_dir))
    fail(options_.run_dir +
         ": --resume given but there is no such run directory (without --resume, a new run starts "
         "there)");
  // First, as every later collective depends on them: ranks that disagree
  // here would wait on each other's different calls until the timeout.
  comm_->check_identical("the use of --resume and --zero", std::string("--resume ") + (options_.resume ? "yes" : "no") +
                                                               ", --zero " + std::to_string(options_.zero));
  if (options_.resume) inherit_run_settings(options_.run_dir, config_, options_, *comm_);
  // config.json and the checkpoints record absolute paths: a resume from another directory finds them.
  for (std::string* path : {&config_.train.data, &config_.train.teacher})
    if (!path->empty()) *path = std::filesystem::absolute(*path).lexically_normal().string();
  const auto& t = config_.train;
  const int64_t ranks = comm_->size();
  if (t.global_batch % (ranks * t.micro_batch) != 0) {
    // The largest micro-batch below the given one that divides the batch, when one does (1 always does then).
    int64_t fitting = std::min(t.micro_batch, std::max<int64_t>(1, t.global_batch / ranks));
    while (t.global_batch % ranks == 0 && t.global_batch % (ranks * fitting) != 0) --fitting;
    fail("config " + config_.preset + ": train.global_batch (" + std::to_string(t.global_batch) +
         ") must be a multiple of ranks x train.micro_batch (" + std::to_string(ranks) + " x " +
         std::to_string(t.micro_batch) + ")" +
         (t.global_batch % ranks == 0 ? "; e.g. --set train.micro_batch=" + std::to_string(fitting)
                                      : "; e.g. --set train.global_batch=" + std::to_string(ranks * t.micro_batch)));
  }
  if (options_.zero != 0 && options_.zero != 1) fail("--zero must be 0 or 1");
  const std::unique_ptr<Checkpoint> teacher = open_teacher(config_, "ctrl train");
  // Before anything is written or the engine's buffers are allocated: a run
  // that cannot fit in host memory (CPU) or in the GPU's is refused with the figure.
  ops_ = make_ops(t.device, int(t.threads), comm_->rank_on_host());
  // NCCL takes one rank per GPU; the UUID tells GPUs apart whatever CUDA_VISIBLE_DEVICES numbered them.
  if (ops_->gpu() >= 0)
    check_distinct(*comm_, "GPU", ops_->gpu_uuid(),
                   "NCCL takes one rank per GPU: use --device cuda (each rank its own GPU) and at most as many ranks "
                   "on a machine as it has GPUs");
  plan::check_memory(config_, t.micro_batch, options_.zero == 1 ? int(ranks) : 1,
                     plan::on_cuda(config_) ? ops_->device_room_bytes() : plan::available_memory_bytes(),
                     most_cpu_threads(t.threads), teacher ? &teacher->config().model : nullptr, int(ranks),
                     comm_->ranks_on_host());
  comm_->check_identical("the configuration", config_to_json(config_));
  comm_->check_identical("the ctrl build", std::string(CTRL_VERSION) + " " + __DATE__ + " " + __TIME__);
  // CTRL_DEVICE is not in the configuration: every rank must have made the same backend.
  comm_->check_identical("the backend", ops_->name());
  // The corpus opens before the run directory is made: a wrong --data leaves nothing behind.
  if (!t.data.empty()) {
    dataset_ = std::make_shared<Dataset>(Dataset::open(t.data));
    comm_->check_identical("the corpus (its codes, split and shards)", dataset_->digest());
    if (dataset_->manifest().vocab_size > uint32_t(config_.model.vocab_size))
      fail(t.data + ": corpus vocabulary " + std::to_string(dataset_->manifest().vocab_size) +
           " is larger than model.vocab_size " + std::to_string(config_.model.vocab_size) +
           " (set --set model.vocab_size=" + std::to_string(dataset_->manifest().vocab_size) + ")");
    // Larger is allowed (a padded vocabulary), but ids past the corpus's never
    // occur: their rows only learn not to be predicted. Worth a word when it is
    // more than padding.
    const int64_t unused = config_.model.vocab_size - int64_t(dataset_->manifest().vocab_size);
    if (unused > 128 && writer() && !options_.quiet)
      std::fprintf(stderr,
                   "note: model.vocab_size %lld is %lld above the corpus's %u pieces; those ids never occur "
                   "(--set model.vocab_size=%u to leave them out)\n",
                   static_cast<long long>(config_.model.vocab_size), static_cast<long long>(unused),
                   dataset_->manifest().vocab_size, dataset_->manifest().vocab_size);
  }
  open_batches();
  // A teacher for other tokens is refused before the run directory exists, too.
  if (teacher) check_teacher_shares_codes(teacher->contents(), contents_, t.teacher);
  if (writer()) {
    run_dir_ = std::make_unique<RunDir>(options_.run_dir);  // the lock, and what killed runs left
    // A stop file from before this start (made while nothing trained, or
    // during a run's last save) would end this one after its first step.
    if (run_dir_->stop_requested()) {
      std::filesystem::remove(run_dir_->stop_path());
      std::fprintf(stderr, "note: removed %s, left from before this start (create it again to stop this run)\n",
                   run_dir_->stop_path().c_str());
    }
  }
  const std::unique_ptr<Checkpoint> checkpoint = checkpoint_to_resume();
  open_data(checkpoint.get());
  // The bf16 path's start-up measurement runs before the engine's buffers
  // exist: its own (2048^3 products) are freed back before the peak.
  choose_bf16_products(checkpoint.get());
  build_engine(teacher.get());
  share_initial_state(checkpoint.get());
  if (writer()) {  // the settings this run goes on with (a resume may have changed train.steps, say)
    if (!resumed_past_the_end())
      write_file_atomically(options_.run_dir + "/config.json",
                            nlohmann::json::parse(config_to_json(config_)).dump(2) + "\n");
    run_dir_->open_metrics(state_.step);
  }
  const size_t seq = size_t(t.micro_batch * config_.model.n_ctx);
  tokens_.resize(seq);
  targets_.resize(seq);
  scalars_ = DeviceArray<double>(*ops_, 3, "trainer.scalars");
  grad_factor_ = DeviceArray<float>(*ops_, 1, "trainer.grad_factor");
}

// Rank 0 picks what --resume continues from: the newest checkpoint that
// verifies (a damaged newest one falls back to the previous), or none; and
// refuses a run directory that holds another run without --resume.
std::unique_ptr<Checkpoint> Trainer::checkpoint_to_resume() {
  const std::string& run = options_.run_dir;
  const auto existing = writer() ? list_checkpoints(run) : std::vector<std::string>{};
  // A run stopped before its first checkpoint: --resume starts it again from step 0.
  const bool restart = options_.resume && writer() && existing.empty() && run_dir_->has_metrics();
  // ... unless its metrics show steps logged after a checkpoint was saved (at
  // the run's own checkpoint_every, from its config.json): then the
  // checkpoints went missing, and starting again would drop those lines.
  if (restart) {
    const std::optional<Config> start = run_config(run);  // none readable: this start's setting
    const int64_t every = start ? start->train.checkpoint_every : config_.train.checkpoint_every;
    const int64_t logged = run_dir_->last_metrics_step();
    if (every > 0 && logged > every)
      fail(run + ": metrics.jsonl records steps up to " + std::to_string(logged) +
           ", past the first checkpoint (step " + std::to_string(every) + "), but " + run +
           "/checkpoints holds no checkpoint (deleted or moved?); --resume would start again from step 0 and drop "
           "those lines: put the checkpoints back, remove metrics.jsonl to start again, or choose another --out");
  }
  if (restart)
    std::fprintf(stderr, "note: %s has no checkpoint yet; --resume starts it again from step 0\n", run.c_str());
  if (!options_.resume || !writer() || restart) {
    if (!options_.resume && !existing.empty())
      fail(run + ": already holds checkpoints; pass --resume to continue it or choose another --out");
    if (!options_.resume && writer() && run_dir_->has_metrics())
      fail(run + ": holds metrics.jsonl of an earlier run that stopped before its first checkpoint; pass --resume "
           "to start it again from step 0 or choose another --out");
    return nullptr;
  }
  std::unique_ptr<Checkpoint> checkpoint;
  std::vector<std::string> damaged;
  for (auto it = existing.rbegin(); it != existing.rend() && !checkpoint; ++it) {
    try {
      checkpoint = std::make_unique<Checkpoint>(*it);
    } catch (const CheckpointTooNew&) {
      throw;  // never train over (and then prune) a newer ctrl's run
    } catch (const FileUnreadable& e) {  // not damage: falling back would train over a good checkpoint
      fail(std::string(e.what()) + "; --resume stops here rather than go back past it (nothing was moved): " +
           "resume again once it can be opened");
    } catch (const Error& e) {
      std::fprintf(stderr, "ctrl: warning: skipping %s\n", e.what());
      damaged.push_back(*it);
    }
  }
  if (!checkpoint) fail(run + ": --resume given but no readable checkpoint in " + run + "/checkpoints");
  // The run goes on from an earlier step: the damaged later files move aside
  // (kept for a look, never over an earlier one), so a later --resume does not
  // try them again. Only damage gets here: a file that cannot be opened or
  // mapped stopped the resume above (FileUnreadable), and one whose pages
  // cannot be read ends the process in the checksum's reading (SIGBUS).
  for (const std::string& path : damaged) {
    std::string aside = path + ".damaged";
    for (int n = 1; std::filesystem::exists(aside); ++n) aside = path + ".damaged." + std::to_string(n);
    std::error_code failed;
    std::filesystem::rename(path, aside, failed);
    if (failed) fail(path + ": cannot move the damaged checkpoint aside to " + aside + ": " + failed.message());
    std::fprintf(stderr, "ctrl: note: moved it aside to %s\n", aside.c_str());
  }
  if (const std::string differ = config_differences(checkpoint->config(), config_, "model."); !differ.empty())
    fail(checkpoint->path() + ": the checkpoint's model settings differ from --config's (" + differ +
         "); resume with the checkpoint's");
  // The training settings are this command's (--config and --set): say which
  // differ from the run's, since a forgotten --set changes the run silently.
  if (options_.quiet) return checkpoint;
  std::fprintf(stderr, "resuming %s from step %lld (%s)\n", run.c_str(),
               static_cast<long long>(checkpoint->contents().state.step), checkpoint->path().c_str());
  Config now = config_;  // train.cpu_bf16 auto keeps the run's choice (choose_bf16_products): no change
  if (now.train.cpu_bf16 == "auto") now.train.cpu_bf16 = checkpoint->config().train.cpu_bf16;
  if (const std::string changed = config_differences(checkpoint->config(), now, "train."); !changed.empty())
    std::fprintf(stderr, "note: --resume trains with settings other than the run's (--config and --set decide): %s\n",
                 changed.c_str());
  return checkpoint;
}

// The batches of the corpus opened at start (or synthetic tokens without
// train.data) and what checkpoints record of it: control codes, tokenizer, config.
void Trainer::open_batches() {
  const int64_t T = config_.model.n_ctx;
  if (dataset_) {
    batches_ = std::make_unique<Batches>(Batches::from_dataset(dataset_, T, config_.train.seed));
    if (!dataset_->tokenizer_path().empty()) contents_.tokenizer = read_file(dataset_->tokenizer_path());
  } else {
    batches_ = std::make_unique<Batches>(Batches::synthetic(config_.model.vocab_size, T, config_.train.seed));
  }
  for (size_t c = 0; c < batches_->n_codes(); ++c)
    contents_.codes.push_back({batches_->code_name(c), batches_->code_token(c)});
}

void Trainer::open_data(const Checkpoint* checkpoint) {
  const ModelConfig& m = config_.model;
  if (checkpoint) {  // a corpus run goes on with a corpus, a synthetic one without
    const std::string& before = checkpoint->config().train.data;
    if (!before.empty() && config_.train.data.empty())
      fail("ctrl train --resume: " + checkpoint->path() + " was trained on the corpus " + before +
           "; pass --data with that corpus");
    if (before.empty() && !config_.train.data.empty())
      fail("ctrl train --resume: " + checkpoint->path() + " was trained on synthetic tokens, not a corpus; train on " +
           config_.train.data + " in a new --out");
  }
  if (dataset_) {
    if (checkpoint) check_corpus_matches(checkpoint->contents(), *dataset_, "ctrl train --resume");
    if (comm_->rank() == 0) {
      for (const std::string& code : batches_->unusable_codes())
        std::fprintf(stderr,
                     "ctrl: warning: control code %s has fewer training tokens than the %lld of one sequence "
                     "(model.n_ctx): it is never trained on\n",
                     code.c_str(), static_cast<long long>(m.n_ctx));
      if (const std::string gap = held_out_gap_note(*batches_); !gap.empty())
        std::fprintf(stderr, "ctrl: note: %s\n", gap.c_str());
    }
  }
  contents_.config = config_;
}

// The backend, the model (and teacher), gradient synchronization and the optimizer over this rank's shard.
void Trainer::build_engine(const Checkpoint* teacher) {
  const auto& t = config_.train;
  // The host communicators' data plane reads gradients and parameters on the
  // host (dist/communicator.h); device memory takes NCCL, bootstrapped over
  // the host communicator. Every rank decides alike, before any collective.
  const int64_t ranks = comm_->size();
  if (!ops_->host_memory() && (ranks > 1 || options_.zero == 1)) {
#ifdef CTRL_HAVE_NCCL
    device_comm_ = make_nccl_communicator(*comm_, ops_->gpu(), ops_->work_queue());
    comm_ = device_comm_.get();
#else
    fail(std::string("--device ") + t.device + " with " +
         (ranks > 1 ? std::to_string(ranks) + " ranks" : std::string("--zero 1")) +
         " needs the NCCL communicator, and this build has none (rebuild where nccl.h is installed)");
#endif
  }
  model_ = std::make_unique<Model>(config_.model, *ops_, t.micro_batch, activation_dtype(t.precision));
  if (teacher) {  // forward only: no gradients, one layer's activations at a time, the student's precision
    teacher_ = std::make_unique<Model>(plan::teacher_forward_config(teacher->config().model), *ops_, t.micro_batch,
                                       activation_dtype(t.precision), false);
    teacher->load_parameters(*teacher_);
  }
  sync_ = std::make_unique<GradientSync>(*model_, *ops_, *comm_, options_.zero);
  optimizer_ = std::make_unique<Optimizer>(t, model_->layout(), *ops_, sync_->shard_begin(), sync_->shard_size());
}

// bf16 on a CPU: how its products run (train.cpu_bf16). auto keeps what the
// resumed run chose (its rounding), else rank 0 measures; every rank follows
// rank 0, and config.json and the checkpoints record the path taken.
void Trainer::choose_bf16_products(const Checkpoint* checkpoint) {
  auto& t = config_.train;
  if (t.precision != "bf16" || ops_->gpu() >= 0) return;
  int64_t widened = 0;
  if (writer()) {
    std::string setting = t.cpu_bf16;
    if (setting == "auto" && checkpoint && checkpoint->config().train.cpu_bf16 != "auto")
      setting = checkpoint->config().train.cpu_bf16;
    bf16_choice_ = ops_->choose_bf16_products(setting, 0.2);
    reset_peak_rss();  // the timing's products are freed: the run's peak memory is its own, --quiet or not
    widened = bf16_choice_.widened;
  }
  comm_->broadcast(&widened, sizeof widened, 0);
  t.cpu_bf16 = widened ? "widened" : "native";
  contents_.config.train.cpu_bf16 = t.cpu_bf16;  // checkpoints record the path taken, as config.json does
  if (!writer()) bf16_choice_ = ops_->choose_bf16_products(t.cpu_bf16, 0);
}

// Rank 0 initializes or loads the weights, optimizer state and position;
// every other rank receives them, so all replicas start identical and only
// rank 0 needs the run directory.
void Trainer::share_initial_state(const Checkpoint* checkpoint) {
  const ParamLayout& layout = model_->layout();
  int64_t flags[4] = {0, 0, 0, 0};  // resumed, has optimizer state, step, next_sequence
  if (writer()) {
    if (checkpoint) {
      checkpoint->load_parameters(*model_);
      state_ = checkpoint->contents().state;
      flags[0] = 1;
      flags[1] = checkpoint->has_optimizer_state(config_.train.optimizer);
      if (!flags[1])
        std::fprintf(stderr, "note: checkpoint has no %s state; the optimizer starts fresh\n",
                     config_.train.optimizer.c_str());
    } else {
      model_->init_weights();
      state_.scaler.scale = config_.train.loss_scale;
    }
    flags[2] = state_.step, flags[3] = state_.next_sequence;
  }
  comm_->broadcast(flags, sizeof flags, 0);
  ops_->synchronize();
  {
    HostAccess lend(*ops_, model_->params.data());
    comm_->broadcast(model_->params.data(), layout.total * sizeof(float), 0);
  }
  comm_->broadcast(&state_.elapsed_seconds, sizeof(double), 0);
  comm_->broadcast(&state_.scaler, sizeof state_.scaler, 0);
  state_.step = flags[2], state_.next_sequence = flags[3];
  if (!flags[1]) return;
  // A piece at a time: rank 0 reads it, every rank keeps its shard's part.
  // A whole buffer staged on the host put a resumed `small` 96 MiB above a
  // fresh run's peak.
  optimizer_->load_state(
      [&](const std::string& name, size_t begin, size_t count, float* out) {
        if (writer()) checkpoint->read_optimizer_state(name, layout, begin, count, out);
        comm_->broadcast(out, count * sizeof(float), 0);
      },
      kInitStagingFloats);
  int64_t opt_step = writer() ? checkpoint->optimizer_step() : 0;
  comm_->broadcast(&opt_step, sizeof opt_step, 0);
  optimizer_->set_step_count(opt_step);
}

Trainer::~Trainer() = default;

// One optimizer step: this rank's micro-batches, the gradients summed over
// ranks, one read of the step's scalars, then the update with the combined
// unscale and clip factor (skipped under fp16 when the gradients overflowed).
void Trainer::train_step() {
  const auto& t = config_.train;
  // Every target of a training sequence counts, so the mean over the global batch is Σ / (global_batch · T).
  // Under fp16 the loss is multiplied by the loss scale as well, and the gradients divided by it below.
  const double tokens = double(t.global_batch * config_.model.n_ctx);
  const bool fp16 = t.precision == "fp16";
  const double loss_scale = fp16 ? state_.scaler.scale : 1.0;
  const auto start = Clock::now();
  accumulate_gradients(float(loss_scale / tokens));
  const DeviceArray<float>& grads = sync_->summed_gradients();
  double* scalars = scalars_.data();  // [Σ cross-entropy, Σ KL(teacher‖student), Σ g²]
  ops_->sum_squares(grads.data(), grads.size(), scalars + 2);
  sync_->sum_step_scalars(scalars);
  ops_->clip_factor(scalars + 2, loss_scale, t.clip_norm, grad_factor_.data());
  double host[3];
  scalars_.download(host, 3);  // the step's one read of backend scalars
  const double loss = host[0] / tokens, kl = host[1] / tokens, norm = std::sqrt(host[2]) / loss_scale;
  const double lr = learning_rate(t, state_.step);
  // A non-finite loss or gradient never reaches the weights. Under fp16 it
  // skips the step and halves the loss scale, down to 1: below that, the
  // gradients overflow unscaled and no scale will help.
  const bool finite = std::isfinite(host[2]) && std::isfinite(loss);
  if (!finite && (!fp16 || loss_scale <= 1.0)) {
    char what[160];
    const int n = std::snprintf(what, sizeof what, "training diverged at step %lld: loss %g, gradient norm %g",
                                static_cast<long long>(state_.step + 1), loss, norm);
    if (fp16) std::snprintf(what + n, sizeof what - size_t(n), " at fp16 loss scale %g", loss_scale);
    fail(std::string(what) + " (lower train.lr or raise train.warmup_steps)");
  }
  if (!fp16 || update_loss_scale(finite)) {
    optimizer_->step(model_->params, grads.data(), lr, grad_factor_.data());
    sync_->share_parameters();
  }
  ++state_.step;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  state_.elapsed_seconds += seconds;
  step_losses_.push_back(loss);
  log_step(loss, lr, norm, seconds, kl);
}

// This rank's micro-batches of the step: their gradients summed into the
// model's (scaled by grad_scale), their cross-entropy (and KL) into scalars_.
void Trainer::accumulate_gradients(float grad_scale) {
  const auto& t = config_.train;
  const int64_t per_rank = t.global_batch / comm_->size(), micro_steps = per_rank / t.micro_batch;
  model_->zero_grads();
  const double zeros[3] = {0, 0, 0};
  scalars_.upload(zeros, 3);
  const Distillation distill = distillation(teacher_.get(), t, scalars_.data() + 1);
  const int64_t first = state_.next_sequence + comm_->rank() * per_rank;
  for (int64_t m = 0; m < micro_steps; ++m) {
    const int64_t seq = first + m * t.micro_batch;
    sync_->begin_micro_batch(m + 1 == micro_steps);
    batches_->train(seq, t.micro_batch, tokens_.data(), targets_.data());
    model_->forward_backward(tokens_.data(), targets_.data(), t.micro_batch, config_.model.n_ctx, grad_scale,
                             random_bits(t.seed, kDropoutStream, 0), uint64_t(seq), scalars_.data(),
                             teacher_ ? &distill : nullptr);
    sync_->end_micro_batch();
  }
  state_.next_sequence += t.global_batch;
}

// fp16's dynamic loss scale after a step whose gradients were (not) finite; whether the step applies.
bool Trainer::update_loss_scale(bool finite) {
  LossScaler scaler(state_.scaler.scale, config_.train.loss_scale_window);
  scaler.restore(state_.scaler);
  const bool apply = scaler.update(finite);
  state_.scaler = scaler.state();
  return apply;
}

void Trainer::log_step(double loss, double lr, double norm, double seconds, double kl) {
  const auto& t = config_.train;
  window_seconds_ += seconds;
  window_tokens_ += double(t.global_batch * config_.model.n_ctx);
  ++window_steps_;
  if ((state_.step % t.log_every != 0 && state_.step != t.steps) || !writer()) return;
  const double tps = window_tokens_ / window_seconds_, its = double(window_steps_) / window_seconds_;
  nlohmann::ordered_json j;
  j["step"] = state_.step;
  j["loss"] = loss;
  j["lr"] = lr;
  if (teacher_) {  // loss stays the cross-entropy (comparable with any run); the objective mixes in the KL
    const double a = t.distill_alpha, tau = t.distill_temperature;
    j["kl"] = kl;
    j["objective"] = (1 - a) * loss + a * tau * tau * kl;
  }
  j["grad_norm"] = norm;
  j["tokens_per_s"] = tps;
  j["it_per_s"] = its;
  j["elapsed_s"] = state_.elapsed_seconds;
  j["rss_bytes"] = current_rss_bytes();
  j["threads"] = ops_->threads();
  if (t.precision == "fp16") {
    j["loss_scale"] = state_.scaler.scale;
    j["skipped_steps"] = state_.scaler.skipped_steps;
  }
  run_dir_->append_metrics(j.dump());
  if (!options_.quiet) {
    const double eta = double(t.steps - state_.step) / its;
    char kl_text[32] = "";
    if (teacher_) std::snprintf(kl_text, sizeof kl_text, " | kl %.4f", kl);
    std::fprintf(stderr, "step %lld/%lld (%.1f%%) | loss %.4f%s | lr %.2e | norm %.3f | %s tok/s | %.2f it/s | ETA %s\n",
                 static_cast<long long>(state_.step), static_cast<long long>(t.steps),
                 100.0 * double(state_.step) / double(std::max<int64_t>(1, t.steps)), loss, kl_text, lr, norm,
                 Progress::format_count(tps).c_str(), its, Progress::format_duration(eta).c_str());
  }
  window_seconds_ = window_tokens_ = 0;
  window_steps_ = 0;
}

// The held-out windows per code are eval_batches of micro_batch x ranks: the
// same windows for N ranks at micro-batch b as for one rank at N·b, whose
// training steps are the same.
void Trainer::evaluate() {
  const int64_t windows = config_.train.eval_batches * config_.train.micro_batch * comm_->size();
  const auto results = evaluate_held_out(*model_, *batches_, config_.train.micro_batch, windows, comm_);
  if (results.empty() || !writer()) return;
  nlohmann::ordered_json j;
  j["step"] = state_.step;
  std::string line = "eval step " + std::to_string(state_.step) + ":";
  for (const auto& r : results) {
    j["eval"][r.code] = {{"loss", r.loss}, {"perplexity", r.perplexity()}, {"tokens", r.tokens}};
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s %s loss %.4f ppl %.1f", &r == &results.front() ? "" : " |", r.code.c_str(),
                  r.loss, r.perplexity());
    line += buf;
  }
  run_dir_->append_metrics(j.dump());
  if (!options_.quiet) std::fprintf(stderr, "%s\n", line.c_str());
}

void Trainer::save() {
  contents_.state = state_;
  OptimizerState optimizer_state = full_state(*optimizer_);
  std::vector<std::unique_ptr<ShardStream>> streams;
  if (options_.zero == 1) {
    optimizer_state.buffers.clear();
    for (auto& [name, buffer] : optimizer_->state()) {
      streams.push_back(std::make_unique<ShardStream>(*comm_, *buffer, kZeroCheckpointPieceFloats));
      ShardStream* s = streams.back().get();
      auto read = [s](size_t begin, size_t count, const OptimizerState::Emit& emit) { s->read(begin, count, emit); };
      optimizer_state.buffers.push_back({name, nullptr, read, [s] { s->finish(); }});
    }
  }
  if (writer()) {
    run_dir_->sync_metrics();  // the lines up to this checkpoint are on disk before it is
    save_checkpoint(checkpoint_path(options_.run_dir, state_.step), contents_, *model_, &optimizer_state);
    prune_checkpoints(options_.run_dir, config_.train.keep_checkpoints, state_.step);
  } else {
    for (auto& s : streams) s->finish();  // the writer's broadcasts, in its order (buffer by buffer)
  }
}

// The run's opening lines on stderr: what trains, at what cost, and what
// the user should know about its precision on this backend.
void Trainer::print_start() {
  const auto& t = config_.train;
  char recomputed[64] = "";
  if (config_.model.recompute != "none")
    std::snprintf(recomputed, sizeof recomputed, "; %.1f with recomputation",
                  train_hardware_flops_per_token(config_.model) / 1e6);
  std::fprintf(stderr,
               "training %s: %.2fM parameters, %.1f MFLOP/token (model%s), %lld steps of "
               "%lld sequences x %lld tokens, %d thread%s (%s)\n",
               config_.preset.c_str(), double(model_->layout().count()) / 1e6,
               train_flops_per_token(config_.model) / 1e6, recomputed, static_cast<long long>(t.steps),
               static_cast<long long>(t.global_batch), static_cast<long long>(config_.model.n_ctx), ops_->threads(),
               ops_->threads() == 1 ? "" : "s", openmp_wait_setting().c_str());
  if (teacher_)
    std::fprintf(stderr, "distilling from %s: %.2fM parameters, %.1f MFLOP/token forward, alpha %g, temperature %g\n",
                 t.teacher.c_str(), double(teacher_->layout().count()) / 1e6,
                 forward_flops_per_token(teacher_->config()) / 1e6, t.distill_alpha, t.distill_temperature);
  const std::string note = ops_->precision_note(activation_dtype(t.precision));
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  if (t.precision == "bf16" && ops_->gpu() < 0) {  // bf16 can be slower than fp32 on a CPU, native or not
    const auto& c = bf16_choice_;
    if (c.native_gflops > 0 || c.no_bf16_kernels)
      std::fprintf(stderr, "note: bf16 products %s\n", c.describe().c_str());
    plan::Bf16StepTimes times;
    if (comm_->size() == 1) {
      std::fprintf(stderr, "timing bf16 and fp32 training steps of this model on this CPU (a few of each)...\n");
      times = probe_bf16_steps(config_, *ops_, 0.5);
      reset_peak_rss();  // the run's peak memory is its own, not the probe's two copies
    } else {             // the other ranks, waiting in MPI, would share its CPUs
      times.skipped = std::to_string(comm_->size()) + " ranks are running (ctrl bench measures it alone)";
    }
    if (!times.measured) std::fprintf(stderr, "note: %s\n", plan::bf16_step_times_text(times).c_str());
    const std::string advice = plan::bf16_slower_advice(times, ops_->bf16_path());
    if (!advice.empty()) std::fprintf(stderr, "ctrl: warning: %s\n", advice.c_str());
  }
}

void Trainer::run() {
  const auto& t = config_.train;
  if (resumed_past_the_end()) {  // nothing to do; the run's files stay as they are
    if (writer())
      std::fprintf(stderr,
                   "note: %s is at step %lld and train.steps is %lld: nothing to train (raise it with --set "
                   "train.steps=N to go on)\n",
                   options_.run_dir.c_str(), static_cast<long long>(state_.step), static_cast<long long>(t.steps));
    loss_curve_current_ = file_exists(options_.run_dir + "/loss.svg");  // the finished run's own
    return;
  }
  if (!options_.quiet && writer()) print_start();
  StopSignals signals;
  while (state_.step < t.steps) {
    if (writer()) run_dir_->check_still_ours();
    if (options_.before_step) options_.before_step(state_.step + 1, comm_->rank());
    train_step();
    const std::string adapted = ops_->between_steps();
    if (!adapted.empty() && !options_.quiet)
      std::fprintf(stderr, "note: rank %d after step %lld: %s\n", comm_->rank(), static_cast<long long>(state_.step),
                   adapted.c_str());
    if (t.eval_every > 0 && state_.step % t.eval_every == 0) evaluate();
    if (t.checkpoint_every > 0 && state_.step % t.checkpoint_every == 0) save_or_stop();
    const StopRequest stop =
        agree_on_stop(*comm_, StopSignals::requested(), writer() && !run_dir_->metrics_error().empty(),
                      writer() && run_dir_->stop_requested());
    if (stop.any()) return stop_early(stop);
  }
  if (t.checkpoint_every == 0 || state_.step % t.checkpoint_every != 0) save_or_stop();
  if (t.eval_every > 0 && state_.step % t.eval_every != 0) evaluate();
  if (writer() && !run_dir_->metrics_error().empty())  // the final evaluation's line
    fail(run_dir_->metrics_error() + "; training finished, checkpoint " + checkpoint_path(options_.run_dir, state_.step) +
         " written");
  if (writer()) draw_loss_curve();
}

// The chart is a view of metrics.jsonl, which holds every figure: one that cannot be written (a full disk,
// no inodes left) is a warning, once, and training goes on; the checkpoints and metrics report their own
// failures with where training stopped and how to go on.
void Trainer::draw_loss_curve() {
  try {
    loss_curve_current_ = write_loss_curve(options_.run_dir);
  } catch (const Error& e) {
    if (!loss_curve_warned_)
      std::fprintf(stderr, "ctrl: warning: %s; the loss curve is not updated (training goes on)\n", e.what());
    loss_curve_warned_ = true;
    loss_curve_current_ = false;
  }
}

// A checkpoint that cannot be written (disk full, a file size limit) ends
// training as a failed metrics write does: what failed, where training
// stopped, what is kept, and how to go on.
void Trainer::save_or_stop() {
  // A checkpoint of this run never lands in another run's directory; a
  // replaced directory is its own error, not a disk to free.
  if (writer()) run_dir_->check_still_ours();
  try {
    save();
  } catch (const Error& e) {
    if (!writer()) throw;
    const std::vector<std::string> kept = list_checkpoints(options_.run_dir);
    // Without a checkpoint or a logged step there is nothing to resume: the same command starts it again
    // (--resume would find no trace of the run; an empty metrics.jsonl cannot tell this run from one whose
    // checkpoints were deleted).
    const bool restart = kept.empty() && !run_dir_->has_metrics();
    fail(std::string(e.what()) + "; training stopped after step " + std::to_string(state_.step) + " of " +
         std::to_string(config_.train.steps) + ", " +
         (kept.empty() ? "with no checkpoint" : "the last checkpoint " + kept.back() + " kept") +
         (restart ? " (free space, then run the same command again)" : " (free space, then continue with --resume)"));
  }
  if (writer()) draw_loss_curve();  // the curve so far, beside each checkpoint
}

// After a signal or a failed metrics write: the step just done is saved (if
// it was not already), the writer says so in one line, and a failed write
// becomes an error on every rank.
void Trainer::stop_early(const StopRequest& stop) {
  const auto& t = config_.train;
  const std::string path = checkpoint_path(options_.run_dir, state_.step);
  std::string saved = "checkpoint " + path + " written";
  bool saved_ok = true;
  try {
    if (writer()) run_dir_->check_still_ours();  // as save_or_stop: never into another run's directory
    if (t.checkpoint_every == 0 || state_.step % t.checkpoint_every != 0) save();
  } catch (const Error& e) {
    if (!writer()) throw;
    saved = "the checkpoint could not be written either (" + std::string(e.what()) + ")";
    saved_ok = false;
  }
  // No rank exits before the checkpoint is written: a launcher ends the
  // whole job when one rank exits with a failure status.
  comm_->barrier();
  if (writer() && !stop.write_failed) draw_loss_curve();
  const std::string where = "step " + std::to_string(state_.step) + " of " + std::to_string(t.steps);
  if (stop.write_failed)
    fail(writer() ? run_dir_->metrics_error() + "; training stopped after " + where + ", " + saved +
                        " (free space, then continue with --resume)"
                  : "training stopped after " + where + ": rank 0 could not write metrics.jsonl");
  stopped_by_ = stop.signal;
  stopped_early_ = true;
  if (!writer()) return;
  const std::string by = stop.signal ? signal_name(stop.signal) : run_dir_->stop_path();
  if (stop.signal == 0 && !saved_ok)  // asked for a checkpointed stop, which exit status 0 would claim
    fail("ctrl train: stopped by " + by + " after " + where + ", but " + saved + " (free space, then continue with " +
         "--resume)");
  if (stop.stop_file) std::filesystem::remove(run_dir_->stop_path());  // obeyed: a resume would stop again at once
  std::fprintf(stderr, "ctrl train: stopped by %s after %s; %s (continue with --resume)\n", by.c_str(), where.c_str(),
               saved.c_str());
}

}  // namespace ctrl
