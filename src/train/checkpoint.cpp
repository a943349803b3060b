#include "train/checkpoint.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parse.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"

namespace ctrl {

namespace {
constexpr const char* kFormat = "ctrl-checkpoint";
// Version 2 adds "metadata_crc32", version 3 "tensors_crc32" (the tensor
// table: names, dtypes, shapes, byte ranges); older files are still read.
constexpr int kVersion = 3;
constexpr int kOldestVersion = 1;
constexpr const char* kDataCrcKey = "crc32";
constexpr const char* kMetadataCrcKey = "metadata_crc32";
constexpr const char* kTensorsCrcKey = "tensors_crc32";

// CRC-32 of every metadata entry but the two checksums, in key order, each as
// key NUL value NUL: any edit of a value, or a key added or removed, changes it.
uint32_t metadata_crc(const std::map<std::string, std::string>& metadata) {
  uint32_t crc = 0;
  for (const auto& [key, value] : metadata) {
    if (key == kDataCrcKey || key == kMetadataCrcKey) continue;
    crc = crc32_of(key.data(), key.size(), crc);
    crc = crc32_of("", 1, crc);
    crc = crc32_of(value.data(), value.size(), crc);
    crc = crc32_of("", 1, crc);
  }
  return crc;
}

// The whole string as a base-10 integer in [lo, hi].
int64_t parse_int_field(const std::string& path, const std::string& key, const std::string& v, int64_t lo, int64_t hi) {
  const auto x = parse_whole_int(v);
  if (!x || *x < lo || *x > hi)
    fail(path + ": metadata '" + key + "' = '" + v + "': expected an integer in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "]");
  return *x;
}

double parse_real_field(const std::string& path, const std::string& key, const std::string& v, double lo,
                        bool lo_open) {
  const auto parsed = parse_whole_double(v);
  const double x = parsed.value_or(0);
  if (!parsed || !std::isfinite(x) || (lo_open ? x <= lo : x < lo))
    fail(path + ": metadata '" + key + "' = '" + v + "': expected a finite number " + (lo_open ? "> " : ">= ") +
         std::to_string(lo));
  return x;
}

// Control codes against the model: ids inside the vocabulary, names and ids distinct.
void check_codes(const std::vector<CodeInfo>& codes, int64_t vocab_size, const std::string& where) {
  for (size_t i = 0; i < codes.size(); ++i) {
    const CodeInfo& c = codes[i];
    if (c.name.empty()) fail(where + ": control code " + std::to_string(i) + " has an empty name");
    if (c.token_id < 0 || c.token_id >= vocab_size)
      fail(where + ": control code '" + c.name + "' token_id " + std::to_string(c.token_id) +
           ": expected a token id in [0, " + std::to_string(vocab_size) + ")");
    for (size_t k = 0; k < i; ++k)
      if (codes[k].name == c.name || codes[k].token_id == c.token_id)
        fail(where + ": control codes '" + codes[k].name + "' and '" + c.name +
             "' share a name or token id; expected one token per code");
  }
}
}  // namespace

void check_tokenizer(const CheckpointContents& c, const std::string& path) {
  const Tokenizer tokenizer = Tokenizer::from_bytes(c.tokenizer, path + " (tokenizer.model)");
  if (int64_t(tokenizer.vocab_size()) > c.config.model.vocab_size)
    fail(path + ": its tokenizer has " + std::to_string(tokenizer.vocab_size()) + " pieces, more than model.vocab_size " +
         std::to_string(c.config.model.vocab_size));
  for (const auto& code : c.codes)
    if (tokenizer.piece_to_id(code.name) != code.token_id)
      fail(path + ": control code '" + code.name + "' token_id " + std::to_string(code.token_id) +
           " but the tokenizer gives " + std::to_string(tokenizer.piece_to_id(code.name)) + " (-1: no such piece)");
}

// Downloads elements [begin, begin + count) of a backend buffer through host
// staging of at most 4M floats and emits them.
static void emit_download(const DeviceArray<float>& buffer, size_t begin, size_t count,
                          const OptimizerState::Emit& emit) {
  std::vector<float> staging(std::min(count, size_t(1) << 22));
  while (count > 0) {
    const size_t n = std::min(count, staging.size());
    buffer.download(staging.data(), n, begin);
    emit(staging.data(), n);
    begin += n, count -= n;
  }
}

OptimizerState full_state(Optimizer& optimizer) {
  OptimizerState s;
  s.step = optimizer.step_count();
  for (auto& [name, buffer] : optimizer.state()) {
    const DeviceArray<float>* b = buffer;
    auto read = [b](size_t begin, size_t count, const OptimizerState::Emit& emit) {
      emit_download(*b, begin, count, emit);
    };
    s.buffers.push_back({name, nullptr, read, [] {}});
  }
  return s;
}

void save_checkpoint(const std::string& path, const CheckpointContents& c, const Model& model,
                     const OptimizerState* optimizer) {
  const DeviceArray<float>& params = model.params;
  save_checkpoint(path, c, model.layout(),
                  [&params](const ParamTensor& t, const OptimizerState::Emit& emit) {
                    emit_download(params, t.offset, t.numel, emit);
                  },
                  optimizer);
}

void save_checkpoint(const std::string& path, const CheckpointContents& c, const ParamLayout& layout,
                     const ParamSource& params, const OptimizerState* optimizer) {
  // Never write a checkpoint that would not load.
  check_codes(c.codes, c.config.model.vocab_size, path);
  if (!c.tokenizer.empty()) check_tokenizer(c, path);
  SafetensorsWriter w;
  for (const auto& t : layout.tensors)
    w.add_streamed(t.name, DType::F32, t.shape, [&params, &t](const SafetensorsWriter::Emit& emit) {
      params(t, [&](const float* data, size_t count) { emit(data, count * sizeof(float)); });
    });
  const auto& tensors = layout.tensors;
  if (optimizer)
    for (const auto& b : optimizer->buffers)
      for (size_t i = 0; i < tensors.size(); ++i) {
        const ParamTensor& t = tensors[i];
        const std::string name = "optimizer." + b.name + "." + t.name;
        if (b.data) {
          w.add(name, DType::F32, t.shape, b.data + t.offset);
          continue;
        }
        const bool last = i + 1 == tensors.size();
        w.add_streamed(name, DType::F32, t.shape, [&b, &t, last](const SafetensorsWriter::Emit& emit) {
          b.read(t.offset, t.numel, [&](const float* data, size_t count) { emit(data, count * sizeof(float)); });
          if (last) b.done();
        });
      }
  if (!c.tokenizer.empty())
    w.add("tokenizer.model", DType::U8, {int64_t(c.tokenizer.size())}, c.tokenizer.data());
  nlohmann::json codes = nlohmann::json::array();
  for (const auto& code : c.codes) codes.push_back({{"name", code.name}, {"token_id", code.token_id}});
  std::map<std::string, std::string> meta;  // what goes in, for the metadata checksum
  auto put = [&](const std::string& key, const std::string& value) {
    meta[key] = value;
    w.set_metadata(key, value);
  };
  put("format", kFormat);
  put("version", std::to_string(kVersion));
  put("config", config_to_json(c.config));
  put("step", std::to_string(c.state.step));
  put("optimizer_step", std::to_string(optimizer ? optimizer->step : 0));
  put("next_sequence", std::to_string(c.state.next_sequence));
  put("elapsed_seconds", std::to_string(c.state.elapsed_seconds));
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.17g", c.state.scaler.scale);
  put("loss_scale", scale);
  put("loss_scale_clean_steps", std::to_string(c.state.scaler.clean_steps));
  put("skipped_steps", std::to_string(c.state.scaler.skipped_steps));
  put("codes", codes.dump());
  put(kTensorsCrcKey, std::to_string(w.tensor_table_crc32()));
  w.set_metadata(kMetadataCrcKey, std::to_string(metadata_crc(meta)));
  w.set_crc_metadata(kDataCrcKey);
  w.write(path);
}

Checkpoint::Checkpoint(const std::string& path) {
  file_ = std::make_unique<SafetensorsReader>(path);
  const auto& meta = file_->metadata();
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end()) fail(path + ": not a ctrl checkpoint (metadata has no '" + key + "')");
    return it->second;
  };
  if (get("format") != kFormat) fail(path + ": not a ctrl checkpoint (format '" + get("format") + "')");
  const std::string& version_text = get("version");
  const int64_t version = parse_int_field(path, "version", version_text, 0, INT32_MAX);
  // A newer ctrl's file is refused, never skipped (and later overwritten);
  // but a version field that a flipped bit raised is damage: the metadata
  // checksum, whose definition every later format keeps, tells them apart.
  const bool metadata_intact =
      !meta.count(kMetadataCrcKey) || std::to_string(metadata_crc(meta)) == meta.at(kMetadataCrcKey);
  if (version > kVersion && !metadata_intact)
    fail(path + ": metadata checksum mismatch: the checkpoint's metadata (format version '" + version_text +
         "', config, step, ...) is corrupt or was modified");
  if (version > kVersion)
    throw CheckpointTooNew(path + ": checkpoint format version " + version_text + " is newer than this ctrl reads (" +
                           std::to_string(kOldestVersion) + " to " + std::to_string(kVersion) +
                           "); use the newer ctrl that wrote it");
  if (version < kOldestVersion)
    fail(path + ": checkpoint format version " + version_text + ", this ctrl reads versions " +
         std::to_string(kOldestVersion) + " to " + std::to_string(kVersion));
  if (std::to_string(file_->data_crc32()) != get(kDataCrcKey))
    fail(path + ": checksum mismatch: the checkpoint is corrupt or was modified");
  // Each checksum is checked where the version requires it and wherever it is
  // present, so a damaged version field cannot switch one off. Version 1 wrote
  // none; its fields are still range-checked below.
  if ((version >= 2 && !meta.count(kMetadataCrcKey)) || !metadata_intact)
    fail(path + ": metadata checksum mismatch: the checkpoint's metadata (config, step, data position or control "
                "codes) is corrupt or was modified");
  if ((version >= 3 || meta.count(kTensorsCrcKey)) &&
      std::to_string(file_->tensor_table_crc32()) != get(kTensorsCrcKey))
    fail(path +
         ": tensor table checksum mismatch: the names, types or shapes of the checkpoint's tensors are "
         "corrupt or were modified");
  contents_.config = config_from_json(get("config"), path);
  validate(contents_.config);
  auto integer = [&](const char* key) { return parse_int_field(path, key, get(key), 0, INT64_MAX); };
  contents_.state.step = integer("step");
  contents_.state.next_sequence = integer("next_sequence");
  contents_.state.elapsed_seconds = parse_real_field(path, "elapsed_seconds", get("elapsed_seconds"), 0, false);
  contents_.state.scaler.scale = parse_real_field(path, "loss_scale", get("loss_scale"), 0, true);
  contents_.state.scaler.clean_steps = integer("loss_scale_clean_steps");
  contents_.state.scaler.skipped_steps = integer("skipped_steps");
  optimizer_step_ = integer("optimizer_step");
  try {
    const auto codes = nlohmann::json::parse(get("codes"));
    if (!codes.is_array()) fail(path + ": metadata 'codes': expected a JSON array of {name, token_id}");
    for (const auto& code : codes)
      contents_.codes.push_back({code.at("name").get<std::string>(), code.at("token_id").get<int32_t>()});
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(path + ": metadata 'codes': expected a JSON array of {name, token_id}: " + e.what());
  }
  check_codes(contents_.codes, contents_.config.model.vocab_size, path);
  if (file_->has("tokenizer.model")) {
    const auto& t = file_->get("tokenizer.model");
    contents_.tokenizer.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
    check_tokenizer(contents_, path);
  }
}

