#include "io/hf.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "tokenizer/tokenizer.h"

namespace ctrl {

namespace {

// The checkpoint's SentencePiece model, beside the Hugging Face files: read
// back by `ctrl import hf`, and loadable with the sentencepiece package
// (transformers' CTRLTokenizer is the original's BPE, not this).
constexpr const char* kTokenizerFile = "tokenizer.model";

// Builds the export in "<dir>.tmp-<pid>" and renames it into place, so dir is
// either absent, the previous export, or the whole new one. An existing dir is
// replaced only if it is empty or an earlier export (its two files and nothing else).
void write_directory_atomically(std::string dir, const std::function<void(const std::string& tmp)>& write) {
  namespace fs = std::filesystem;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  if (fs::exists(dir)) {
    if (!fs::is_directory(dir)) fail(dir + ": exists and is not a directory; choose another --out");
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename() != "config.json" && e.path().filename() != "model.safetensors" &&
          e.path().filename() != kTokenizerFile)
        fail(dir + ": exists and holds " + e.path().filename().string() +
             ", not only an earlier export's config.json, model.safetensors and tokenizer.model; remove it or "
             "choose another --out");
  }
  // What killed exports left next to dir.
  const std::string parent = parent_directory(dir), name = fs::path(dir).filename().string();
  for (const char* marker : {".tmp-", ".old-"}) {
    const std::string note = remove_leftovers(parent, name, marker, false).note();
    if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  }
  const std::string tmp = dir + ".tmp-" + std::to_string(getpid());
  fs::remove_all(tmp, ec);
  make_directories(tmp);
  try {
    write(tmp);
    install_directory(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

void export_hf(const std::string& checkpoint_path, const std::string& dir) {
  Checkpoint ckpt(checkpoint_path);
  const ModelConfig& m = ckpt.config().model;
  // Hugging Face's CTRL has one set of parameters per layer and a D-wide tied
  // embedding. Shared layers are written unrolled, each layer with the tensors
  // its shared block holds: the same function (n_layer times the block's
  // size on disk). A factorized embedding has no equal there (its positions
  // are E-wide and projected; the head is tied to the narrow table).
  if (m.embedding_dim > 0)
    fail(checkpoint_path +
         ": cannot export to Hugging Face CTRL: this model has a factorized embedding "
         "(model.embedding_dim=" +
         std::to_string(m.embedding_dim) +
         "), which Hugging Face's CTRL has not (its embedding is d_model wide, with fixed d_model-wide positions)");
  ModelConfig unrolled = m;
  unrolled.sharing = "none";
  const ParamLayout layout = make_param_layout(unrolled);
  auto stored_name = [&m](const ParamTensor& t) {
    return t.layer < 0
               ? t.name
               : layer_param_name(m, t.layer, t.name.substr(("transformer.h." + std::to_string(t.layer) + ".").size()));
  };
  const ParamLayout stored = make_param_layout(m);
  nlohmann::ordered_json config = {
      {"architectures", {"CTRLLMHeadModel"}},
      {"model_type", "ctrl"},
      {"vocab_size", m.vocab_size},
      {"n_positions", m.n_ctx},
      {"n_embd", m.d_model},
      {"dff", m.d_ff},
      {"n_layer", m.n_layer},
      {"n_head", m.n_head},
      {"layer_norm_epsilon", m.layer_norm_eps},
      {"resid_pdrop", m.resid_pdrop},
      {"embd_pdrop", m.embd_pdrop},
      {"attn_pdrop", 0.0},
      {"initializer_range", m.init_range},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  if (!ckpt.contents().codes.empty()) {
    nlohmann::ordered_json codes;
    for (const auto& c : ckpt.contents().codes) codes[c.name] = c.token_id;
    config["control_codes"] = codes;  // extra keys are kept by transformers' PretrainedConfig
  }
  if (!ckpt.contents().tokenizer.empty()) {
    // Every training document ends with </s>: transformers' generate stops there only if the config says so.
    const int32_t eos = Tokenizer::from_bytes(ckpt.contents().tokenizer, checkpoint_path).eos_id();
    if (eos >= 0) config["eos_token_id"] = eos;
  }
  // Tensor by tensor from the checkpoint's mapping to the new file: no model, no copy of the weights.
  SafetensorsWriter w;
  for (const auto& t : layout.tensors) {
    const ParamTensor& from = stored.get(stored_name(t));
    w.add_streamed(t.name, DType::F32, t.shape, [&ckpt, &from](const SafetensorsWriter::Emit& emit) {
      emit(ckpt.parameter(from), from.numel * sizeof(float));
    });
  }
  w.set_metadata("format", "pt");
  write_directory_atomically(dir, [&](const std::string& tmp) {
    w.write(tmp + "/model.safetensors");
    if (!ckpt.contents().tokenizer.empty())
      write_file_atomically(tmp + "/" + kTokenizerFile, ckpt.contents().tokenizer);
    write_file_atomically(tmp + "/config.json", config.dump(2) + "\n");
  });
}

namespace {

// A Hugging Face model's weights: model.safetensors, or the shards that
// model.safetensors.index.json names (save_pretrained splits a large model,
// 5 GB a shard by default, so a 1.6B-parameter CTRL in fp32 is sharded).
class HfWeights {
 public:
  explicit HfWeights(const std::string& dir) {
    const std::string single = dir + "/model.safetensors", index = single + ".index.json";
    if (file_exists(single)) {
      files_.push_back(std::make_unique<SafetensorsReader>(single));
      for (const auto& [name, info] : files_.back()->tensors()) where_[name] = files_.back().get();
      return;
    }
    if (!file_exists(index))
      fail(single + ": not found, nor " + index +
           "; ctrl reads safetensors weights (transformers' save_pretrained writes them by default)");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index));
    } catch (const nlohmann::json::exception& e) {
      fail(index + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index + ": no \"weight_map\" object (expected {\"weight_map\": {tensor: shard file}})");
    std::map<std::string, const SafetensorsReader*> shard_of_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(index + ": weight_map." + it.key() + ": expected a shard file name");
      const std::string file = it.value();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        fail(index + ": weight_map." + it.key() + ": '" + file + "' is not a file name in " + dir);
      auto [shard, added] = shard_of_file.emplace(file, nullptr);
      if (added) {
        files_.push_back(std::make_unique<SafetensorsReader>(dir + "/" + file));
        shard->second = files_.back().get();
      }
      if (!shard->second->has(it.key()))
        fail(index + ": weight_map." + it.key() + ": " + file + " does not hold that tensor");
      where_[it.key()] = shard->second;
    }
    for (const auto& file : files_)  // a tensor in a shard that the index does not name
      for (const auto& [name, info] : file->tensors())
        if (where_.at(name) != file.get()) fail(file->path() + ": tensor " + name + " is also in another shard");
  }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<float> read_floats(const std::string& name, const std::vector<int64_t>& shape) const {
    const auto it = where_.find(name);
    if (it == where_.end()) fail(description() + ": no tensor " + name);
    return it->second->read_floats(name, shape);
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, file] : where_) out.push_back(name);
    return out;
  }
  std::string description() const {
    return files_.size() == 1 ? files_[0]->path()
                              : files_[0]->path() + " and " + std::to_string(files_.size() - 1) + " other shard(s)";
  }

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> where_;
};

// A config.json field that must be an integer: 2.7 layers is a broken file, not 2.
int64_t integer_field(const nlohmann::ordered_json& hf, const std::string& name, const std::string& path) {
  if (!hf.contains(name)) fail(path + ": no \"" + name + "\" (expected an integer)");
  const nlohmann::ordered_json& v = hf[name];
  if (!v.is_number_integer()) fail(path + ": \"" + name + "\" is " + v.dump() + ", expected an integer");
  return v.get<int64_t>();
}

double number_field(const nlohmann::ordered_json& hf, const std::string& name, double fallback,
                    const std::string& path) {
  if (!hf.contains(name)) return fallback;
  if (!hf[name].is_number()) fail(path + ": \"" + name + "\" is " + hf[name].dump() + ", expected a number");
  return hf[name].get<double>();
}

}  // namespace

