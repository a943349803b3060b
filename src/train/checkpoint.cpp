#include "train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ctrl {

namespace {
constexpr const char* kFormat = "ctrl-checkpoint";
constexpr int kVersion = 1;
}  // namespace

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
  w.set_metadata("format", kFormat);
  w.set_metadata("version", std::to_string(kVersion));
  w.set_metadata("config", config_to_json(c.config));
  w.set_metadata("step", std::to_string(c.state.step));
  w.set_metadata("optimizer_step", std::to_string(optimizer ? optimizer->step : 0));
  w.set_metadata("next_sequence", std::to_string(c.state.next_sequence));
  w.set_metadata("elapsed_seconds", std::to_string(c.state.elapsed_seconds));
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.17g", c.state.scaler.scale);
  w.set_metadata("loss_scale", scale);
  w.set_metadata("loss_scale_clean_steps", std::to_string(c.state.scaler.clean_steps));
  w.set_metadata("skipped_steps", std::to_string(c.state.scaler.skipped_steps));
  w.set_metadata("codes", codes.dump());
  w.set_crc_metadata("crc32");
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
  if (get("version") != std::to_string(kVersion))
    fail(path + ": checkpoint version " + get("version") + ", this ctrl reads version " + std::to_string(kVersion));
  if (std::to_string(file_->data_crc32()) != get("crc32"))
    fail(path + ": checksum mismatch: the checkpoint is corrupt or was modified");
  contents_.config = config_from_json(get("config"), path);
  try {
    contents_.state.step = std::stoll(get("step"));
    contents_.state.next_sequence = std::stoll(get("next_sequence"));
    contents_.state.elapsed_seconds = std::stod(get("elapsed_seconds"));
    contents_.state.scaler.scale = std::stod(get("loss_scale"));
    contents_.state.scaler.clean_steps = std::stoll(get("loss_scale_clean_steps"));
    contents_.state.scaler.skipped_steps = std::stoll(get("skipped_steps"));
    for (const auto& code : nlohmann::json::parse(get("codes")))
      contents_.codes.push_back({code.at("name").get<std::string>(), code.at("token_id").get<int32_t>()});
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(path + ": malformed checkpoint metadata: " + e.what());
  }
  if (file_->has("tokenizer.model")) {
    const auto& t = file_->get("tokenizer.model");
    contents_.tokenizer.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
  }
}

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

static void copy_tensor(const SafetensorsReader& file, const std::string& name, const ParamTensor& t, float* dst) {
  std::memcpy(dst, tensor_bytes(file, name, t), t.numel * sizeof(float));
}

void Checkpoint::load_parameters(Model& model) const {
  std::vector<float> staging;  // the mapped file's bytes need not be float-aligned
  for (const auto& t : model.layout().tensors) {
    staging.resize(t.numel);
    copy_tensor(*file_, t.name, t, staging.data());
    model.params.upload(staging.data(), t.numel, t.offset);
  }
}

const void* Checkpoint::parameter(const ParamTensor& t) const { return tensor_bytes(*file_, t.name, t); }

void Checkpoint::read_optimizer_state(const std::string& name, const ParamLayout& layout, float* out) const {
  for (const auto& t : layout.tensors) copy_tensor(*file_, "optimizer." + name + "." + t.name, t, out + t.offset);
}

int64_t Checkpoint::optimizer_step() const { return std::stoll(file_->metadata().at("optimizer_step")); }

void Checkpoint::load_optimizer(Optimizer& optimizer) const {
  const ParamLayout layout = make_param_layout(contents_.config.model);
  std::vector<float> full(layout.total);  // host staging
  for (auto& [state_name, buffer] : optimizer.state()) {
    read_optimizer_state(state_name, layout, full.data());
    optimizer.load_state(state_name, full.data());
  }
  optimizer.set_step_count(optimizer_step());
}

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.ckpt", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + name;
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  const std::string dir = run_dir + "/checkpoints";
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".ckpt")
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());  // zero-padded step numbers sort in order
  return out;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) std::filesystem::remove(all[i]);
}

}  // namespace ctrl