void check_corpus_matches(const CheckpointContents& checkpoint, const Dataset& data, const std::string& where) {
  const std::string corpus_tokenizer = data.tokenizer_path().empty() ? "" : read_file(data.tokenizer_path());
  if (!checkpoint.tokenizer.empty() && !corpus_tokenizer.empty() && checkpoint.tokenizer != corpus_tokenizer)
    fail(where + ": the corpus " + data.dir() + " was tokenized with another tokenizer than the model's (" +
         data.tokenizer_path() + " differs from the checkpoint's); token ids would mean other pieces");
  if (int64_t(data.manifest().vocab_size) > checkpoint.config.model.vocab_size)
    fail(where + ": the corpus " + data.dir() + " has vocabulary " + std::to_string(data.manifest().vocab_size) +
         ", larger than the model's " + std::to_string(checkpoint.config.model.vocab_size));
  for (const auto& c : checkpoint.codes) {
    const int i = data.find_code(c.name);
    if (i >= 0 && data.code(size_t(i)).token_id != c.token_id)
      fail(where + ": control code '" + c.name + "' is token " + std::to_string(c.token_id) +
           " in the checkpoint but token " + std::to_string(data.code(size_t(i)).token_id) + " in the corpus " +
           data.dir() + "/manifest.json");
  }
  if (checkpoint.codes.empty()) return;  // a model that names no codes (imported without them)
  for (size_t i = 0; i < data.n_codes(); ++i) {
    const std::string& name = data.code(i).name;
    bool known = false;
    for (const auto& c : checkpoint.codes) known = known || c.name == name;
    if (known) continue;
    std::string names;
    for (const auto& c : checkpoint.codes) names += (names.empty() ? "" : ", ") + c.name;
    fail(where + ": the corpus " + data.dir() + " has control code '" + name +
         "', which the model was not trained with (its codes: " + names + ")");
  }
}

