// libFuzzer: checkpoint loading, metadata included: the safetensors header and
// its JSON, the format version, both checksums, every metadata field, the
// config, the control codes and the tensors' shapes against the model.
// `CTRL_FUZZ_WRITE_SEED=DIR fuzz_checkpoint` writes a seed checkpoint (a
// 1-layer model with AdamW state and two control codes) into DIR and exits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "model/config.h"
#include "model/model.h"
#include "ops/ops.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace {

ctrl::Config small_config() {
  ctrl::Config c = ctrl::load_config("tiny");
  for (const char* s : {"model.vocab_size=16", "model.n_layer=1", "model.d_model=4", "model.n_head=1", "model.d_ff=4",
                        "model.n_ctx=4", "train.micro_batch=1", "train.global_batch=1"})
    ctrl::apply_override(c, s);
  return c;
}

std::string scratch_path() {
  return (std::filesystem::temp_directory_path() / ("fuzz_checkpoint_" + std::to_string(getpid()) + ".ckpt")).string();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("CTRL_FUZZ_WRITE_SEED")) {
    const ctrl::Config config = small_config();
    auto ops = ctrl::make_ops("cpu");
    ctrl::Model model(config.model, *ops, 1);
    model.init_weights();
    ctrl::Optimizer optimizer(config.train, model.layout(), *ops);
    ctrl::CheckpointContents contents;
    contents.config = config;
    contents.state.step = 3;
    contents.state.next_sequence = 3;
    contents.codes = {{"A", 3}, {"B", 4}};
    ctrl::make_directories(dir);
    const ctrl::OptimizerState state = ctrl::full_state(optimizer);
    ctrl::save_checkpoint(std::string(dir) + "/seed.ckpt", contents, model, &state);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    ctrl::Checkpoint ckpt(path);
    // Whatever loads must fit the model it describes, or be refused by name.
    auto ops = ctrl::make_ops("cpu");
    const ctrl::ModelConfig& m = ckpt.config().model;  // small models only: the fuzzer's memory is bounded
    if (m.n_layer <= 4 && m.d_model <= 64 && m.d_ff <= 64 && m.n_ctx <= 64 && m.vocab_size <= 64) {
      ctrl::Model model(ckpt.config().model, *ops, 0);
      ckpt.load_parameters(model);
      if (ckpt.has_optimizer_state(ckpt.config().train.optimizer)) {
        // As a resume reads it, in pieces that cut across tensors.
        const ctrl::ParamLayout& layout = model.layout();
        ctrl::Optimizer optimizer(ckpt.config().train, layout, *ops);
        optimizer.load_state([&](const std::string& name, size_t begin, size_t count,
                                 float* out) { ckpt.read_optimizer_state(name, layout, begin, count, out); },
                             7);
        optimizer.set_step_count(ckpt.optimizer_step());
      }
    }
  } catch (const ctrl::Error&) {
  }
  return 0;
}
