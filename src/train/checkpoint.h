// Checkpoints: one safetensors file holding the parameters (under their
// Hugging Face names), the optimizer state, and in its metadata the config,
// step, data position, control codes, a CRC-32 of all tensor bytes and (format
// version 2) a CRC-32 of the other metadata; the tokenizer model travels inside
// as bytes, so a checkpoint alone can generate. Written atomically; on load the
// checksums, format, every metadata field (whole-string numbers in range, a
// valid config, codes inside the vocabulary and equal to the tokenizer's
// pieces) and the shapes are verified.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"

namespace ctrl {

struct TrainState {
  int64_t step = 0;            // optimizer steps done
  int64_t next_sequence = 0;   // data position: index of the next training sequence
  double elapsed_seconds = 0;  // training time so far, across resumes
  LossScalerState scaler;      // fp16 loss scaling (the defaults when never used)
};

struct CodeInfo {
  std::string name;
  int32_t token_id = 0;
};

struct CheckpointContents {
  Config config;
  TrainState state;
  std::vector<CodeInfo> codes;
  std::string tokenizer;  // serialized SentencePiece model; empty if none
};

// Full-size (layout.total) optimizer state buffers by name, and the step count.
// A buffer is in memory (`data`), or is read piece by piece while the file is
// written (`read`, asked for increasing ranges of elements, then `done`): a
// ZeRO-1 state, of which each rank holds one shard, never exists whole.
struct OptimizerState {
  using Emit = std::function<void(const float* data, size_t count)>;
  struct Named {
    std::string name;
    const float* data = nullptr;
    std::function<void(size_t begin, size_t count, const Emit& emit)> read;
    std::function<void()> done;
  };
  int64_t step = 0;
  std::vector<Named> buffers;
};

// Emits parameter tensor t's t.numel floats (host memory) for the writer.
using ParamSource = std::function<void(const ParamTensor& t, const OptimizerState::Emit& emit)>;

// optimizer may be null (e.g. an imported or exported model). The tensors are
// written one at a time, each downloaded into host staging as the file
// reaches it: no second copy of the model exists on the host.
void save_checkpoint(const std::string& path, const CheckpointContents& contents, const Model& model,
                     const OptimizerState* optimizer);
// The same with parameters from any source (ctrl hf import: no Model).
void save_checkpoint(const std::string& path, const CheckpointContents& contents, const ParamLayout& layout,
                     const ParamSource& params, const OptimizerState* optimizer);
// The state of an unsharded optimizer, for save_checkpoint (read from the backend piece by piece).
OptimizerState full_state(Optimizer& optimizer);

// A checkpoint of a format version newer than this build reads. Unlike other
// damage it is not a reason to fall back to an older checkpoint: training on
// would overwrite a run that a newer ctrl wrote.
struct CheckpointTooNew : Error {
  using Error::Error;
};

class Checkpoint {
 public:
  // Opens and verifies the file (format, version, checksums, metadata fields);
  // ctrl::Error naming the file and the field, CheckpointTooNew for a newer version.
  explicit Checkpoint(const std::string& path);
  const CheckpointContents& contents() const { return contents_; }
  const Config& config() const { return contents_.config; }
  const std::string& path() const;
  bool has_optimizer_state(const std::string& optimizer) const;
  // Uploads parameters into the model a tensor at a time; every tensor's shape must match.
  void load_parameters(Model& model) const;
  // Parameter tensor t's bytes (t.numel floats, in the mapped file, possibly
  // unaligned: copy them with memcpy), checked against its shape.
  const void* parameter(const ParamTensor& t) const;
  // Elements [begin, begin + count) of an optimizer state buffer (e.g.
  // "adamw.m") over the flat layout into out, zero between tensors, dropping
  // the pages read from this process: a resume reads a piece at a time and
  // never holds a whole buffer.
  void read_optimizer_state(const std::string& name, const ParamLayout& layout, size_t begin, size_t count,
                            float* out) const;
  int64_t optimizer_step() const;

 private:
  std::unique_ptr<SafetensorsReader> file_;
  CheckpointContents contents_;
  int64_t optimizer_step_ = 0;
};

class Dataset;
// The corpus fits the model: the same tokenizer (when both carry one), a
// vocabulary no larger than the model's, every control code of the corpus is
// one the model was trained with (unless the model names none), and every code
// that both name has the same token id. ctrl::Error naming `where` and the
// field otherwise.
void check_corpus_matches(const CheckpointContents& checkpoint, const Dataset& data, const std::string& where);

// The codes are the tokenizer's pieces of those names, and the tokenizer fits
// the model; ctrl::Error starting with `path` (the file that carries it) otherwise.
void check_tokenizer(const CheckpointContents& c, const std::string& path);

// Checkpoint files in a run directory's checkpoints/, oldest first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
// The checkpoint a --model names: the file itself, or a run directory's
// newest checkpoint (with a note on stderr); ctrl::Error for a directory
// that holds none.
std::string model_checkpoint(const std::string& path);
// The teacher's model config from config.train.teacher (its checkpoint), or none, for ctrl
// plan: a teacher that ctrl train would refuse is refused as open_teacher does.
std::optional<ModelConfig> teacher_of(const Config& config);
// The distillation teacher's checkpoint (train.teacher), read and verified,
// or null without one. A teacher whose vocabulary or context cannot teach
// this student is refused, before anything is written, with one line that
// names `command` ("ctrl train", "ctrl bench") and the checkpoint.
std::unique_ptr<Checkpoint> open_teacher(const Config& config, const std::string& command);
// Removes all but the newest `keep` of the checkpoints up to `step` (the one
// just written), so a stray file of a later step can never push it out.
void prune_checkpoints(const std::string& run_dir, int64_t keep, int64_t step);
std::string checkpoint_path(const std::string& run_dir, int64_t step);

}  // namespace ctrl