const std::string& Checkpoint::path() const { return file_->path(); }

bool Checkpoint::has_optimizer_state(const std::string& optimizer) const {
  const std::string prefix = "optimizer." + optimizer + ".";
  for (const auto& [name, info] : file_->tensors())
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

static const uint8_t* tensor_bytes(const SafetensorsReader& file, const std::string& name, const ParamTensor& t) {
  const auto& info = file.get(name);
  if (info.dtype != DType::F32 || info.shape != t.shape)
    fail(file.path() + ": tensor '" + name + "' does not match the model (checkpoint and config disagree)");
  return info.data;
}

void Checkpoint::load_parameters(Model& model) const {
  // kInitStagingFloats at a time, as Model::init_weights uploads: a whole
  // tensor's staging and its mapped pages (the embedding: 2 x 47 MiB at
  // `small`) were the peak memory of a run that loads a teacher.
  std::vector<float> staging(kInitStagingFloats);  // the mapped file's bytes need not be float-aligned
  for (const auto& t : model.layout().tensors) {
    const uint8_t* bytes = tensor_bytes(*file_, t.name, t);
    for (size_t at = 0; at < t.numel; at += kInitStagingFloats) {
      const size_t n = std::min(kInitStagingFloats, t.numel - at);
      std::memcpy(staging.data(), bytes + at * sizeof(float), n * sizeof(float));
      file_->release(bytes + at * sizeof(float), n * sizeof(float));
      model.params.upload(staging.data(), n, t.offset + at);
    }
  }
}

const void* Checkpoint::parameter(const ParamTensor& t) const { return tensor_bytes(*file_, t.name, t); }

void Checkpoint::read_optimizer_state(const std::string& name, const ParamLayout& layout, size_t begin, size_t count,
                                      float* out) const {
  CTRL_ASSERT(begin + count <= layout.total);
  std::fill(out, out + count, 0.0f);
  const size_t end = begin + count;
  for (const auto& t : layout.tensors) {
    const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    const uint8_t* bytes =
        tensor_bytes(*file_, "optimizer." + name + "." + t.name, t) + (lo - t.offset) * sizeof(float);
    std::memcpy(out + (lo - begin), bytes, (hi - lo) * sizeof(float));
    file_->release(bytes, (hi - lo) * sizeof(float));
  }
}

int64_t Checkpoint::optimizer_step() const { return optimizer_step_; }

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.ckpt", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + name;
}

