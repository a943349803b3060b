// Hugging Face interop: a CTRLLMHeadModel directory (config.json and
// model.safetensors with Hugging Face's tensor names; Linear weights [out, in];
// lm_head.weight tied to transformer.w.weight and so not stored, as
// transformers itself saves it) to and from ctrl checkpoints.
#pragma once
#include <string>

#include "train/checkpoint.h"

namespace ctrl {

// Writes dir/config.json and dir/model.safetensors, built in "<dir>.tmp-<pid>"
// and renamed into place, so dir never holds a part of an export. An existing
// dir must be empty or an earlier export (then it is replaced).
void export_hf(const std::string& checkpoint_path, const std::string& dir);

// Reads a directory written by export_hf or by transformers' save_pretrained
// (safetensors weights) into a checkpoint without optimizer state. Codes name
// control codes for generation; tokenizer_path (optional) is embedded.
void import_hf(const std::string& dir, const std::string& checkpoint_path, const std::vector<CodeInfo>& codes,
               const std::string& tokenizer_path);

}  // namespace ctrl
