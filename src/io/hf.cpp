#include "io/hf.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace ctrl {

namespace {

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
      if (e.path().filename() != "config.json" && e.path().filename() != "model.safetensors")
        fail(dir + ": exists and holds " + e.path().filename().string() +
             ", not only an earlier export's config.json and model.safetensors; remove it or choose another --out");
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
  // Hugging Face's CTRL has one set of parameters per layer and a D-wide tied embedding.
  if (m.sharing != "none" || m.embedding_dim > 0)
    fail(checkpoint_path + ": cannot export to Hugging Face CTRL: this model has " +
         (m.sharing != "none"
              ? "cross-layer sharing (model.sharing=" + m.sharing + ")"
              : "a factorized embedding (model.embedding_dim=" + std::to_string(m.embedding_dim) + ")") +
         ", which Hugging Face's CTRL has not; only models with model.sharing=none and model.embedding_dim=0 "
         "can be exported");
  const ParamLayout layout = make_param_layout(m);
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
  // Tensor by tensor from the checkpoint's mapping to the new file: no model, no copy of the weights.
  SafetensorsWriter w;
  for (const auto& t : layout.tensors)
    w.add_streamed(t.name, DType::F32, t.shape, [&ckpt, &t](const SafetensorsWriter::Emit& emit) {
      emit(ckpt.parameter(t), t.numel * sizeof(float));
    });
  w.set_metadata("format", "pt");
  write_directory_atomically(dir, [&](const std::string& tmp) {
    w.write(tmp + "/model.safetensors");
    write_file_atomically(tmp + "/config.json", config.dump(2) + "\n");
  });
}

void import_hf(const std::string& dir, const std::string& checkpoint_path, const std::vector<CodeInfo>& codes,
               const std::string& tokenizer_path) {
  // Never over a file: --out mistyped as a trained run's checkpoint would lose it.
  if (std::filesystem::exists(checkpoint_path))
    fail(checkpoint_path + ": exists; choose another --out (import writes a new file)");
  const std::string config_path = dir + "/config.json";
  nlohmann::json hf;
  try {
    hf = nlohmann::json::parse(read_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    fail(config_path + ": not valid JSON: " + e.what());
  }
  if (hf.value("model_type", "") != "ctrl")
    fail(config_path + ": model_type is '" + hf.value("model_type", "") + "', expected 'ctrl'");
  Config c;
  c.preset = dir;
  try {
    c.model.vocab_size = hf.at("vocab_size");
    c.model.n_ctx = hf.at("n_positions");
    c.model.d_model = hf.at("n_embd");
    c.model.d_ff = hf.at("dff");
    c.model.n_layer = hf.at("n_layer");
    c.model.n_head = hf.at("n_head");
    c.model.layer_norm_eps = hf.value("layer_norm_epsilon", 1e-6);
    c.model.resid_pdrop = hf.value("resid_pdrop", 0.1);
    c.model.embd_pdrop = hf.value("embd_pdrop", 0.1);
    c.model.init_range = hf.value("initializer_range", 0.02);
  } catch (const nlohmann::json::exception& e) {
    fail(config_path + ": missing or malformed field: " + e.what());
  }
  if (!hf.value("tie_word_embeddings", true))
    fail(config_path + ": tie_word_embeddings is false; ctrl's CTRL ties the output to the input embedding");
  validate(c);
  const std::string weights = dir + "/model.safetensors";
  if (!file_exists(weights))
    fail(weights + ": not found; ctrl reads safetensors weights (save with safe_serialization=True)");
  SafetensorsReader file(weights);
  const ParamLayout layout = make_param_layout(c.model);
  for (const auto& t : layout.tensors) (void)file.read_floats(t.name, t.shape);  // all present, right shapes
  if (file.has("lm_head.weight")) {  // stored untied copy: must equal the embedding
    const ParamTensor& w = layout.get("transformer.w.weight");
    const auto head = file.read_floats("lm_head.weight", w.shape), embedding = file.read_floats(w.name, w.shape);
    if (std::memcmp(head.data(), embedding.data(), head.size() * sizeof(float)) != 0)
      fail(weights + ": lm_head.weight differs from transformer.w.weight; ctrl needs tied output weights");
  }
  CheckpointContents contents;
  contents.config = c;
  contents.codes = codes;
  if (codes.empty() && hf.contains("control_codes") && hf["control_codes"].is_object())
    for (auto it = hf["control_codes"].begin(); it != hf["control_codes"].end(); ++it)
      contents.codes.push_back({it.key(), it.value().get<int32_t>()});
  if (!tokenizer_path.empty()) {  // named as given, before anything is written
    contents.tokenizer = read_file(tokenizer_path);
    check_tokenizer(contents, "ctrl import hf --tokenizer " + tokenizer_path);
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