std::optional<ModelConfig> teacher_of(const Config& config) {
  if (config.train.teacher.empty()) return std::nullopt;
  return open_teacher(config, "ctrl plan")->config().model;
}

std::unique_ptr<Checkpoint> open_teacher(const Config& config, const std::string& command) {
  const std::string& path = config.train.teacher;
  if (path.empty()) return nullptr;
  // A file, not a run directory: the run's newest checkpoint would change under a resume.
  if (std::filesystem::is_directory(path)) {
    const std::vector<std::string> found = list_checkpoints(path);
    fail("train.teacher (the distillation teacher): " + path + " is a directory; pass a checkpoint file" +
         (found.empty() ? std::string() : " (its newest: " + found.back() + ")"));
  }
  std::unique_ptr<Checkpoint> teacher;
  try {
    teacher = std::make_unique<Checkpoint>(path);
  } catch (const Error& e) {
    fail("train.teacher (the distillation teacher): " + std::string(e.what()));
  }
  const ModelConfig& tm = teacher->config().model;
  const std::string where = command + " --teacher " + path + ": ";
  if (tm.vocab_size != config.model.vocab_size)
    fail(where + "the teacher's model.vocab_size is " + std::to_string(tm.vocab_size) + " and the student's " +
         std::to_string(config.model.vocab_size) + "; the teacher's logits must cover the student's tokens one for " +
         "one (--set model.vocab_size=" + std::to_string(tm.vocab_size) + ", with the teacher's tokenizer)");
  if (tm.n_ctx < config.model.n_ctx)
    fail(where + "the teacher's context is " + std::to_string(tm.n_ctx) + " tokens, shorter than the student's " +
         std::to_string(config.model.n_ctx) + " (set model.n_ctx <= " + std::to_string(tm.n_ctx) + ")");
  return teacher;
}