void import_hf(const std::string& dir, const std::string& checkpoint_path, const std::vector<CodeInfo>& codes,
               const std::string& tokenizer_path) {
  // Never over a file: --out mistyped as a trained run's checkpoint would lose it.
  if (std::filesystem::exists(checkpoint_path))
    fail(checkpoint_path + ": exists; choose another --out (import writes a new file)");
  const std::string config_path = dir + "/config.json";
  nlohmann::ordered_json hf;  // in file order: control_codes come back in the order exported
  try {
    hf = nlohmann::ordered_json::parse(read_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    fail(config_path + ": not valid JSON: " + e.what());
  }
  if (!hf.is_object()) fail(config_path + ": expected a JSON object");
  if (hf.value("model_type", "") != "ctrl")
    fail(config_path + ": model_type is '" + hf.value("model_type", "") + "', expected 'ctrl'");
  Config c;
  c.preset = dir;
  c.model.vocab_size = integer_field(hf, "vocab_size", config_path);
  c.model.n_ctx = integer_field(hf, "n_positions", config_path);
  c.model.d_model = integer_field(hf, "n_embd", config_path);
  c.model.d_ff = integer_field(hf, "dff", config_path);
  c.model.n_layer = integer_field(hf, "n_layer", config_path);
  c.model.n_head = integer_field(hf, "n_head", config_path);
  c.model.layer_norm_eps = number_field(hf, "layer_norm_epsilon", 1e-6, config_path);
  c.model.resid_pdrop = number_field(hf, "resid_pdrop", 0.1, config_path);
  c.model.embd_pdrop = number_field(hf, "embd_pdrop", 0.1, config_path);
  c.model.init_range = number_field(hf, "initializer_range", 0.02, config_path);
  if (hf.contains("tie_word_embeddings") && hf["tie_word_embeddings"] == false)
    fail(config_path + ": tie_word_embeddings is false; ctrl's CTRL ties the output to the input embedding");
  // Fields ctrl does not use are still the file's claims about these weights: a wrong one means the file is
  // not what it says (another model's config, a hand edit gone wrong).
  if (hf.contains("architectures") && !hf["architectures"].is_null()) {
    const auto& a = hf["architectures"];
    if (!a.is_array() || std::find(a.begin(), a.end(), "CTRLLMHeadModel") == a.end())
      fail(config_path + ": \"architectures\" is " + a.dump().substr(0, 80) + ", expected [\"CTRLLMHeadModel\"]");
  }
  for (const char* id : {"eos_token_id", "bos_token_id", "pad_token_id"})
    if (hf.contains(id) && !hf[id].is_null()) {
      const auto& v = hf[id];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.model.vocab_size)
        fail(config_path + ": \"" + id + "\" is " + v.dump().substr(0, 80) + ", expected a token id below vocab_size " +
             std::to_string(c.model.vocab_size));
    }
  try {
    validate(c);
  } catch (const Error& e) {  // validate names ctrl's keys; the user edits config.json's
    std::string said = e.what();
    if (said.rfind("config " + dir + ": ", 0) == 0) said = config_path + said.substr(("config " + dir).size());
    for (const auto& [ours, theirs] :
         std::initializer_list<std::pair<std::string, std::string>>{{"model.n_ctx", "n_positions"},
                                                                    {"model.d_model", "n_embd"},
                                                                    {"model.d_ff", "dff"},
                                                                    {"model.layer_norm_eps", "layer_norm_epsilon"},
                                                                    {"model.init_range", "initializer_range"}})
      if (const size_t at = said.find(ours, config_path.size()); at != std::string::npos)
        said.replace(at, ours.size(), theirs + " (" + ours + ")");
    fail(said);
  }
  const HfWeights file(dir);
  const ParamLayout layout = make_param_layout(c.model);
  for (const auto& t : layout.tensors) (void)file.read_floats(t.name, t.shape);  // all present, right shapes
  // Every tensor of the file is one of the model's: a config.json that says
  // fewer layers than the weights hold is a mismatch, not a smaller model.
  std::vector<std::string> unexpected;
  for (const std::string& name : file.names())
    if (name != "lm_head.weight" && !layout.find(name)) unexpected.push_back(name);
  if (!unexpected.empty())
    fail(file.description() + ": " + std::to_string(unexpected.size()) + " tensor(s) that the CTRL of " + config_path +
         " does not have, e.g. " + unexpected.front() + " (does config.json give the right sizes?)");
  if (file.has("lm_head.weight")) {  // stored untied copy: must equal the embedding
    const ParamTensor& w = layout.get("transformer.w.weight");
    const auto head = file.read_floats("lm_head.weight", w.shape), embedding = file.read_floats(w.name, w.shape);
    if (std::memcmp(head.data(), embedding.data(), head.size() * sizeof(float)) != 0)
      fail(file.description() + ": lm_head.weight differs from transformer.w.weight; ctrl needs tied output weights");
  }
  CheckpointContents contents;
  contents.config = c;
  contents.codes = codes;
  if (codes.empty() && hf.contains("control_codes")) {
    const nlohmann::ordered_json& given = hf["control_codes"];
    if (!given.is_object())
      fail(config_path + ": \"control_codes\" is " + given.dump().substr(0, 60) +
           ", expected an object {\"Name\": token id}");
    for (auto it = given.begin(); it != given.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() > std::numeric_limits<int32_t>::max())
        fail(config_path + ": control_codes." + it.key() + " is " + it.value().dump() + ", expected a token id");
      contents.codes.push_back({it.key(), it.value().get<int32_t>()});
    }
  }
  if (!tokenizer_path.empty()) {  // named as given, before anything is written
    contents.tokenizer = read_file(tokenizer_path);
    check_tokenizer(contents, "ctrl import hf --tokenizer " + tokenizer_path);
  } else if (file_exists(dir + "/" + kTokenizerFile)) {  // an export's own
    contents.tokenizer = read_file(dir + "/" + kTokenizerFile);
    check_tokenizer(contents, dir + "/" + kTokenizerFile);
  }
  // One tensor at a time from the Hugging Face file into the checkpoint.
  save_checkpoint(checkpoint_path, contents, layout,
                  [&file](const ParamTensor& t, const OptimizerState::Emit& emit) {
                    const auto v = file.read_floats(t.name, t.shape);
                    emit(v.data(), v.size());
                  },
                  nullptr);
}

}  // namespace ctrl