std::string model_checkpoint(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return path;
  const std::vector<std::string> found = list_checkpoints(path);
  if (found.empty())
    fail(path + ": a directory with no checkpoints/step-*.ckpt; pass a checkpoint file or a run directory");
  std::fprintf(stderr, "note: %s is a run directory; using its newest checkpoint %s\n", path.c_str(),
               found.back().c_str());
  return found.back();
}

// The step of a checkpoint named step-<digits>.ckpt, or -1 for any other name (a copy such as
// step-00002000.best.ckpt is not a checkpoint of the run's).
static int64_t checkpoint_step(const std::string& name) {
  if (name.size() < 11 || name.rfind("step-", 0) != 0 || name.substr(name.size() - 5) != ".ckpt") return -1;
  const std::string digits = name.substr(5, name.size() - 10);
  if (digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

static bool step_order(const std::string& a, const std::string& b) {
  return checkpoint_step(std::filesystem::path(a).filename().string()) <
         checkpoint_step(std::filesystem::path(b).filename().string());
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  const std::string dir = run_dir + "/checkpoints";
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (checkpoint_step(e.path().filename().string()) >= 0) out.push_back(e.path().string());
  std::sort(out.begin(), out.end(), step_order);  // by step: step-100000000 comes after step-99999000
  return out;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep, int64_t step) {
  auto all = list_checkpoints(run_dir);
  const std::string newest = checkpoint_path(run_dir, step);
  all.erase(std::upper_bound(all.begin(), all.end(), newest, step_order), all.end());
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) std::filesystem::remove(all[i]);
}

}  // namespace ctrl
